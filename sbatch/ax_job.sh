# shellcheck shell=bash
# Sourced by every job script in sbatch/ (the Pax, AXLearn and T5x interfaces, tokenize.sub):
# variable checks, where the ax binaries are, the srun command of both launch modes (with or
# without a Pyxis container), and the preemption protocol (trap USR1/TERM, forward to the step,
# requeue on exit 75).
# docs/job-scripts.md describes the variables and the protocol.

AX_ERRORS=()
AX_EXIT_STOPPED=75 # ax-train (and ax-launch): stopped at a checkpoint, run again to resume

ax_log() { echo "ax-job: $*"; }
ax_error() { AX_ERRORS+=("$*"); }

# Every check records "NAME=...: what is wrong; what it expects" and carries on, so one run of the
# script lists every bad variable. ax_fail_if_errors stops the job (status 2) before any srun.
ax_fail_if_errors() {
  ((${#AX_ERRORS[@]} == 0)) && return 0
  local e
  for e in "${AX_ERRORS[@]}"; do echo "ax-job: error: $e" >&2; done
  echo "ax-job: ${#AX_ERRORS[@]} problem(s) with the job's variables; nothing was launched" >&2
  exit 2
}

# Labels for variables that errors should name otherwise, e.g. AX_LABEL[PREC]='PREC ($2)' for a
# script's positional arguments.
declare -A AX_LABEL=()
ax_label() { echo "${AX_LABEL[$1]:-$1}"; }

# ax_is_set NAME: the variable is set and not empty.
ax_is_set() { [[ -n "${!1-}" ]]; }

# ax_require NAME WHAT: NAME must be set; WHAT says what it expects. Returns 1 when unset.
ax_require() {
  ax_is_set "$1" && return 0
  ax_error "$1 is not set: expected $2"
  return 1
}

# ax_check_uint NAME MIN: a whole number >= MIN (when set).
ax_check_uint() {
  local v="${!1-}"
  ax_is_set "$1" || return 0
  if ! [[ "$v" =~ ^[0-9]+$ ]] || ((10#$v < $2)); then
    ax_error "$(ax_label "$1")='$v': expected a whole number >= $2"
    return 1
  fi
}

# ax_check_positive NAME: a number > 0, fractions allowed (PERCORE_BATCH_SIZE with tensor
# parallelism).
ax_check_positive() {
  local v="${!1-}"
  ax_is_set "$1" || return 0
  if ! [[ "$v" =~ ^([0-9]+\.?[0-9]*|\.[0-9]+)$ ]] || ! awk -v x="$v" 'BEGIN { exit !(x > 0) }'; then
    ax_error "$(ax_label "$1")='$v': expected a number > 0 (fractions allowed, e.g. 0.5)"
    return 1
  fi
}

# ax_check_enum NAME VALUE...: one of the VALUEs (when set).
ax_check_enum() {
  local name="$1" v="${!1-}" allowed
  shift
  ax_is_set "$name" || return 0
  for allowed in "$@"; do [[ "$v" == "$allowed" ]] && return 0; done
  local IFS='|'
  ax_error "$(ax_label "$name")='$v': expected one of $*"
  return 1
}

# ax_check_abs_dir NAME [LABEL]: an absolute path of an existing directory; errors name LABEL
# (default NAME).
ax_check_abs_dir() {
  local v="${!1-}" label="${2:-$1}"
  ax_is_set "$1" || return 0
  if [[ "$v" != /* ]]; then
    ax_error "$label='$v': expected an absolute path"
  elif [[ ! -d "$v" ]]; then
    ax_error "$label='$v': no such directory"
  else
    return 0
  fi
  return 1
}

# ax_check_abs_file NAME: an absolute path of a readable file.
ax_check_abs_file() {
  local v="${!1-}"
  ax_is_set "$1" || return 0
  if [[ "$v" != /* ]]; then
    ax_error "$1='$v': expected an absolute path"
  elif [[ ! -f "$v" || ! -r "$v" ]]; then
    ax_error "$1='$v': no such readable file"
  else
    return 0
  fi
  return 1
}

# ax_check_relative NAME BASE: a path relative to BASE (no leading /, no ..).
ax_check_relative() {
  local v="${!1-}"
  ax_is_set "$1" || return 0
  if [[ "$v" == /* || "/$v/" == */../* ]]; then
    ax_error "$1='$v': expected a path relative to $2 (no leading / and no ..)"
    return 1
  fi
}

# ax_mesh_vector NAME OUT: sets OUT to "d,f,t" from NAME's "[8,1,1]", "8,1,1" or "(8, 1, 1)":
# three whole numbers >= 1, or -1 (fill in from the device count); "" when NAME is unset.
ax_mesh_vector() {
  local v="${!1-}" s
  printf -v "$2" '%s' ""
  ax_is_set "$1" || return 0
  s="$(tr -d '[:space:][]()' <<<"$v")"
  if [[ "$s" =~ ^(-1|[1-9][0-9]*),(-1|[1-9][0-9]*),(-1|[1-9][0-9]*)$ && "$s" != *-1*-1* ]]; then
    printf -v "$2" '%s' "$s"
  else
    ax_error "$1='$v': expected three numbers data,fsdp,tensor such as [8,1,1] (at most one -1:" \
      "the rest)"
  fi
}

# ax_max_steps OUT: sets OUT to the run's step count from MAX_STEPS (Pax's name) or MAX_STEP
# (AXLearn's): every script takes both; both set to different counts is an error naming both.
ax_max_steps() {
  printf -v "$1" '%s' ""
  local bad=0
  ax_check_uint MAX_STEPS 1 || bad=1
  ax_check_uint MAX_STEP 1 || bad=1
  ((bad)) && return 0
  if ax_is_set MAX_STEPS && ax_is_set MAX_STEP && ((10#$MAX_STEPS != 10#$MAX_STEP)); then
    ax_error "MAX_STEPS='$MAX_STEPS' and MAX_STEP='$MAX_STEP' are both set, to different step" \
      "counts (MAX_STEPS is Pax's name, MAX_STEP AXLearn's; set one)"
    return 0
  fi
  printf -v "$1" '%s' "${MAX_STEPS:-${MAX_STEP-}}"
}

# ax_precision NAME OUT [LABEL]: sets OUT to ax-train's train.precision from NAME, Pax's PREC
# (its FPROP_DTYPE, the dtype of activations and compute weights): bfloat16 (bf16) or float32
# (fp32). Anything else is an error naming LABEL (default NAME); OUT is then "". Unset: no error
# here (ax_require says it).
ax_precision() {
  local v="${!1-}" label="${3:-$(ax_label "$1")}"
  printf -v "$2" '%s' ""
  case "$v" in
    "") ;;
    bfloat16 | bf16) printf -v "$2" '%s' bfloat16 ;;
    float32 | fp32) printf -v "$2" '%s' float32 ;;
    *)
      ax_error "$label='$v': expected bfloat16 (or bf16: bf16 activations over fp32 master" \
        "weights) or float32 (or fp32: fp32 throughout)"
      ;;
  esac
}

# --- variables that look meant for a script but that it does not read -------------------------

# The variables each script reads (users set them in the environment sbatch exports).
AX_PILE_VARS="BASE_WORKSPACE_DIR BASE_TFDS_DATA_DIR BASE_VOCAB_PATH LOG_DIR_LOCAL OUTPUT_DIR PREC
  GPUS_PER_NODE PERCORE_BATCH_SIZE CONFIG ICI_MESH_SHAPE DCN_MESH_SHAPE MAX_STEPS MAX_STEP
  ENABLE_FP8 ENABLE_TE BASE_SCRIPT CONTAINER CONTAINER_WORKDIR WORKSPACE_DIR TFDS_DATA_DIR
  GPT_VOCAB_PATH"
AX_FUJI_VARS="BASE_WORKSPACE_DIR BASE_TFDS_DATA_DIR BASE_VOCAB_PATH CONFIG GPUS_PER_NODE
  TRAINER_DIR OUTPUT_DIR ICI_DP ICI_FSDP ICI_TP DCN_DP DCN_FSDP DCN_TP ICI_PP ICI_SQP DCN_PP
  DCN_SQP GA GBS SEQ_LEN MAX_STEP MAX_STEPS SAVE_CHECKPOINT_STEPS WRITE_SUMMARY_STEPS CONTAINER
  CONTAINER_WORKDIR WORKSPACE_DIR TFDS_DATA_DIR GPT_VOCAB_PATH"
AX_SINGLENODE_VARS="CONFIG MAX_STEPS MAX_STEP ICI_MESH_SHAPE"
# example_slurm_pretrain_pile.sub (T5x's interface) and singlenode_pretrain_pile.sh.
AX_T5X_VARS="GPUS_PER_NODE T5_SIZE PREC BSIZE_PER_GPU TRAIN_STEPS NUM_MICROBATCHES ENABLE_FP8
  TP_SIZE TRANSPOSE_BS FUSE_QKV PACK ENC_SL DEC_SL BASE_TFDS_DATA_DIR DATASET_MAP
  BASE_T5X_OUTPUTS_DIR BASE_T5X_WORKSPACE_DIR MODEL_DIR BASE_VOCAB_PATH CONTAINER
  CONTAINER_WORKDIR CONFIG CHECKPOINT_DISABLE ADDITIONAL_CLI_ARGS T5X_DIR
  T5X_WORKSPACE_DIR TFDS_DATA_DIR T5X_VOCAB_PATH"
AX_T5X_SINGLENODE_VARS="CONFIG TFDS_DATA_DIR VOCAB_PATH TRAIN_STEPS ENC_SL DEC_SL"
# example_slurm_ft_frompile.sub (T5x's fine-tuning interface; singlenode_ft_frompile.sh reads
# the variables of singlenode_pretrain_pile.sh).
AX_T5X_FT_VARS="$AX_T5X_VARS FT_TASK BASE_CHECKPOINTS_DIR T5X_REFERENCE_CHECKPOINTS_DIR"
# tokenize.sub's own (its generic names, TASKS, FORMAT, ..., are not claimed for the others).
# shellcheck disable=SC2034 # read by tokenize.sub
AX_TOKENIZE_VARS="INPUT_GLOB BASE_VOCAB_PATH SHARDS_DIR LOG_DIR TASKS THREADS FORMAT FIELD
  TEXT_UNIT SHARD_TOKENS SPLIT_BYTES MAX_DOC_BYTES LONG_DOCS SKIP_BAD PROGRESS_SECONDS"
# Every AX_* variable something in ax reads: these scripts, then ax-train's and ax-launch's knobs
# and the launch contract (docs/launch.md) that ax-launch and the plugin set for each rank.
# tests/sbatch/job_scripts_test.sh checks that it covers every AX_* name in the C++ sources.
AX_KNOWN_ENV="AX_BIN AX_LAUNCH_MODE AX_TRAIN_ARGS AX_SRUN_ARGS AX_GRES AX_REQUEUE AX_DRY_RUN
  AX_COORDINATOR_PORT AX_SBATCH_DIR AX_FORWARD AX_DATA_ARGS
  AX_LOG_LEVEL AX_CPU_THREADS AX_CPU_GEMM AX_CUDA_ATTENTION AX_OPENBLAS_CORETYPE AX_TOPOLOGY_FILE
  AX_CHECKPOINT_FAIL_AFTER_BYTES AX_STORE_MAX_KEYS AX_STORE_MAX_BYTES
  AX_RANK AX_WORLD_SIZE AX_LOCAL_RANK AX_LOCAL_WORLD_SIZE AX_NODE_RANK AX_NNODES AX_ICI_MESH
  AX_DCN_MESH AX_DEVICE AX_COORDINATOR AX_JOB_SECRET"

# ax_warn_unknown_vars SCRIPT VARS: one warning (never an error: the environment is the user's) for
# each exported variable that SCRIPT does not read (VARS) but that looks meant for it: an AX_*
# variable nothing in ax reads, another job script's variable, or a name within an edit or two of
# one SCRIPT reads (PERCORE_BATCH for PERCORE_BATCH_SIZE). Names of other software (SLURM_*,
# NCCL_*, ...) and short names are left alone.
ax_warn_unknown_vars() {
  local script="$1" known="$2" line
  while IFS= read -r line; do
    echo "ax-job: warning: $line" >&2
  done < <(compgen -e | awk -v script="$script" -v known="$known" -v ax="$AX_KNOWN_ENV" \
    -v pile="$AX_PILE_VARS" -v fuji="$AX_FUJI_VARS" -v single="$AX_SINGLENODE_VARS" \
    -v t5x="$AX_T5X_VARS" -v t5single="$AX_T5X_SINGLENODE_VARS" -v t5xft="$AX_T5X_FT_VARS" '
    function dist(a, b,   i, j, la, lb, d, c) {  # Levenshtein distance
      la = length(a); lb = length(b)
      for (i = 0; i <= la; i++) d[i, 0] = i
      for (j = 0; j <= lb; j++) d[0, j] = j
      for (i = 1; i <= la; i++)
        for (j = 1; j <= lb; j++) {
          c = d[i - 1, j - 1] + (substr(a, i, 1) != substr(b, j, 1))
          if (d[i - 1, j] + 1 < c) c = d[i - 1, j] + 1
          if (d[i, j - 1] + 1 < c) c = d[i, j - 1] + 1
          d[i, j] = c
        }
      return d[la, lb]
    }
    # A near miss of k: an edit or two away (one below 8 letters), k cut at an underscore
    # (PERCORE_BATCH), or k with more letters (SEQ_LENGTH) when k has an underscore.
    function near(name, k) {
      if (length(k) < 5) return 0
      if (index(name, "_") && index(k, name "_") == 1) return 1
      if (index(k, "_") && index(name, k) == 1) return 1
      return dist(name, k) <= (length(k) >= 8 ? 2 : 1)
    }
    function guess(name, list,   n, w, i) {
      n = split(list, w, /[ \n]+/)
      for (i = 1; i <= n; i++) if (w[i] != "" && near(name, w[i])) return w[i]
      return ""
    }
    function own(list, script,   n, w, i) {
      n = split(list, w, /[ \n]+/)
      for (i = 1; i <= n; i++) {
        if (w[i] == "") continue
        if (w[i] in owner) owner[w[i]] = owner[w[i]] " and " script
        else owner[w[i]] = script
      }
    }
    BEGIN {
      n = split(known " " ax, w, /[ \n]+/); for (i = 1; i <= n; i++) reads[w[i]] = 1
      own(pile, "example_pile.sub"); own(fuji, "example_fuji.sub")
      own(single, "run_pile_singlenode.sh"); own(t5x, "example_slurm_pretrain_pile.sub")
      own(t5single, "singlenode_pretrain_pile.sh")
      n = split(t5xft, w, /[ \n]+/) # fine-tuning adds FT_TASK and the checkpoints
      for (i = 1; i <= n; i++)
        if (w[i] != "" && !(w[i] in owner)) owner[w[i]] = "example_slurm_ft_frompile.sub"
    }
    $0 in reads { next }
    /^AX_/ {
      g = guess($0, ax)
      print $0 " is set but nothing in ax reads it" (g != "" ? "; did you mean " g "?" : "")
      next
    }
    $0 in owner { print $0 " is a variable of " owner[$0] "; " script " does not read it"; next }
    !/^[A-Z][A-Z0-9_]*$/ { next }
    /^(SLURM|SLURMD|SBATCH|SRUN|SALLOC|PMIX|PMI|OMPI|UCX|ENROOT|PYXIS)_/ { next }
    /^(CUDA|NCCL|NVIDIA|XLA|TF|LC|XDG|LMOD|MODULE)_/ { next }
    {
      g = guess($0, known)
      if (g != "") print $0 " is set but " script " does not read it; did you mean " g "?"
    }
  ')
}

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

# ax_shards_subdir NAME OUT [LABEL]: sets OUT to where the ax-data shards are inside the directory
# NAME names: "" when it holds index.json itself, "train" for ax-data's train/ + val/ layout (the
# trainer finds val/ beside train/). Errors name LABEL (default NAME).
ax_shards_subdir() {
  local v="${!1-}" label="${3:-$1}"
  printf -v "$2" '%s' ""
  ax_is_set "$1" && [[ -d "$v" ]] || return 0
  if [[ -f "$v/train/index.json" && ! -f "$v/index.json" ]]; then
    printf -v "$2" '%s' train
  elif [[ ! -f "$v/index.json" ]]; then
    ax_error "$label='$v': expected ax-data shards (a directory with index.json, or one holding" \
      "train/ and val/ shard directories; make them with 'ax-data tokenize')"
  fi
}

# ax_find_binaries: sets AX_TRAIN and AX_LAUNCH. AX_BIN is a directory holding ax-train and
# ax-launch (an installation's bin/) or a build directory (trainer/ax-train, launcher/ax-launch);
# by default the directory of ax-train on PATH, else the repository's build/cpu. In a container
# the image's PATH finds them unless AX_BIN is set.
ax_find_binaries() {
  local dir="${AX_BIN-}" found
  if [[ -n "${CONTAINER-}" && -z "$dir" ]]; then
    AX_TRAIN=ax-train
    AX_LAUNCH=ax-launch
    return 0
  fi
  if [[ -z "$dir" ]]; then
    if found="$(command -v ax-train 2>/dev/null)"; then
      dir="$(dirname "$found")"
    else
      dir="$(cd "$AX_SBATCH_DIR/.." && pwd)/build/cpu"
    fi
  fi
  if [[ -x "$dir/ax-train" ]]; then
    AX_TRAIN="$dir/ax-train"
    AX_LAUNCH="$dir/ax-launch"
  else
    AX_TRAIN="$dir/trainer/ax-train"
    AX_LAUNCH="$dir/launcher/ax-launch"
  fi
  [[ -n "${CONTAINER-}" ]] && return 0 # the paths are inside the image
  if [[ ! -x "$AX_TRAIN" ]]; then
    ax_error "AX_BIN='$dir': no ax-train there (expected an installation's bin/ directory or a" \
      "build directory; put ax-train on PATH or set AX_BIN)"
  elif [[ "${AX_LAUNCH_MODE-}" == ax-launch && ! -x "$AX_LAUNCH" ]]; then
    ax_error "AX_BIN='$dir': no ax-launch there (needed by AX_LAUNCH_MODE=ax-launch)"
  fi
}

# ax_mesh_spec ICI DCN: the --ax-mesh / ax-launch --mesh spec from two vectors (either may be
# empty): "auto" when both are; otherwise the missing one is the plugin's auto shape
# (ICI 1,-1,1: FSDP inside the node; DCN -1,1,1: data parallel across nodes).
ax_mesh_spec() {
  if [[ -z "$1" && -z "$2" ]]; then
    echo auto
  else
    echo "ici=${1:-1,-1,1};dcn=${2:--1,1,1}"
  fi
}

# ax_check_launch_mode: AX_LAUNCH_MODE srun (default) or ax-launch; srun mode needs spank_ax.so.
ax_check_launch_mode() {
  AX_LAUNCH_MODE="${AX_LAUNCH_MODE:-srun}"
  ax_check_enum AX_LAUNCH_MODE srun ax-launch || return 0
  if [[ "$AX_LAUNCH_MODE" == srun && "${AX_DRY_RUN:-0}" != 1 ]] &&
    ! srun --help 2>/dev/null | grep -q -- '--ax-mesh'; then
    ax_error "AX_LAUNCH_MODE=srun: srun has no --ax-mesh option here (spank_ax.so is not in" \
      "plugstack.conf); install the plugin (docs/spank-plugin.md) or use AX_LAUNCH_MODE=ax-launch"
  fi
}

# ax_srun_command OUTFILE SPEC NPROC TRAIN_CMD...: sets AX_SRUN (an array) to the step that runs
# TRAIN_CMD on every node of the allocation: one task per GPU with --ax-mesh=SPEC, or one
# ax-launch per node starting NPROC ranks. AX_MOUNTS (Pyxis mounts) must be set when CONTAINER is.
ax_srun_command() {
  local outfile="$1" spec="$2" nproc="$3"
  shift 3
  AX_SRUN=(srun --kill-on-bad-exit=1 --open-mode=append -o "$outfile" -e "$outfile")
  # Slurm narrows CUDA_VISIBLE_DEVICES to the step's GPUs, which the plugin and ax-launch plan
  # over. AX_GRES=none leaves GRES out (a cluster without GPU GRES).
  local gres="${AX_GRES:-gpu:$nproc}"
  [[ "$gres" != none ]] && AX_SRUN+=("--gres=$gres")
  if [[ -n "${CONTAINER-}" ]]; then
    AX_SRUN+=("--container-image=$CONTAINER" "--container-mounts=$AX_MOUNTS" --export=ALL)
    [[ -n "${CONTAINER_WORKDIR-}" ]] && AX_SRUN+=("--container-workdir=$CONTAINER_WORKDIR")
  fi
  local extra=()
  # shellcheck disable=SC2206 # AX_SRUN_ARGS is a list of srun options, split on spaces
  [[ -n "${AX_SRUN_ARGS-}" ]] && extra=($AX_SRUN_ARGS)
  # The batch environment's task count comes from #SBATCH --ntasks-per-node: set this step's own.
  local nodes="${SLURM_JOB_NUM_NODES:-1}"
  if [[ "$AX_LAUNCH_MODE" == srun ]]; then
    AX_SRUN+=(-N "$nodes" -n "$((nodes * nproc))" --ntasks-per-node="$nproc" "--ax-mesh=$spec"
      "${extra[@]}" "$@")
  else
    # One ax-launch per node; node rank and count come from the step, the coordinator from the
    # allocation's first node (never the host that ran sbatch).
    local coordinator="$AX_COORDINATOR_HOST:$AX_COORDINATOR_PORT"
    # The task's shell expands these.
    # shellcheck disable=SC2016
    local wrapper='launch="$1" dir="$2" coordinator="$3" nproc="$4" mesh="$5"; shift 5; '
    # shellcheck disable=SC2016
    wrapper+='exec "$launch" --nproc "$nproc" --mesh "$mesh" --nnodes "$SLURM_NNODES" '
    # shellcheck disable=SC2016
    wrapper+='--node-rank "$SLURM_NODEID" --coordinator "$coordinator" '
    # shellcheck disable=SC2016
    wrapper+='--run-dir "$dir/node$SLURM_NODEID" -- "$@"'
    AX_SRUN+=(-N "$nodes" -n "$nodes" --ntasks-per-node=1 "${extra[@]}"
      bash -c "$wrapper" ax-launch-node "$AX_LAUNCH" "$AX_LAUNCH_DIR" "$coordinator" "$nproc"
      "$spec" "$@")
  fi
}

# ax_coordinator: AX_COORDINATOR_HOST (the allocation's first node) and AX_COORDINATOR_PORT
# (AX_COORDINATOR_PORT, else derived from the job id like the plugin's rule, with step slot 63
# so it never meets a port the plugin gives this job's steps) for ax-launch mode. The rule is
# launcher::coordinator_port written again: this script runs outside the container image, where
# with CONTAINER set the ax binaries need not exist; tests/sbatch/coordinator_port_test.sh checks
# that it agrees with `ax-launch --coordinator-port JOB_ID 63`.
ax_coordinator() {
  AX_COORDINATOR_HOST="$(scontrol show hostnames "${SLURM_JOB_NODELIST:-localhost}" 2>/dev/null |
    head -n 1)"
  [[ -n "$AX_COORDINATOR_HOST" ]] || AX_COORDINATOR_HOST="$(hostname)"
  if [[ -z "${AX_COORDINATOR_PORT-}" ]]; then
    AX_COORDINATOR_PORT=$((20000 + (${SLURM_JOB_ID:-0} * 64 + 63) % 12000))
  fi
  ax_check_uint AX_COORDINATOR_PORT 1
}

# ax_job_secret: exports AX_JOB_SECRET, the secret every rank proves to the job's TCP store
# (docs/threat-model.md): 32 bytes of /dev/urandom as hex, made in the batch script and inherited
# by srun and so by every ax-launch of the step, never on a command line. srun with spank_ax.so
# replaces it with one of its own per step. `read` keeps the value out of `set -x` traces.
ax_job_secret() {
  read -r AX_JOB_SECRET < <(od -An -vtx1 -N32 /dev/urandom | tr -d ' \n' && echo)
  if ((${#AX_JOB_SECRET} != 64)); then
    ax_log "error: could not make the job secret (od on /dev/urandom failed)"
    exit 1
  fi
  export AX_JOB_SECRET
}

# ax_quote WORD...: the words, single-quoted where a shell would otherwise split or expand them.
ax_quote() {
  local w out=() q="'\\''"
  for w in "$@"; do
    if [[ "$w" =~ ^[A-Za-z0-9_./:=%,@+-][A-Za-z0-9_./:=%,@#+-]*$ ]]; then
      out+=("$w")
    else
      out+=("'${w//\'/$q}'")
    fi
  done
  echo "${out[*]}"
}

# ax_print_command: the step's command, quoted so that it can be pasted into a shell.
ax_print_command() { echo "ax-job: $(ax_quote "${AX_SRUN[@]}")"; }

# ax_train_job NAME RUN_REL SPEC NPROC [AX_TRAIN_OPTIONS...]: the step of a Pax or AXLearn .sub
# file, from the checked variables BASE_WORKSPACE_DIR, BASE_TFDS_DATA_DIR (+ AX_SHARDS_SUBDIR),
# BASE_VOCAB_PATH, OUTPUT_DIR, CONFIG and the in-container paths WORKSPACE_DIR, TFDS_DATA_DIR,
# GPT_VOCAB_PATH: the run directory at RUN_REL under the workspace, per-task output files
# output-%j-%n-%t.txt in OUTPUT_DIR (ax_train_step).
ax_train_job() {
  local name="$1" run_rel="$2"
  shift 2
  if [[ -n "${CONTAINER-}" ]]; then
    AX_MOUNTS="$BASE_WORKSPACE_DIR:$WORKSPACE_DIR,$BASE_VOCAB_PATH:$GPT_VOCAB_PATH"
    AX_MOUNTS+=",$BASE_TFDS_DATA_DIR:$TFDS_DATA_DIR"
    AX_STEP_WORKSPACE="$WORKSPACE_DIR" AX_STEP_DATA="$TFDS_DATA_DIR" AX_STEP_VOCAB="$GPT_VOCAB_PATH"
  else
    AX_STEP_WORKSPACE="$BASE_WORKSPACE_DIR" AX_STEP_DATA="$BASE_TFDS_DATA_DIR"
    AX_STEP_VOCAB="$BASE_VOCAB_PATH"
  fi
  ax_train_step "$name" "$BASE_WORKSPACE_DIR" "$run_rel" \
    "$BASE_WORKSPACE_DIR/$OUTPUT_DIR/output-%j-%n-%t.txt" "$@"
}

# ax_train_step NAME WORKSPACE RUN_REL OUTFILE SPEC NPROC [AX_TRAIN_OPTIONS...]: runs ax-train
# CONFIG on AX_STEP_DATA (+ AX_SHARDS_SUBDIR) with the tokenizer AX_STEP_VOCAB, its run directory
# at RUN_REL under the workspace (WORKSPACE on the host, AX_STEP_WORKSPACE as the step sees it;
# AX_MOUNTS when CONTAINER is set), every task's output in OUTFILE (an srun pattern in a host
# directory, created), then ends the job (ax_finish). AX_DRY_RUN=1 prints the srun command and
# exits 0.
ax_train_step() {
  local name="$1" host_ws="$2" run_rel="$3" outfile="$4" spec="$5" nproc="$6"
  shift 6
  local run_dir="$AX_STEP_WORKSPACE/$run_rel" outputs
  outputs="$(dirname "$outfile")"
  AX_LAUNCH_DIR="$run_dir/launch" # ax-launch mode: logs/rank_<r>.log and error.json per node
  local train=("$AX_TRAIN" --experiment "$CONFIG"
    --data "$AX_STEP_DATA${AX_SHARDS_SUBDIR:+/$AX_SHARDS_SUBDIR}" --tokenizer "$AX_STEP_VOCAB"
    --run-dir "$run_dir" "$@")
  # shellcheck disable=SC2206 # AX_TRAIN_ARGS is a list of ax-train options, split on spaces
  [[ -n "${AX_TRAIN_ARGS-}" ]] && train+=($AX_TRAIN_ARGS)
  ax_srun_command "$outfile" "$spec" "$nproc" "${train[@]}"
  ax_log "$name: ${AX_LAUNCH_MODE} mode, mesh $spec, $nproc rank(s) per node," \
    "${CONTAINER:+container $CONTAINER, }run directory $host_ws/$run_rel"
  ax_print_command
  if [[ "${AX_DRY_RUN:-0}" == 1 ]]; then
    ax_log "AX_DRY_RUN=1: not running it"
    exit 0
  fi
  mkdir -p "$outputs" "$host_ws/$run_rel"
  ax_job_secret
  local rc=0
  ax_run_step "${AX_SRUN[@]}" || rc=$?
  ax_finish "$rc" "$outputs/output-${SLURM_JOB_ID:-}-*.txt and $host_ws/$run_rel" \
    "$outputs/output-${SLURM_JOB_ID:-}-"*.txt
}

# ax_check_common: the checks both .sub files share (launch mode, dry run, requeue, binaries,
# coordinator); then stops the job if any variable was bad.
ax_check_common() {
  ax_check_enum AX_DRY_RUN 0 1
  ax_check_enum AX_REQUEUE 0 1
  ax_check_launch_mode
  ax_find_binaries
  [[ "$AX_LAUNCH_MODE" == ax-launch ]] && ax_coordinator
  ax_fail_if_errors
}

# --- preemption -------------------------------------------------------------------------------

AX_STEP_PID=""
AX_STOP_SIGNAL=""
AX_FORWARD="${AX_FORWARD:-scancel}" # scancel: to every step of the job; kill: to our child only

# A stop request (USR1 from `--signal=B:USR1@s`, TERM at preemption or the time limit): ask every
# rank to checkpoint at the next step boundary. The step's tasks get SIGUSR1 through Slurm (ax-train
# and ax-launch treat USR1 and TERM alike); without Slurm the launcher is our child.
ax_on_stop_signal() {
  if [[ -n "$AX_STOP_SIGNAL" ]]; then
    ax_log "caught SIG$1 again; the ranks are already stopping"
    return
  fi
  AX_STOP_SIGNAL="$1"
  # AX_STOP_WHAT: what the script's step does on a stop request (tokenize.sub sets its own).
  ax_log "caught SIG$1 at $(date +%T):" \
    "${AX_STOP_WHAT:-every rank checkpoints at the next step boundary and exits}"
  if [[ "$AX_FORWARD" == scancel && -n "${SLURM_JOB_ID-}" && -n "$AX_STEP_PID" ]] &&
    timeout 30 scancel --signal=USR1 "$SLURM_JOB_ID" 2>/dev/null; then
    return
  fi
  [[ -n "$AX_STEP_PID" ]] && kill -USR1 "$AX_STEP_PID" 2>/dev/null
}

# A stop request that arrives while the script still checks its variables is remembered (not
# fatal, as bash's default for USR1 and TERM would be); the step then does not start.
trap 'AX_STOP_SIGNAL="${AX_STOP_SIGNAL:-USR1}"' USR1
trap 'AX_STOP_SIGNAL="${AX_STOP_SIGNAL:-TERM}"' TERM

# ax_run_step CMD...: runs CMD in the background (so bash runs the traps while it waits) and
# returns its exit status; 75 without running it when a stop was requested before.
ax_run_step() {
  if [[ -n "$AX_STOP_SIGNAL" ]]; then
    ax_log "SIG$AX_STOP_SIGNAL arrived before the step started; not starting it"
    return "$AX_EXIT_STOPPED"
  fi
  trap 'ax_on_stop_signal USR1' USR1
  trap 'ax_on_stop_signal TERM' TERM
  trap 'ax_on_stop_signal INT' INT
  "$@" &
  AX_STEP_PID=$!
  local rc=0
  while :; do
    rc=0
    wait "$AX_STEP_PID" || rc=$?
    # wait returns early (status > 128) when a trapped signal arrives; the step is still running.
    kill -0 "$AX_STEP_PID" 2>/dev/null || break
  done
  # Another signal now (a repeated USR1 while the script requeues the job) must not kill it.
  trap ':' USR1 TERM
  trap - INT
  return "$rc"
}

# ax_singlenode_run LOG RUN_DIR CMD...: the single-node scripts' run: CMD (ax-launch) with its
# output also in LOG, a last line that says how it ended, and ax-launch's exit status (0 done, 75
# stopped at a checkpoint, anything else failed).
ax_singlenode_run() {
  local log="$1" run_dir="$2" rc=0 cause
  shift 2
  ax_log "$(ax_quote "$@")"
  # tee -i: a Ctrl-C reaches ax-launch (which checkpoints and exits 75), not the log's writer.
  ax_run_step "$@" > >(tee -i "$log") 2>&1 || rc=$?
  case "$rc" in
    0) ax_log "Run succeeded! (outputs in $run_dir, log $log)" ;;
    75) ax_log "Run stopped at a checkpoint; run the same command again to resume" ;;
    *)
      cause="$(ax_failure_cause "$log")"
      ax_log "Run failed with status $rc${cause:+: $cause} (see $log, $run_dir/error.json)"
      ;;
  esac
  exit "$rc"
}

# ax_failure_cause FILE...: the cause the ranks agreed on after a collective failed, from the
# first of the output files that has it: "rank 3 (host n2) stopped answering first (peer closed
# the connection)" (docs/comm.md "Timeouts and failures"), or "the store host, rank 0, is gone";
# nothing when no file has one.
ax_failure_cause() {
  local f first='ranks? [0-9,]+( \(hosts? [^)]*\))? stopped answering first \([^)]*\)'
  for f in "$@"; do
    [[ -f "$f" ]] || continue
    grep -ohE -m 1 "$first|the store host, rank 0, is gone" "$f" && return 0
  done
  return 0
}

# ax_finish STATUS WHERE [OUTPUT_FILE...]: ends the job. 0: done. 75: the ranks stopped at a
# checkpoint; unless AX_REQUEUE=0 the job requeues itself (same job id; the next run resumes from
# that checkpoint and SLURM_RESTART_COUNT counts the restarts). Anything else: the job fails with
# that status, and its last line names the rank that failed first when the ranks' outputs
# (OUTPUT_FILEs) do.
ax_finish() {
  local rc="$1" where="$2"
  shift 2
  if ((rc == 0)); then
    ax_log "finished: the run reached its last step (outputs: $where)"
    exit 0
  fi
  # After a stop request every rank checkpoints, waits for the others, and exits 75; the first
  # exit makes srun (--kill-on-bad-exit) SIGKILL the ranks still exiting, so the step's status
  # can be 137 instead. The checkpoint was committed before any rank left: still a stop.
  if [[ -n "$AX_STOP_SIGNAL" ]] && ((rc != AX_EXIT_STOPPED)); then
    ax_log "the step ended with status $rc after SIG$AX_STOP_SIGNAL (ranks ended by srun once" \
      "the first one stopped): treated as stopped at its checkpoint"
    rc=$AX_EXIT_STOPPED
  fi
  if ((rc == AX_EXIT_STOPPED)); then
    if [[ -n "${SLURM_JOB_ID-}" && "${AX_REQUEUE:-1}" == 1 ]]; then
      ax_log "the ranks stopped at a checkpoint (exit $rc); requeueing job $SLURM_JOB_ID" \
        "(restart $((${SLURM_RESTART_COUNT:-0} + 1))), which resumes from it"
      if timeout 60 scontrol requeue "$SLURM_JOB_ID"; then
        # Slurm ends this script now; the requeued job starts from the top.
        exit 0
      fi
      ax_log "error: scontrol requeue $SLURM_JOB_ID failed (the job needs --requeue and the" \
        "cluster JobRequeue=1); submit the same job again to resume"
    else
      ax_log "the ranks stopped at a checkpoint (exit $rc); run the same job again to resume"
    fi
    exit "$rc"
  fi
  local cause
  cause="$(ax_failure_cause "$@")"
  ax_log "error: the training step failed with status $rc${cause:+: $cause}; see $where"
  exit "$rc"
}

# ax_job_header NAME: one line about the job and its restarts.
ax_job_header() {
  local restarts="${SLURM_RESTART_COUNT:-0}"
  ax_log "$1: job ${SLURM_JOB_ID:-none} on ${SLURM_JOB_NUM_NODES:-1} node(s)" \
    "(${SLURM_JOB_NODELIST:-$(hostname)}), restart $restarts (SLURM_RESTART_COUNT)"
}
