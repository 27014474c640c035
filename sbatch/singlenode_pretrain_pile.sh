#!/bin/bash
# T5 v1.1 pretraining on one node (an interactive node, or inside a container) with the positional
# arguments of T5x's singlenode_pretrain_pile.sh, run by ax-launch (one ax-train per GPU):
#
#   VOCAB_PATH=/abs/spm.model TFDS_DATA_DIR=/abs/shards \
#   bash singlenode_pretrain_pile.sh <T5_SIZE> <PREC> <NUM_GPUS> <BSIZE_PER_GPU> <LOG_DIR> \
#     [MODEL_DIR_LOCAL=model_dir] [NUM_MICROBATCHES=0] [ENABLE_FP8=0] [TRANSPOSE_BS=1] \
#     [FUSE_QKV=1] [PACK=0]
#
# T5_SIZE small|base|large|xl|xxl (experiment t5-<size>); PREC bfloat16 (bf16) or float32 (fp32);
# global batch NUM_GPUS x BSIZE_PER_GPU, pure data parallelism as the original. MODEL_DIR_LOCAL
# (relative to the current directory) receives checkpoints, metrics.jsonl, TensorBoard events and
# logs/rank_<r>.log; LOG_DIR the whole output as T5x named it
# (<T5_SIZE>_gpu_<NUM_GPUS>_<PREC>_gbs_<global batch>_fp8_<ENABLE_FP8>_fuseqkv_<FUSE_QKV>_transbs_<TRANSPOSE_BS>.log).
# ENABLE_FP8 defaults to 0 (T5x's 1: ax has no FP8, and 1 is refused); TRANSPOSE_BS and FUSE_QKV
# have no effect. Environment: TFDS_DATA_DIR (the ax-data shards; T5x's hard-coded
# /t5x_home/datasets by default), VOCAB_PATH (required: their SentencePiece model, with T5's
# sentinels), CONFIG (an experiment instead of t5-<T5_SIZE>, e.g. tiny-t5 for tests), TRAIN_STEPS,
# ENC_SL, DEC_SL (the experiment's when unset), AX_BIN, AX_TRAIN_ARGS (docs/job-scripts.md).
# The exit status is ax-launch's: 0 done, 75 stopped at a checkpoint by Ctrl-C/SIGTERM/SIGUSR1 (run
# again to resume), anything else failed.
set -uo pipefail

AX_SBATCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=sbatch/ax_job.sh
source "$AX_SBATCH_DIR/ax_job.sh"
ax_warn_unknown_vars singlenode_pretrain_pile.sh "$AX_T5X_SINGLENODE_VARS"

if (($# < 5 || $# > 11)); then
  echo "usage: $0 <T5_SIZE> <PREC> <NUM_GPUS> <BSIZE_PER_GPU> <LOG_DIR> [MODEL_DIR_LOCAL=model_dir]" \
    "[NUM_MICROBATCHES=0] [ENABLE_FP8=0] [TRANSPOSE_BS=1] [FUSE_QKV=1] [PACK=0]" >&2
  exit 2
fi
# T5x's globals: read by ax_t5x_options by name.
# shellcheck disable=SC2034
{
  T5_SIZE="$1" PREC="$2" NUM_GPUS="$3" BSIZE_PER_GPU="$4" LOG_DIR="$5"
  MODEL_DIR_LOCAL="${6:-model_dir}" NUM_MICROBATCHES="${7:-0}" ENABLE_FP8="${8:-0}"
  TRANSPOSE_BS="${9:-1}" FUSE_QKV="${10:-1}" PACK="${11:-0}"
}
# shellcheck disable=SC2016 # the labels name the positional arguments
AX_LABEL=([T5_SIZE]='T5_SIZE ($1)' [PREC]='PREC ($2)' [NUM_GPUS]='NUM_GPUS ($3)'
  [BSIZE_PER_GPU]='BSIZE_PER_GPU ($4)' [NUM_MICROBATCHES]='NUM_MICROBATCHES ($7)'
  [ENABLE_FP8]='ENABLE_FP8 ($8)' [TRANSPOSE_BS]='TRANSPOSE_BS ($9)' [FUSE_QKV]='FUSE_QKV ($10)'
  [PACK]='PACK ($11)')
TFDS_DATA_DIR="${TFDS_DATA_DIR:-/t5x_home/datasets}"
AX_LAUNCH_MODE=ax-launch
AX_FORWARD="kill" # the launcher is this script's child, also inside an allocation

if [[ -d "$TFDS_DATA_DIR" ]]; then
  ax_shards_subdir TFDS_DATA_DIR shards_subdir
else
  ax_error "TFDS_DATA_DIR='$TFDS_DATA_DIR': no such directory (set it to the ax-data shards)"
fi
if ! ax_is_set VOCAB_PATH; then
  ax_error "VOCAB_PATH is not set: expected the shards' SentencePiece model with T5's sentinels" \
    "(ax-data train-tokenizer --extra-ids 100)"
elif [[ ! -f "$VOCAB_PATH" || ! -r "$VOCAB_PATH" ]]; then
  ax_error "VOCAB_PATH='$VOCAB_PATH': no such readable file (the SentencePiece model)"
fi
ax_check_uint NUM_GPUS 1
ax_check_uint BSIZE_PER_GPU 1
ax_t5x_options
ax_find_binaries
ax_fail_if_errors

mkdir -p "$LOG_DIR" "$MODEL_DIR_LOCAL" || exit 1
LOG_DIR="$(cd "$LOG_DIR" && pwd)"
model_dir="$(cd "$MODEL_DIR_LOCAL" && pwd)"
data="$(cd "$TFDS_DATA_DIR" && pwd)${shards_subdir:+/$shards_subdir}"
vocab="$(cd "$(dirname "$VOCAB_PATH")" && pwd)/$(basename "$VOCAB_PATH")"
bsize=$((10#$NUM_GPUS * 10#$BSIZE_PER_GPU))
log="$LOG_DIR/${T5_SIZE}_gpu_${NUM_GPUS}_${PREC}_gbs_${bsize}_fp8_${ENABLE_FP8}_fuseqkv_${FUSE_QKV}"
log+="_transbs_${TRANSPOSE_BS}.log"
cmd=("$AX_LAUNCH" --nproc "$NUM_GPUS" --mesh "ici=-1,1,1;dcn=1,1,1" --run-dir "$model_dir"
  -- "$AX_TRAIN" --experiment "$CONFIG" --data "$data" --tokenizer "$vocab" --run-dir "$model_dir"
  --set "train.global_batch=$bsize" "${AX_T5X_OPTIONS[@]}")
# shellcheck disable=SC2206 # AX_TRAIN_ARGS is a list of ax-train options, split on spaces
[[ -n "${AX_TRAIN_ARGS-}" ]] && cmd+=($AX_TRAIN_ARGS)
ax_singlenode_run "$log" "$model_dir" "${cmd[@]}"
