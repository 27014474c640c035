#!/usr/bin/env bash
# shellcheck disable=SC2034  # `vars` is read by submit_sub (sbatch_lib.sh)
# sbatch/example_fuji.sub with AXLearn's knobs on tiny-llama: `sbatch -N 2`, 2 CPU ranks per node,
# mesh ICI_TP=2 (tensor parallel inside the node, data parallel across), GA=2 micro-batches,
# GBS=16, SEQ_LEN=32, MAX_STEPS=8 (Pax's name, which the script once ignored: it read only
# AXLearn's MAX_STEP; both work now), a checkpoint every 4 steps and a summary every 2. The job
# completes with exit 0, the loss falls, and the trainer directory holds what the knobs say.
#   sbatch_fuji.sh BUILD_DIR REPO_DIR
source "$(dirname "$0")/lib.sh" "$@"
source "$(dirname "$0")/train_lib.sh"
source "$(dirname "$0")/sbatch_lib.sh"
require_cluster
dir="$(scratch)"
prepare_data "$dir/data"
ws="$dir/ws"
vars=(AX_CPU_THREADS=1 "AX_BIN=$BUILD" "BASE_WORKSPACE_DIR=$ws"
  "BASE_TFDS_DATA_DIR=$dir/data/shards" "BASE_VOCAB_PATH=$dir/data/spm.model" CONFIG=tiny-llama
  GPUS_PER_NODE=2 ICI_TP=2 GA=2 GBS=16 SEQ_LEN=32 MAX_STEPS=8 SAVE_CHECKPOINT_STEPS=4
  WRITE_SUMMARY_STEPS=2
  "AX_TRAIN_ARGS=--device=cpu --set=train.eval_every=0")
id="$(submit_sub "$dir/fuji.out" -N 2 "$SUB_DIR/example_fuji.sub")"
end_job "$id" 90
out="$ws/output/output-$id-0-0.txt"
job_completed "sbatch -N 2 example_fuji.sub (tiny-llama)" "$id" "$dir/fuji.out" "$out"
run="$ws/logs/tiny-llama/trainer-dir"
expect_files "trainer directory (TRAINER_DIR default) and per-task outputs" "$run/metrics.jsonl" \
  "$run/checkpoints/step_00000004/COMMIT" "$run/checkpoints/step_00000008/COMMIT" \
  "$ws/output/output-$id-0-0.txt" "$ws/output/output-$id-1-3.txt"
logged="$(step_losses "$run" | cut -d' ' -f1 | tr '\n' ' ')"
if [[ "$logged" == "1 2 4 6 8 " ]]; then
  ok "WRITE_SUMMARY_STEPS=2: summaries at steps $logged"
else
  bad "summaries at steps '$logged', want 1 2 4 6 8"
fi
if grep -q 'mesh data=2 fsdp=1 tensor=2' "$out" &&
  grep -q 'GLOBAL_BATCH 16 = 2 replica(s) x 2 micro-batch(es) of 4 x 32 tokens' "$out"; then
  ok "ICI_TP=2, GA=2, GBS=16, SEQ_LEN=32 reached the trainer"
else
  bad "mesh or batch not as the knobs say"
  grep -E 'mesh data|GLOBAL_BATCH' "$out" | sed 's/^/  | /'
fi
loss_falls "tiny-llama" "$run"
finish
