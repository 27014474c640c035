#!/usr/bin/env bash
# shellcheck disable=SC2034  # `vars` is read by submit_sub (sbatch_lib.sh)
# Preemption of example_pile.sub: SIGUSR1 to the batch script mid-run (what `#SBATCH
# --signal=B:USR1@300` delivers before the time limit) → the script forwards it to the step →
# every rank checkpoints at the same step and exits 75 → the script requeues the job → the
# requeued run (SLURM_RESTART_COUNT=1) resumes from that checkpoint and finishes with exactly the
# losses of an uninterrupted job (CPU ranks are bit-exact). In both launch modes.
#   sbatch_preempt.sh BUILD_DIR REPO_DIR
source "$(dirname "$0")/lib.sh" "$@"
source "$(dirname "$0")/train_lib.sh"
source "$(dirname "$0")/sbatch_lib.sh"
require_cluster
dir="$(scratch)"
prepare_data "$dir/data"
# Long enough that the signal, sent at step 8, reaches the ranks well before the last step also
# on a loaded machine (a step takes 25-50 ms here).
steps=200
ws="$dir/ws"

mapfile -t vars < <(sub_env "$dir" logs/reference "MAX_STEPS=$steps")
id="$(submit_sub "$dir/reference.out" -N 2 "$SUB_DIR/example_pile.sub")"
end_job "$id" 90
if ! job_completed "the uninterrupted job" "$id" "$dir/reference.out" \
  "$ws/output/output-$id-0-0.txt"; then
  finish
  exit
fi
ref="$(step_losses "$ws/logs/reference")"

for mode in srun ax-launch; do
  log="logs/preempted-$mode"
  mapfile -t vars < <(sub_env "$dir" "$log" "MAX_STEPS=$steps" "AX_LAUNCH_MODE=$mode")
  id="$(submit_sub "$dir/$mode.out" -N 2 "$SUB_DIR/example_pile.sub")"
  out="$ws/output/output-$id-0-0.txt"
  start=$SECONDS
  # Rank 0's output shows the steps (ax-launch prefixes them with [r0]).
  until grep -Eq '^(\[r0\] )?step +8/' "$out" 2>/dev/null; do
    case "$(job_field "$id" JobState)" in
      COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL) break ;;
    esac
    ((SECONDS - start > 60)) && break
    sleep 0.1
  done
  t scancel --batch --signal=USR1 "$id"
  # The script requeues the job; Slurm would hold it back for 2 minutes.
  start_requeued "$id"
  if [[ -z "$REQUEUE_STATE" ]]; then
    bad "$mode mode: job $id is gone (it ended without a requeue more than MinJobAge ago)"
    show_tail "$dir/$mode.out"
    continue
  fi
  end_job "$id" 90
  restarts="$(job_field "$id" Restarts)"
  if [[ "$JOB_STATE" == COMPLETED && "$JOB_EXIT" == 0:0 && "$restarts" == 1 ]]; then
    ok "$mode mode: USR1 -> requeued once -> job $id COMPLETED 0:0 ($((SECONDS - start)) s)"
  else
    bad "$mode mode: job $id ended $JOB_STATE, exit $JOB_EXIT, restarts '$restarts'"
    show_tail "$dir/$mode.out"
    show_tail "$out"
    daemon_log_lines "$id"
    continue
  fi
  stopped="$(grep -Eo 'stopped after step [0-9]+ on signal 10' "$out" | grep -Eo '[0-9]+' |
    head -n 1)"
  if [[ -n "$stopped" ]] && ((stopped < steps)) &&
    grep -q "resumed from step $stopped " "$out" &&
    grep -q "restart 1 of Slurm job $id (SLURM_RESTART_COUNT)" "$out"; then
    ok "$mode mode: stopped at step $stopped with a checkpoint; restart 1 resumed from it"
  else
    bad "$mode mode: no stop/resume at the same step (stopped '${stopped}')"
    grep -E 'stopped|resumed|restart' "$out" | sed 's/^/  | /'
  fi
  if grep -q 'caught SIGUSR1' "$dir/$mode.out" && grep -q "requeueing job $id" "$dir/$mode.out" &&
    grep -q 'restart 1 (SLURM_RESTART_COUNT)' "$dir/$mode.out"; then
    ok "$mode mode: the batch script caught USR1, forwarded it, requeued, and logged restart 1"
  else
    bad "$mode mode: the batch output lacks the signal/requeue/restart lines"
    show_tail "$dir/$mode.out"
  fi
  got="$(step_losses "$ws/$log")"
  if [[ -n "$ref" && "$got" == "$ref" ]]; then
    ok "$mode mode: steps 1..$steps logged once each, losses identical to the uninterrupted job"
  else
    bad "$mode mode: the losses differ from the uninterrupted job's"
    diff <(echo "$ref") <(echo "$got") | head -n 10 | sed 's/^/  | /'
  fi
done
finish
