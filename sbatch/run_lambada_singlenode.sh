#!/bin/bash
# Zero-shot Lambada evaluation of a GPT run on one node (an interactive node, or inside a
# container) with the positional arguments of Pax's run_lambada_singlenode.sh, run by ax-launch
# (one `ax-train eval` per GPU, each scoring its share of the batches):
#
#   bash run_lambada_singlenode.sh <DATA_DIR> <VOCAB_PATH> <PRECISION> <NUM_GPUS> \
#     <PERCORE_BATCH_SIZE> <LOGDIR>
#
# DATA_DIR holds lambada.jsonl (`ax-data convert-task --task lambada`; or give that file itself).
# LOGDIR is required: the pretraining run (run_pile_singlenode.sh's LOGDIR), whose newest
# checkpoint is evaluated with its own config and tokenizer. VOCAB_PATH must be a readable file
# (the tokenizer the run was trained with; the run's own is used). PRECISION is checked, bfloat16
# or float32, and otherwise unused: the run's train.precision decides. PERCORE_BATCH_SIZE texts are
# scored at a time on each rank. The score (last-word accuracy and perplexity) is printed,
# appended to LOGDIR/metrics.jsonl and TensorBoard, the predictions go to
# LOGDIR/predictions/lambada_step_<N>.jsonl, the output to LOGDIR/lambada_output.log and the ranks'
# logs to LOGDIR/lambada/logs. Environment: AX_BIN, AX_TRAIN_ARGS (more `ax-train eval` options,
# e.g. --max-examples N). Exit status: 0 done, anything else failed (docs/job-scripts.md).
set -uo pipefail

AX_SBATCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=sbatch/ax_job.sh
source "$AX_SBATCH_DIR/ax_job.sh"
ax_warn_unknown_vars run_lambada_singlenode.sh ""

if (($# != 6)); then
  echo "usage: $0 <DATA_DIR> <VOCAB_PATH> <PRECISION> <NUM_GPUS> <PERCORE_BATCH_SIZE> <LOGDIR>" \
    "(LOGDIR: the pretraining run to evaluate)" >&2
  exit 2
fi
# shellcheck disable=SC2034 # ax_precision reads PREC by name
DATA_DIR="$1" VOCAB_PATH="$2" PREC="$3" NUM_GPUS="$4" PERCORE_BATCH_SIZE="$5" LOG_DIR="$6"
AX_LAUNCH_MODE=ax-launch
AX_FORWARD="kill" # the launcher is this script's child, also inside an allocation

data="$DATA_DIR"
[[ -d "$DATA_DIR" ]] && data="$DATA_DIR/lambada.jsonl"
[[ -f "$data" && -r "$data" ]] || ax_error "DATA_DIR (\$1)='$DATA_DIR': no lambada.jsonl there" \
  "(expected the output of 'ax-data convert-task --task lambada', or that file)"
[[ -f "$VOCAB_PATH" && -r "$VOCAB_PATH" ]] ||
  ax_error "VOCAB_PATH (\$2)='$VOCAB_PATH': no such readable file (the SentencePiece model)"
ax_precision PREC precision "PRECISION (\$3)"
# shellcheck disable=SC2016 # the labels name the positional arguments
AX_LABEL=([NUM_GPUS]='NUM_GPUS ($4)' [PERCORE_BATCH_SIZE]='PERCORE_BATCH_SIZE ($5)')
ax_check_uint NUM_GPUS 1
ax_check_uint PERCORE_BATCH_SIZE 1
[[ -d "$LOG_DIR/checkpoints" ]] || ax_error "LOGDIR (\$6)='$LOG_DIR': no checkpoints/ there" \
  "(expected the pretraining run directory to evaluate)"
ax_find_binaries
# ax-train --help lists its subcommands, eval among them.
if [[ ${#AX_ERRORS[@]} == 0 ]] && ! "$AX_TRAIN" --help 2>/dev/null | grep -qE '^ +eval +'; then
  ax_error "$AX_TRAIN has no 'eval' subcommand: Lambada needs 'ax-train eval --task lambada'" \
    "(docs/evaluation.md); use an ax build that has it"
fi
ax_fail_if_errors

LOG_DIR="$(cd "$LOG_DIR" && pwd)"
data="$(cd "$(dirname "$data")" && pwd)/$(basename "$data")"
cmd=("$AX_LAUNCH" --nproc "$NUM_GPUS" --mesh "ici=-1,1,1;dcn=1,1,1" --run-dir "$LOG_DIR/lambada"
  -- "$AX_TRAIN" eval --run-dir "$LOG_DIR" --task lambada --data "$data"
  --batch "$((10#$PERCORE_BATCH_SIZE))")
# shellcheck disable=SC2206 # AX_TRAIN_ARGS is a list of ax-train eval options, split on spaces
[[ -n "${AX_TRAIN_ARGS-}" ]] && cmd+=($AX_TRAIN_ARGS)
ax_singlenode_run "$LOG_DIR/lambada_output.log" "$LOG_DIR" "${cmd[@]}"
