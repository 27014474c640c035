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
  preempt_resume "$mode" "$steps" "$ref" "$ws/$log" "$ws/output/output-%j-0-0.txt" \
    "$dir/$mode.out" -N 2 "$SUB_DIR/example_pile.sub"
done
finish
