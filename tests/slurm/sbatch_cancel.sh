#!/usr/bin/env bash
# shellcheck disable=SC2034  # `vars` is read by submit_sub (sbatch_lib.sh)
# A user's `scancel JOB` of a running example_pile.sub ends it (issue 27): SIGTERM reaches the
# ranks and the batch script at once, every rank checkpoints at the same step and exits 75 within
# KillWait, and the job ends CANCELLED without requeueing itself (it used to come back PENDING,
# Restarts=1, and with --dependency=singleton hold the user's next job of that name). Submitting
# the same job again resumes from the cancel's checkpoint; USR1 to that job still requeues it, and
# the restart finishes the run (slurm_sbatch_preempt checks that losses match exactly).
#   sbatch_cancel.sh BUILD_DIR REPO_DIR
source "$(dirname "$0")/lib.sh" "$@"
source "$(dirname "$0")/train_lib.sh"
source "$(dirname "$0")/sbatch_lib.sh"
require_cluster
dir="$(scratch)"
prepare_data "$dir/data"
steps=200
ws="$dir/ws"
log="logs/cancel"
run="$ws/$log"
mapfile -t vars < <(sub_env "$dir" "$log" "MAX_STEPS=$steps")

# --- scancel: CANCELLED, a checkpoint, no requeue ------------------------------------------------
id="$(submit_sub "$dir/cancel.out" -N 2 "$SUB_DIR/example_pile.sub")"
out="$ws/output/output-$id-0-0.txt"
if ! wait_step "$id" "$out" 8; then
  bad "job $id did not reach step 8 ($(job_field "$id" JobState))"
  show_tail "$dir/cancel.out"
  show_tail "$out"
  finish
  exit
fi
start=$SECONDS
t scancel "$id"
end_job "$id" 60
ended=$SECONDS ended_at=$EPOCHREALTIME
stopped="$(grep -Eo 'stopped after step [0-9]+ on signal 15' "$out" | grep -Eo '[0-9]+' | head -n 1)"
ckpt="$run/checkpoints/$(printf 'step_%08d' "${stopped:-0}")"
# The checkpoint directory is renamed into place only once every rank's files are written.
if [[ -n "$stopped" ]] && ((stopped < steps)) && [[ -d "$ckpt" ]]; then
  ok "scancel: the ranks stopped after step $stopped on SIGTERM; $(basename "$ckpt") committed"
else
  bad "scancel: no common stop with a checkpoint (stopped '${stopped}', $ckpt)"
  grep -h 'stopped\|error' "$ws"/output/output-"$id"-*.txt | sed 's/^/  | /'
  ls "$run/checkpoints" 2>&1 | sed 's/^/  | /'
fi

# --- the same job again: it starts (singleton: nothing holds it) and resumes; USR1 requeues ----
# Submitted at once; the cancelled job is checked 4 s after it ended, while this one starts.
id2="$(submit_sub "$dir/again.out" -N 2 "$SUB_DIR/example_pile.sub")"
out2="$ws/output/output-$id2-0-0.txt"
# A requeue would show 4 s after the end: PENDING again, Restarts=1.
sleep "$(awk -v e="$ended_at" -v n="$EPOCHREALTIME" 'BEGIN { d = e + 4 - n; print (d > 0 ? d : 0) }')"
state="$(job_field "$id" JobState)"
restarts="$(job_field "$id" Restarts)"
if [[ "$JOB_STATE" == CANCELLED && "$state" == CANCELLED && "$restarts" == 0 ]]; then
  ok "scancel: job $id ended CANCELLED in $((ended - start)) s and stayed so for 4 s, Restarts=0"
else
  bad "scancel: job $id ended '$JOB_STATE', now '$state', Restarts '$restarts'"
  show_tail "$dir/cancel.out"
  daemon_log_lines "$id"
fi
if grep -q 'caught SIGTERM' "$dir/cancel.out" &&
  grep -q "not requeueing job $id: it was cancelled" "$dir/cancel.out" &&
  ! grep -q "requeueing job $id (restart" "$dir/cancel.out"; then
  ok "scancel: the batch script caught SIGTERM and says it does not requeue a cancelled job"
else
  bad "scancel: the batch output lacks the cancel lines (or requeued)"
  show_tail "$dir/cancel.out"
fi
if wait_step "$id2" "$out2" $((${stopped:-0} + 8)) &&
  grep -q "resumed from step ${stopped:-x} " "$out2"; then
  ok "submitted again: job $id2 started and resumed from step $stopped"
else
  bad "submitted again: job $id2 did not resume from step '${stopped}' ($(job_field "$id2" JobState))"
  show_tail "$dir/again.out"
  show_tail "$out2"
fi
t scancel --batch --signal=USR1 "$id2"
start_requeued "$id2"
end_job "$id2" 120
restarts="$(job_field "$id2" Restarts)"
if [[ "$JOB_STATE" == COMPLETED && "$JOB_EXIT" == 0:0 && "$restarts" == 1 ]] &&
  grep -q "requeueing job $id2" "$dir/again.out" && grep -q "step $steps/$steps" "$out2"; then
  ok "USR1: job $id2 requeued itself once, resumed and COMPLETED 0:0 at step $steps"
else
  bad "USR1: job $id2 ended $JOB_STATE $JOB_EXIT, restarts '$restarts'"
  show_tail "$dir/again.out"
  show_tail "$out2"
  daemon_log_lines "$id2"
fi
finish
