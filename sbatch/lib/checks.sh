# shellcheck shell=bash
# Part of sbatch/ax_job.sh (which sources it): ax_log, the job's error list (ax_error,
# ax_fail_if_errors) and the checks of its variables (ax_require, ax_check_*, the mesh, step count,
# precision and shard directory checks), which the other pieces and the job scripts use.

AX_ERRORS=()

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

# ax_mesh_vector NAME OUT: sets OUT to "d,f,t" or "p,d,f,s,t" from NAME's "[8,1,1]", "8,1,1",
# "(8, 1, 1)" or "[2,1,4,1,1]": three whole numbers data,fsdp,tensor or five
# pipeline,data,fsdp,seq,tensor (AXLearn's order), each >= 1 or -1 (fill in from the device
# count, at most one); "" when NAME is unset.
ax_mesh_vector() {
  local v="${!1-}" s n='(-1|[1-9][0-9]*)'
  printf -v "$2" '%s' ""
  ax_is_set "$1" || return 0
  s="$(tr -d '[:space:][]()' <<<"$v")"
  if [[ ("$s" =~ ^$n,$n,$n$ || "$s" =~ ^$n,$n,$n,$n,$n$) && "$s" != *-1*-1* ]]; then
    printf -v "$2" '%s' "$s"
  else
    ax_error "$1='$v': expected three numbers data,fsdp,tensor such as [8,1,1], or five" \
      "pipeline,data,fsdp,seq,tensor such as [1,1,8,1,1] (at most one -1: the rest)"
  fi
}

# ax_pax_mesh_spec ICI DCN OUT: the mesh spec of a Pax script from its two vectors and NUM_STAGES
# (Pax's pipeline size): unset, ax_mesh_spec's; with both vectors unset, auto:pp=NUM_STAGES
# (stages across nodes); with vectors, both in the five-number form whose pipeline sizes multiply
# to NUM_STAGES (Pax's ICI[0] x DCN[0] == NUM_STAGES).
ax_pax_mesh_spec() {
  printf -v "$3" '%s' "$(ax_mesh_spec "$1" "$2")"
  ax_check_uint NUM_STAGES 1 || return 0
  ax_is_set NUM_STAGES || return 0
  local stages=$((10#$NUM_STAGES)) ici_pp="" dcn_pp=""
  [[ "$1" =~ ^([1-9][0-9]*)(,[^,]+){4}$ ]] && ici_pp="${BASH_REMATCH[1]}"
  [[ "$2" =~ ^([1-9][0-9]*)(,[^,]+){4}$ ]] && dcn_pp="${BASH_REMATCH[1]}"
  if [[ -z "$1" && -z "$2" ]]; then
    printf -v "$3" '%s' "auto:pp=$stages"
  elif [[ -z "$ici_pp" || -z "$dcn_pp" ]] || ((ici_pp * dcn_pp != stages)); then
    ax_error "NUM_STAGES=$NUM_STAGES with ICI_MESH_SHAPE='${ICI_MESH_SHAPE-}'" \
      "DCN_MESH_SHAPE='${DCN_MESH_SHAPE-}': set both in the five-number form" \
      "pipeline,data,fsdp,seq,tensor with ICI[0] x DCN[0] = $stages, or leave both unset (stages" \
      "across nodes)"
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
