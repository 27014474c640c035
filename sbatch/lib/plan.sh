# shellcheck shell=bash
# Part of sbatch/ax_job.sh (which sources it): the mesh from `ax-train plan` (docs/plan.md "The
# job scripts"). On the batch host, before srun: a job without a mesh variable gets the plan's
# fastest layout that fits, with its micro-batches and recomputation; a job with one is refused
# when no micro-batch or recomputation choice of that mesh fits in a GPU's memory.

# ax_plan_gpu: the GPU kind to plan for: AX_PLAN_GPU, else the name nvidia-smi gives this host's
# first GPU (the batch script runs on the allocation's first node); nothing when neither says.
ax_plan_gpu() {
  if [[ -n "${AX_PLAN_GPU-}" ]]; then
    echo "$AX_PLAN_GPU"
    return 0
  fi
  command -v nvidia-smi >/dev/null 2>&1 || return 0
  local names
  names="$(timeout 30 nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null)" || return 0
  head -n 1 <<<"$names"
}

# ax_plan_mesh SPEC_VAR GIVEN NPROC TRAIN_OPTIONS...: plans CONFIG with the job's --set options
# (TRAIN_OPTIONS and AX_TRAIN_ARGS) on SLURM_JOB_NUM_NODES x NPROC GPUs. GIVEN 0 (the mesh is the
# script's default): SPEC_VAR becomes the plan's best "ici=...;dcn=..." and AX_PLAN_ARGS its
# NUM_MICROBATCHES / train.recompute options (those the job did not set). GIVEN 1: the mesh is
# checked; one that fits nowhere stops the job (exit 2) with the plan's line and the smallest
# change that fits. Each case logs one line; so does every reason for not planning.
ax_plan_mesh() {
  local spec_var="$1" given="$2" nproc="$3"
  shift 3
  AX_PLAN_ARGS=()
  local mesh="${!spec_var}" gpu
  if [[ "${AX_PLAN:-1}" == 0 ]]; then
    ax_log "mesh $mesh: not planned (AX_PLAN=0)"
    return 0
  fi
  # An auto spec reaches ax-train as AX_MESH_SPEC, which then plans its split at start-up
  # (docs/plan.md "srun --ax-mesh=auto and ax-launch").
  local later=""
  [[ "$mesh" == auto* ]] && later="; ax-train plans its split at start-up"
  if [[ -n "${CONTAINER-}" ]]; then
    ax_log "mesh $mesh: not planned (ax-train is inside CONTAINER, not on the batch host)$later"
    return 0
  fi
  # Three numbers data,fsdp,tensor or five pipeline,data,fsdp,seq,tensor (ICI_PP, ICI_SQP, ...);
  # other specs (auto:pp=N, explicit rank lists) are the plugin's to place.
  local shape='-?[0-9]+,-?[0-9]+,-?[0-9]+(,-?[0-9]+,-?[0-9]+)?'
  if [[ "$mesh" != auto && ! "$mesh" =~ ^ici=($shape)\;dcn=($shape)$ ]]; then
    ax_log "mesh $mesh: not planned (only ici=...;dcn=... shapes and auto are planned)$later"
    return 0
  fi
  local ici="" dcn=""
  [[ "$mesh" != auto ]] && ici="${BASH_REMATCH[1]}" dcn="${BASH_REMATCH[3]}"
  gpu="$(ax_plan_gpu)"
  if [[ -z "$gpu" ]]; then
    ax_log "mesh $mesh: not planned (no GPU kind: no nvidia-smi answered on $(hostname);" \
      "AX_PLAN_GPU=H100-80GB|H200|A100-80GB names one)$later"
    return 0
  fi
  local args=(plan --format env --experiment "$CONFIG" --nodes "${SLURM_JOB_NUM_NODES:-1}"
    --gpus-per-node "$nproc" --gpu "$gpu")
  [[ -s "${BASE_VOCAB_PATH-}" ]] && args+=(--tokenizer "$BASE_VOCAB_PATH")
  local options=("$@")
  # shellcheck disable=SC2206 # AX_TRAIN_ARGS is a list of ax-train options, split on spaces
  [[ -n "${AX_TRAIN_ARGS-}" ]] && options+=($AX_TRAIN_ARGS)
  local i
  for ((i = 0; i + 1 < ${#options[@]}; ++i)); do
    [[ "${options[i]}" == --set ]] && args+=(--set "${options[i + 1]}")
  done
  ((given)) && args+=(--ici "$ici" --dcn "$dcn")
  local out rc=0 line key value plan_ici="" plan_dcn="" plan_args="" plan_line=""
  out="$("$AX_TRAIN" "${args[@]}" 2>&1)" || rc=$?
  while IFS= read -r line; do
    key="${line%%=*}" value="${line#*=}"
    case "$key" in
      AX_PLAN_ICI) plan_ici="$value" ;;
      AX_PLAN_DCN) plan_dcn="$value" ;;
      AX_PLAN_TRAIN_ARGS) plan_args="$value" ;;
      AX_PLAN_LINE) plan_line="$value" ;;
    esac
  done <<<"$out"
  if ((rc == 1)) && [[ -n "$plan_line" ]]; then
    ax_error "$plan_line"
    ax_fail_if_errors
  elif ((rc != 0)) || [[ -z "$plan_ici" || -z "$plan_dcn" ]]; then
    ax_log "mesh $mesh: not planned (ax-train plan gave no layout, status $rc:" \
      "$(head -n 1 <<<"$out"))"
  elif ((given)); then
    ax_log "mesh $mesh fits the plan: $plan_line"
  else
    printf -v "$spec_var" '%s' "ici=$plan_ici;dcn=$plan_dcn"
    # shellcheck disable=SC2034,SC2206 # read by ax_train_step; --set KEY=VALUE words
    AX_PLAN_ARGS=($plan_args)
    ax_log "mesh ici=$plan_ici;dcn=$plan_dcn from the plan (no mesh variable set): $plan_line"
  fi
}
