# shellcheck shell=bash
# Part of sbatch/ax_job.sh (which sources it): T5x's knobs as ax-train options (ax_t5x_options,
# for example_slurm_pretrain_pile.sub, example_slurm_ft_frompile.sub and the two single-node T5
# scripts) and T5x's fine-tuning: FT_TASK, the pretrained weights, the task's data and recipe.

# ax_t5x_options: checks the T5x knobs both T5 scripts take: T5_SIZE, PREC, NUM_MICROBATCHES,
# ENABLE_FP8, TRANSPOSE_BS, FUSE_QKV, PACK (set by the caller, defaults included), and ENC_SL,
# DEC_SL and TRAIN_STEPS when set; sets AX_T5X_OPTIONS to the ax-train options they make and CONFIG
# to t5-<T5_SIZE> unless CONFIG is set (tiny-t5 for tests). docs/job-scripts.md says why each maps
# as it does.
ax_t5x_options() {
  AX_T5X_OPTIONS=()
  local precision=""
  if ax_check_enum T5_SIZE small base large xl xxl; then
    CONFIG="${CONFIG:-t5-$T5_SIZE}"
  fi
  [[ "${CONFIG-}" =~ ^[A-Za-z0-9._-]*$ ]] ||
    ax_error "CONFIG='$CONFIG': expected an experiment name (ax-train --list-experiments)"
  ax_precision PREC precision
  [[ -n "$precision" ]] && AX_T5X_OPTIONS+=(--set "train.precision=$precision")
  # T5x's NUM_MICROBATCHES 0 (the single-node default) means no microbatching, as 1 does.
  ax_check_uint NUM_MICROBATCHES 0 &&
    AX_T5X_OPTIONS+=(--set "NUM_MICROBATCHES=$((10#$NUM_MICROBATCHES > 0 ? 10#$NUM_MICROBATCHES : 1))")
  if ax_check_enum ENABLE_FP8 0 1 && [[ "$ENABLE_FP8" == 1 ]]; then
    ax_error "$(ax_label ENABLE_FP8)=1: FP8 training is not implemented in ax; expected 0 (ax's" \
      "default; T5x's was 1)"
  fi
  ax_check_enum TRANSPOSE_BS 0 1 # layouts of NVIDIA's TE layers: no effect in ax
  ax_check_enum FUSE_QKV 0 1
  # PACK=1: T5x packs examples that already fill ENC_SL, one per row, as ax's loader makes them;
  # k >= 2 (ax's own) packs k examples of ENC_SL/k inputs into each row.
  ax_check_uint PACK 0 && ((10#$PACK >= 2)) &&
    AX_T5X_OPTIONS+=(--set "train.pack_examples=$((10#$PACK))")
  ax_check_uint ENC_SL 1 && ax_is_set ENC_SL &&
    AX_T5X_OPTIONS+=(--set "train.encoder_seq_len=$((10#$ENC_SL))")
  ax_check_uint DEC_SL 1 && ax_is_set DEC_SL && AX_T5X_OPTIONS+=(--set "train.seq_len=$((10#$DEC_SL))")
  ax_check_uint TRAIN_STEPS 1 && ax_is_set TRAIN_STEPS &&
    AX_T5X_OPTIONS+=(--max-steps "$((10#$TRAIN_STEPS))")
  return 0
}

# ax_t5x_ft_task: checks FT_TASK (T5x's mnli2 or squad1) and sets what the task implies:
# AX_FT_EVAL_TASK (its name for ax-data convert-task and ax-train eval), ENC_SL and DEC_SL when
# unset (the recipe's TASK_FEATURE_LENGTHS: mnli2 512/16, squad1 956/256) and AX_FT_DECAY_END
# (optim.decay_steps: 1000 + 0.99 / decay_factor, where T5x's linear_decay of its decay_factor,
# 1.67e-5 or 3.75e-5 per step, reaches min_learning_rate 1e-5 = 0.01 x 1e-3; docs/job-scripts.md).
ax_t5x_ft_task() {
  AX_FT_EVAL_TASK="" AX_FT_DECAY_END=""
  ax_check_enum FT_TASK mnli2 squad1 || return 0
  if [[ "$FT_TASK" == mnli2 ]]; then
    AX_FT_EVAL_TASK=mnli AX_FT_DECAY_END=60281 ENC_SL="${ENC_SL:-512}" DEC_SL="${DEC_SL:-16}"
  else
    AX_FT_EVAL_TASK=squad AX_FT_DECAY_END=27400 ENC_SL="${ENC_SL:-956}" DEC_SL="${DEC_SL:-256}"
  fi
}

# ax_check_init_from NAME [LABEL]: the directory NAME names (when it exists) is what --init-from
# reads: an ax run directory (with checkpoints/), one ax checkpoint (with COMMIT) or a Hugging Face
# T5 directory (config.json).
ax_check_init_from() {
  local v="${!1-}" label="${2:-$1}"
  [[ -d "$v" ]] || return 0
  [[ -d "$v/checkpoints" || -f "$v/COMMIT" || -f "$v/config.json" ]] && return 0
  ax_error "$label='$v': expected the pretrained model: an ax run directory (with checkpoints/)," \
    "one of its checkpoints (checkpoints/step_N) or a Hugging Face T5 v1.1 directory (config.json)"
}

# ax_t5x_ft_options INIT EVAL_DATA: after ax_t5x_options and ax_t5x_ft_task, adds T5x's
# fine-tuning recipe (configs/runs/finetune_*.gin) to AX_T5X_OPTIONS: the weights of INIT (as the
# step sees it), dropout 0.1, lr 1e-3 decaying linearly as T5x's schedule after its restored step
# does, validation every 1000 steps over 20 batches, a checkpoint every 5000, PACK (0 or 1) as
# train.pack_seq2seq; and the task metric during training when EVAL_DATA (the task's converted
# validation jsonl) is not empty.
ax_t5x_ft_options() {
  local init="$1" eval_data="$2" packed=false
  [[ "${PACK-}" == 1 ]] && packed=true
  AX_T5X_OPTIONS+=(--init-from "$init" --set model.dropout=0.1 --set optim.lr=0.001
    --set optim.warmup_steps=0 --set optim.schedule=linear --set optim.min_lr_ratio=0.01
    --set "optim.decay_steps=$AX_FT_DECAY_END" --set train.eval_every=1000
    --set train.eval_batches=20 --set train.checkpoint_every=5000
    --set "train.pack_seq2seq=$packed")
  [[ -n "$eval_data" ]] && AX_T5X_OPTIONS+=(--set "train.eval_task=$AX_FT_EVAL_TASK"
    --set "train.eval_task_data=$eval_data")
  return 0
}

# ax_ft_task_dir NAME OUT [LABEL]: the fine-tuning task directory NAME names must hold train/
# (ax-data seq2seq shards); sets OUT to validation.jsonl in it when that file exists, else "".
ax_ft_task_dir() {
  local v="${!1-}" label="${3:-$1}"
  printf -v "$2" '%s' ""
  ax_is_set "$1" && [[ -d "$v" ]] || return 0
  if [[ ! -f "$v/train/index.json" ]]; then
    ax_error "$label='$v': no train/index.json: expected the task's ax-data seq2seq shards in" \
      "train/ (and validation/ beside it; docs/job-scripts.md \"Fine-tuning data\")"
  elif ! grep -q '"kind": *"seq2seq"' "$v/train/index.json"; then
    ax_error "$label='$v': train/ holds text shards, not seq2seq (inputs, targets) examples:" \
      "make them with 'ax-data tokenize --format seq2seq' from 'ax-data convert-task' output"
  fi
  [[ -f "$v/validation.jsonl" ]] && printf -v "$2" '%s' validation.jsonl
  return 0
}
