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
# The uninterrupted job runs beside the first preempted one (reference_start).
mapfile -t vars < <(t5x_env "$dir" runs/reference "TRAIN_STEPS=$steps")
reference_start "the uninterrupted job" "$ws/runs/reference" "$dir/reference.out" \
  "$outputs/output-%j-0.txt" -N 2 "$sub" 2

for mode in srun ax-launch; do
  log="runs/preempted-$mode"
  mapfile -t vars < <(t5x_env "$dir" "$log" "TRAIN_STEPS=$steps" "AX_LAUNCH_MODE=$mode")
  preempt_resume "$mode" "$steps" - "$ws/$log" "$outputs/output-%j-0.txt" "$dir/$mode.out" \
    -N 2 "$sub" 2
done
reference_wait
finish
