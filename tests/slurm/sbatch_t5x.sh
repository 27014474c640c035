#!/usr/bin/env bash
# shellcheck disable=SC2034  # `vars` is read by submit_sub (sbatch_lib.sh)
# sbatch/example_slurm_pretrain_pile.sub as users submit it, T5x's way: `sbatch -N 2
# example_slurm_pretrain_pile.sub 2` with T5x's variables, tiny-t5 (CONFIG) on real shards made
# with T5's 100 sentinels, 2 CPU ranks per node. srun mode: the job completes with exit 0, the loss
# falls, the per-task outputs are in T5x's folder (multinode/PRETRAIN-small-bfloat16-N2-n4-...),
# checkpoints, metrics and TensorBoard in BASE_T5X_WORKSPACE_DIR/MODEL_DIR, global batch
# BSIZE_PER_GPU x GPUs. ax-launch mode with DATASET_MAP, TP_SIZE=2, PREC=float32 and
# NUM_MICROBATCHES=2: tensor parallelism over 2 ranks, global batch 4 x 4 / 2. Then
# singlenode_pretrain_pile.sh on one node with T5x's positional arguments.
#   sbatch_t5x.sh BUILD_DIR REPO_DIR
source "$(dirname "$0")/lib.sh" "$@"
source "$(dirname "$0")/train_lib.sh"
source "$(dirname "$0")/sbatch_lib.sh"
require_cluster
dir="$(scratch)"
prepare_data "$dir/data" 100
steps=12
ws="$dir/ws"
sub="$SUB_DIR/example_slurm_pretrain_pile.sub"

# The two 2-node jobs run at the same time (each under its own name: --dependency=singleton holds
# back only jobs of one name), each checked once it ended.
# srun mode: one ax-train per (fake) GPU, $1 = GPUS_PER_NODE.
mapfile -t vars < <(t5x_env "$dir" runs/srun "TRAIN_STEPS=$steps")
id="$(SUB_NAME="$JOB-srun" submit_sub "$dir/srun.out" -N 2 "$sub" 2)"
# ax-launch mode, DATASET_MAP instead of BASE_TFDS_DATA_DIR, tensor parallelism.
mapfile -t vars < <(t5x_env "$dir" runs/tp "TRAIN_STEPS=$steps" AX_LAUNCH_MODE=ax-launch \
  BASE_TFDS_DATA_DIR= "DATASET_MAP=$dir/data/shards:the_pile" TP_SIZE=2 PREC=float32 \
  NUM_MICROBATCHES=2)
id2="$(SUB_NAME="$JOB-tp" submit_sub "$dir/tp.out" -N 2 "$sub" 2)"

end_job "$id" 90
folder="$dir/outputs/multinode/PRETRAIN-small-bfloat16-N2-n4-Step$steps-BS4-MBS1-SL64_16-TP1-FP80"
job_completed "srun mode: sbatch -N 2 example_slurm_pretrain_pile.sub 2" "$id" "$dir/srun.out" \
  "$folder/output-$id-0.txt"
run="$ws/runs/srun"
expect_files "srun mode outputs" "$run/metrics.jsonl" "$run/config.json" \
  "$run/checkpoints/step_$(printf %08d "$steps")/COMMIT" "$folder/output-$id-0.txt" \
  "$folder/output-$id-1.txt" "$folder/output-$id-2.txt" "$folder/output-$id-3.txt"
run_dir_complete "srun mode, TRAIN_STEPS=$steps" "$run" "$steps"
loss_falls "srun mode" "$run"
out0="$folder/output-$id-0.txt"
if grep -q "mesh data=4 fsdp=1 tensor=1" "$out0" && grep -q "GLOBAL_BATCH 16 " "$out0" &&
  grep -q "device: cpu-bf16$" "$out0"; then
  ok "srun mode: T5x's data parallelism over 4 ranks, global batch 4 x 4, PREC=bfloat16"
else
  bad "srun mode: $(grep -oE 'mesh data=[^(]*|GLOBAL_BATCH [0-9]+|device: .*' "$out0" | tr '\n' ' ')"
fi

# ax-launch mode, DATASET_MAP, TP_SIZE=2 (submitted above).
end_job "$id2" 90
folder2="$dir/outputs/multinode/PRETRAIN-small-float32-N2-n4-Step$steps-BS4-MBS2-SL64_16-TP2-FP80"
job_completed "ax-launch mode, DATASET_MAP, TP_SIZE=2" "$id2" "$dir/tp.out" \
  "$folder2/output-$id2-0.txt"
run2="$ws/runs/tp"
expect_files "ax-launch mode outputs" "$run2/metrics.jsonl" \
  "$run2/checkpoints/step_$(printf %08d "$steps")/COMMIT" "$folder2/output-$id2-0.txt" \
  "$folder2/output-$id2-1.txt" "$run2/launch/node1/logs/rank_3.log"
out0="$folder2/output-$id2-0.txt"
if grep -q "mesh data=2 fsdp=1 tensor=2" "$out0" && grep -q "GLOBAL_BATCH 8 " "$out0" &&
  grep -q '"precision": "float32"' "$run2/config.json" &&
  grep -q '"num_microbatches": 2' "$run2/config.json"; then
  ok "ax-launch mode: TP_SIZE=2 splits each replica over 2 ranks, global batch 4 x 4 / 2, float32, 2 microbatches"
else
  bad "ax-launch mode: $(grep -oE 'mesh data=[^(]*|GLOBAL_BATCH [0-9]+' "$out0" | tr '\n' ' ')"
fi
loss_falls "ax-launch mode, TP_SIZE=2" "$run2"

# singlenode_pretrain_pile.sh <T5_SIZE> <PREC> <NUM_GPUS> <BSIZE_PER_GPU> <LOG_DIR> <MODEL_DIR_LOCAL>
(
  cd "$dir" || exit 1
  AX_CPU_THREADS=1 AX_BIN="$BUILD" CONFIG=tiny-t5 TRAIN_STEPS=10 ENC_SL=64 DEC_SL=16 \
    TFDS_DATA_DIR="$dir/data/shards" VOCAB_PATH="$dir/data/spm.model" \
    AX_TRAIN_ARGS="--device=cpu --set=train.eval_every=0 --set=train.checkpoint_every=0" \
    t srun -J "$JOB" -N 1 bash "$SUB_DIR/singlenode_pretrain_pile.sh" small bfloat16 2 4 t5logs \
    single_model >"$dir/single.out" 2>&1
)
rc=$?
log="$dir/t5logs/small_gpu_2_bfloat16_gbs_8_fp8_0_fuseqkv_1_transbs_1.log"
if ((rc == 0)) && grep -q 'Run succeeded!' "$dir/single.out" && grep -q 'done: step 10' "$log"; then
  ok "singlenode_pretrain_pile.sh small bfloat16 2 4 t5logs single_model: exit 0, T5x's log name"
else
  bad "singlenode_pretrain_pile.sh exited $rc"
  show_tail "$dir/single.out"
fi
expect_files "single node: MODEL_DIR_LOCAL contents" "$dir/single_model/metrics.jsonl" \
  "$dir/single_model/checkpoints/step_00000010/COMMIT" "$dir/single_model/logs/rank_1.log"
loss_falls "single node" "$dir/single_model"
finish
