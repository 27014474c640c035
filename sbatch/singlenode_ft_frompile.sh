#!/bin/bash
# T5 v1.1 fine-tuning on MNLI or SQuAD on one node (an interactive node, or inside a container)
# with the positional arguments of T5x's singlenode_ft_frompile.sh, run by ax-launch (one ax-train
# per GPU):
#
#   VOCAB_PATH=/abs/spm.model TFDS_DATA_DIR=/abs/ft \
#   bash singlenode_ft_frompile.sh <FT_TASK> <T5_SIZE> <PREC> <NUM_GPUS> <BSIZE_PER_GPU> <LOG_DIR> \
#     [MODEL_DIR_LOCAL=model_dir] [NUM_MICROBATCHES=0] [MAKE_FT_DIR=false] [ENABLE_FP8=0] \
#     [TRANSPOSE_BS=1] [FUSE_QKV=1] [PACK=0]
#
# FT_TASK mnli2|squad1: its data is TFDS_DATA_DIR/<FT_TASK> (train/ and validation/ seq2seq shards,
# validation.jsonl for the task metric; docs/job-scripts.md). MODEL_DIR_LOCAL (relative to the
# current directory) is the pretraining run the weights come from (--init-from). T5x fine-tuned
# inside it; ax fine-tunes in a run directory of its own: <MODEL_DIR_LOCAL>_<FT_TASK>
# (MAKE_FT_DIR=false; the same command resumes it) or ft_<MODEL_DIR_LOCAL>_<date> (true, T5x's
# name for its copy: a new run each time). Global batch NUM_GPUS x BSIZE_PER_GPU, data parallel.
# T5x's recipe: dropout 0.1, lr 1e-3 decaying linearly, validation (and the task metric) every
# 1000 steps. LOG_DIR receives the output as T5x named it
# (ft_<T5_SIZE>_gpu_<NUM_GPUS>_<PREC>_gbs_<global batch>_fp8_<ENABLE_FP8>_fuseqkv_<FUSE_QKV>_transbs_<TRANSPOSE_BS>.log).
# ENABLE_FP8 defaults to 0 (1 is refused); TRANSPOSE_BS and FUSE_QKV have no effect; PACK 1 packs
# examples. Environment: TFDS_DATA_DIR (/t5x_home/datasets by default), VOCAB_PATH (required: the
# pretrained model's SentencePiece model), CONFIG (an experiment instead of t5-<T5_SIZE>),
# TRAIN_STEPS (15000), ENC_SL, DEC_SL (the task's: 512/16, 956/256), AX_BIN, AX_TRAIN_ARGS.
# The exit status is ax-launch's: 0 done, 75 stopped at a checkpoint by Ctrl-C/SIGTERM/SIGUSR1 (run
# again to resume), anything else failed.
set -uo pipefail

AX_SBATCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=sbatch/ax_job.sh
source "$AX_SBATCH_DIR/ax_job.sh"
ax_warn_unknown_vars singlenode_ft_frompile.sh "$AX_T5X_SINGLENODE_VARS"

