#!/usr/bin/env bash
# shellcheck disable=SC2034  # `vars` is read by submit_sub (sbatch_lib.sh)
# Preemption of example_slurm_pretrain_pile.sub (T5x's interface, tiny-t5 on 2 nodes): SIGUSR1 to
# the batch script mid-run → the script forwards it to the step → every rank checkpoints at the
# same step and exits 75 → the script requeues the job → the requeued run (SLURM_RESTART_COUNT=1)
# resumes from that checkpoint and finishes with exactly the losses of an uninterrupted job (CPU
# ranks are bit-exact; the span corruption of an example depends only on its index). In both
# launch modes.
#   sbatch_t5x_preempt.sh BUILD_DIR REPO_DIR
source "$(dirname "$0")/lib.sh" "$@"
source "$(dirname "$0")/train_lib.sh"
source "$(dirname "$0")/sbatch_lib.sh"
require_cluster
dir="$(scratch)"
prepare_data "$dir/data" 100
sub="$SUB_DIR/example_slurm_pretrain_pile.sub"
# Long enough that the signal, sent at step 8, reaches the ranks well before the last step also
# on a loaded machine (a tiny-t5 step takes 15-50 ms here).
steps=200
ws="$dir/ws"

# T5x's output folder of these jobs (the same for all: the variables that name it do not change).
outputs="$dir/outputs/multinode/PRETRAIN-small-bfloat16-N2-n4-Step$steps-BS4-MBS1-SL64_16-TP1-FP80"
mapfile -t vars < <(t5x_env "$dir" runs/reference "TRAIN_STEPS=$steps")
id="$(submit_sub "$dir/reference.out" -N 2 "$sub" 2)"
end_job "$id" 90
ref_out="$outputs/output-$id-0.txt"
if ! job_completed "the uninterrupted job" "$id" "$dir/reference.out" "$ref_out"; then
  finish
  exit
fi
ref="$(step_losses "$ws/runs/reference")"

for mode in srun ax-launch; do
  log="runs/preempted-$mode"
  mapfile -t vars < <(t5x_env "$dir" "$log" "TRAIN_STEPS=$steps" "AX_LAUNCH_MODE=$mode")
  id="$(submit_sub "$dir/$mode.out" -N 2 "$sub" 2)"
  out="$outputs/output-$id-0.txt"
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
