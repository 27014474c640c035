#!/bin/bash
# GPT pretraining on one node (an interactive node, or inside a container) with the positional
# arguments of Pax's run_pile_singlenode.sh, run by ax-launch (one ax-train per GPU):
#
#   bash run_pile_singlenode.sh <DATA_DIR> <VOCAB_PATH> [PRECISION=bfloat16] [NUM_GPUS=8] \
#     [PERCORE_BATCH_SIZE=4] [LOGDIR=test_logdir]
#
# DATA_DIR holds ax-data shards (index.json, or train/ and val/). PRECISION is bfloat16 (bf16) or
# float32 (fp32), ax-train's train.precision. The mesh is the original's pure data parallelism
# (ICI_MESH_SHAPE=[NUM_GPUS,1,1]) unless ICI_MESH_SHAPE is set. Environment: CONFIG (Pile126M),
# MAX_STEPS (or MAX_STEP), AX_BIN, AX_TRAIN_ARGS (docs/job-scripts.md). LOGDIR
# receives checkpoints, metrics.jsonl, TensorBoard events, logs/rank_<r>.log and pile_output.log.
# The exit status is ax-launch's: 0 done, 75 stopped at a checkpoint by Ctrl-C/SIGTERM/SIGUSR1 (run
# again to resume), anything else failed.
set -uo pipefail

AX_SBATCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=sbatch/ax_job.sh
source "$AX_SBATCH_DIR/ax_job.sh"
ax_warn_unknown_vars run_pile_singlenode.sh "$AX_SINGLENODE_VARS"

if (($# < 2 || $# > 6)); then
  echo "usage: $0 <DATA_DIR> <VOCAB_PATH> [PRECISION=bfloat16] [NUM_GPUS=8]" \
    "[PERCORE_BATCH_SIZE=4] [LOGDIR=test_logdir]" >&2
  exit 2
fi
DATA_DIR="$1"
VOCAB_PATH="$2"
# shellcheck disable=SC2034 # ax_precision reads it by name
PREC="${3:-bfloat16}"
NUM_GPUS="${4:-8}"
PERCORE_BATCH_SIZE="${5:-4}"
LOG_DIR="${6:-test_logdir}"
CONFIG="${CONFIG:-Pile126M}"
AX_LAUNCH_MODE=ax-launch
AX_FORWARD="kill" # the launcher is this script's child, also inside an allocation

[[ -d "$DATA_DIR" ]] || ax_error "DATA_DIR (\$1)='$DATA_DIR': no such directory"
ax_shards_subdir DATA_DIR shards_subdir
[[ -f "$VOCAB_PATH" && -r "$VOCAB_PATH" ]] ||
  ax_error "VOCAB_PATH (\$2)='$VOCAB_PATH': no such readable file (the SentencePiece model)"
ax_precision PREC precision "PRECISION (\$3)"
ax_check_uint NUM_GPUS 1
ax_check_positive PERCORE_BATCH_SIZE
ax_max_steps max_steps
ax_mesh_vector ICI_MESH_SHAPE ici
ax_find_binaries
ax_fail_if_errors

mkdir -p "$LOG_DIR" || exit 1
LOG_DIR="$(cd "$LOG_DIR" && pwd)"
data="$(cd "$DATA_DIR" && pwd)${shards_subdir:+/$shards_subdir}"
vocab="$(cd "$(dirname "$VOCAB_PATH")" && pwd)/$(basename "$VOCAB_PATH")"
cmd=("$AX_LAUNCH" --nproc "$NUM_GPUS" --mesh "ici=${ici:--1,1,1};dcn=1,1,1" --run-dir "$LOG_DIR"
  -- "$AX_TRAIN" --experiment "$CONFIG" --data "$data" --tokenizer "$vocab" --run-dir "$LOG_DIR"
  --set "PERCORE_BATCH_SIZE=$PERCORE_BATCH_SIZE" --set "train.precision=$precision")
[[ -n "$max_steps" ]] && cmd+=(--max-steps "$max_steps")
# shellcheck disable=SC2206 # AX_TRAIN_ARGS is a list of ax-train options, split on spaces
[[ -n "${AX_TRAIN_ARGS-}" ]] && cmd+=($AX_TRAIN_ARGS)
ax_singlenode_run "$LOG_DIR/pile_output.log" "$LOG_DIR" "${cmd[@]}"