if (($# < 6 || $# > 13)); then
  echo "usage: $0 <FT_TASK> <T5_SIZE> <PREC> <NUM_GPUS> <BSIZE_PER_GPU> <LOG_DIR>" \
    "[MODEL_DIR_LOCAL=model_dir] [NUM_MICROBATCHES=0] [MAKE_FT_DIR=false] [ENABLE_FP8=0]" \
    "[TRANSPOSE_BS=1] [FUSE_QKV=1] [PACK=0]" >&2
  exit 2
fi
# T5x's globals: read by ax_t5x_options and ax_t5x_ft_task by name.
# shellcheck disable=SC2034
{
  FT_TASK="$1" T5_SIZE="$2" PREC="$3" NUM_GPUS="$4" BSIZE_PER_GPU="$5" LOG_DIR="$6"
  MODEL_DIR_LOCAL="${7:-model_dir}" NUM_MICROBATCHES="${8:-0}" MAKE_FT_DIR="${9:-false}"
  ENABLE_FP8="${10:-0}" TRANSPOSE_BS="${11:-1}" FUSE_QKV="${12:-1}" PACK="${13:-0}"
}
# shellcheck disable=SC2016 # the labels name the positional arguments
AX_LABEL=([FT_TASK]='FT_TASK ($1)' [T5_SIZE]='T5_SIZE ($2)' [PREC]='PREC ($3)'
  [NUM_GPUS]='NUM_GPUS ($4)' [BSIZE_PER_GPU]='BSIZE_PER_GPU ($5)'
  [NUM_MICROBATCHES]='NUM_MICROBATCHES ($8)' [MAKE_FT_DIR]='MAKE_FT_DIR ($9)'
  [ENABLE_FP8]='ENABLE_FP8 ($10)' [TRANSPOSE_BS]='TRANSPOSE_BS ($11)' [FUSE_QKV]='FUSE_QKV ($12)'
  [PACK]='PACK ($13)')
TFDS_DATA_DIR="${TFDS_DATA_DIR:-/t5x_home/datasets}"
TRAIN_STEPS="${TRAIN_STEPS:-15000}"
AX_LAUNCH_MODE=ax-launch
AX_FORWARD="kill" # the launcher is this script's child, also inside an allocation

ax_t5x_ft_task
task_dir="" eval_file=""
if [[ ! -d "$TFDS_DATA_DIR" ]]; then
  ax_error "TFDS_DATA_DIR='$TFDS_DATA_DIR': no such directory (set it to the directory holding" \
    "<FT_TASK>/train and <FT_TASK>/validation)"
elif [[ -n "$AX_FT_EVAL_TASK" ]]; then
  task_dir="$TFDS_DATA_DIR/$FT_TASK"
  if [[ -d "$task_dir" ]]; then
    ax_ft_task_dir task_dir eval_file "TFDS_DATA_DIR/$FT_TASK"
  else
    ax_error "TFDS_DATA_DIR='$TFDS_DATA_DIR': no $FT_TASK/ in it (the task's seq2seq shards)"
  fi
fi
if ! ax_is_set VOCAB_PATH; then
  ax_error "VOCAB_PATH is not set: expected the pretrained model's SentencePiece model"
elif [[ ! -f "$VOCAB_PATH" || ! -r "$VOCAB_PATH" ]]; then
  ax_error "VOCAB_PATH='$VOCAB_PATH': no such readable file (the SentencePiece model)"
fi
if [[ ! -d "$MODEL_DIR_LOCAL" ]]; then
  ax_error "MODEL_DIR_LOCAL (\$7)='$MODEL_DIR_LOCAL': no such directory (the pretraining run)"
elif [[ -f "$MODEL_DIR_LOCAL/COMMIT" ]]; then
  ax_error "MODEL_DIR_LOCAL (\$7)='$MODEL_DIR_LOCAL' is one checkpoint: expected the pretraining" \
    "run directory (its newest checkpoint is used), as T5x's MODEL_DIR_LOCAL"
else
  ax_check_init_from MODEL_DIR_LOCAL "MODEL_DIR_LOCAL (\$7)"
fi
ax_check_enum MAKE_FT_DIR true false
ax_check_enum PACK 0 1
ax_check_uint NUM_GPUS 1
ax_check_uint BSIZE_PER_GPU 1
ax_t5x_options
ax_find_binaries
ax_fail_if_errors

mkdir -p "$LOG_DIR" || exit 1
LOG_DIR="$(cd "$LOG_DIR" && pwd)"
init="$(cd "$MODEL_DIR_LOCAL" && pwd)"
if [[ "$MAKE_FT_DIR" == true ]]; then
  ft_dir="$PWD/ft_$(basename "$init")_$(date +%F_%H-%M-%S)"
else
  ft_dir="${init}_$FT_TASK"
fi
mkdir -p "$ft_dir" || exit 1
task_dir="$(cd "$task_dir" && pwd)"
vocab="$(cd "$(dirname "$VOCAB_PATH")" && pwd)/$(basename "$VOCAB_PATH")"
ax_t5x_ft_options "$init" "${eval_file:+$task_dir/$eval_file}"
bsize=$((10#$NUM_GPUS * 10#$BSIZE_PER_GPU))
log="$LOG_DIR/ft_${T5_SIZE}_gpu_${NUM_GPUS}_${PREC}_gbs_${bsize}_fp8_${ENABLE_FP8}"
log+="_fuseqkv_${FUSE_QKV}_transbs_${TRANSPOSE_BS}.log"
if [[ -n "${eval_file-}" ]]; then
  ax_log "$FT_TASK: $AX_FT_EVAL_TASK metrics on $task_dir/$eval_file at each validation"
else
  ax_log "$FT_TASK: no $task_dir/validation.jsonl: validation loss only (no task metric)"
fi
cmd=("$AX_LAUNCH" --nproc "$NUM_GPUS" --mesh "ici=-1,1,1;dcn=1,1,1" --run-dir "$ft_dir"
  -- "$AX_TRAIN" --experiment "$CONFIG" --data "$task_dir/train" --tokenizer "$vocab"
  --run-dir "$ft_dir" --set "train.global_batch=$bsize" "${AX_T5X_OPTIONS[@]}")
# shellcheck disable=SC2206 # AX_TRAIN_ARGS is a list of ax-train options, split on spaces
[[ -n "${AX_TRAIN_ARGS-}" ]] && cmd+=($AX_TRAIN_ARGS)
ax_singlenode_run "$log" "$ft_dir" "${cmd[@]}"
