# shellcheck shell=bash
# Part of sbatch/ax_job.sh (which sources it): the training step and its srun command. Where the
# ax binaries are (AX_BIN), the launch mode (srun with spank_ax.so, or one ax-launch per node and
# its coordinator), Pyxis containers, the job secret, and ax_train_job / ax_train_step, which
# build the step, print it and run it (the run and the job's end: lib/preemption.sh).

# ax_default_bin PROGRAM SUBDIR: where PROGRAM is when neither AX_BIN nor PATH says: the
# installation's bin/ when these scripts are installed (<prefix>/share/ax/sbatch), else the first
# of the repository's build/cuda and build/cpu that holds SUBDIR/PROGRAM (build/cpu when none).
ax_default_bin() {
  local here build
  here="$(cd "$AX_SBATCH_DIR" && pwd)"
  if [[ "$here" == */share/ax/sbatch && -x "${here%/share/ax/sbatch}/bin/$1" ]]; then
    echo "${here%/share/ax/sbatch}/bin"
    return 0
  fi
  for build in cuda cpu; do
    if [[ -x "${here%/*}/build/$build/$2/$1" ]]; then
      echo "${here%/*}/build/$build"
      return 0
    fi
  done
  echo "${here%/*}/build/cpu"
}

# ax_find_binaries: sets AX_TRAIN and AX_LAUNCH. AX_BIN is a directory holding ax-train and
# ax-launch (an installation's bin/) or a build directory (trainer/ax-train, launcher/ax-launch);
# by default the directory of ax-train on PATH, else ax_default_bin's. In a container the image's
# PATH finds them unless AX_BIN is set.
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
      dir="$(ax_default_bin ax-train trainer)"
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
# job::coordinator_port written again: this script runs outside the container image, where
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
# directory, created), then ends the job (ax_finish). SPEC goes through the plan first
# (lib/plan.sh): AX_MESH_GIVEN=0 says it is the script's default, to be replaced by the plan's
# layout. AX_DRY_RUN=1 prints the srun command and exits 0.
ax_train_step() {
  local name="$1" host_ws="$2" run_rel="$3" outfile="$4" spec="$5" nproc="$6"
  shift 6
  local run_dir="$AX_STEP_WORKSPACE/$run_rel" outputs
  outputs="$(dirname "$outfile")"
  AX_LAUNCH_DIR="$run_dir/launch" # ax-launch mode: logs/rank_<r>.log and error.json per node
  ax_plan_mesh spec "${AX_MESH_GIVEN:-1}" "$nproc" "$@"
  local train=("$AX_TRAIN" --experiment "$CONFIG"
    --data "$AX_STEP_DATA${AX_SHARDS_SUBDIR:+/$AX_SHARDS_SUBDIR}" --tokenizer "$AX_STEP_VOCAB"
    --run-dir "$run_dir" "$@" "${AX_PLAN_ARGS[@]}")
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
