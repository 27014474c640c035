# shellcheck shell=bash disable=SC2034  # sourced; its variables are used by the tests
# Sourced by every test of the `slurm` suite (interface: tests/slurm/CMakeLists.txt).
#   source "$(dirname "$0")/lib.sh" "$@"      # $1 = build dir, $2 = repo root
# Gives: BUILD, REPO, STATE (the cluster's state dir, on a path every node sees), JOB (the job name
# this test gives its jobs, so its trap can cancel them; jobs that run beside each other are named
# $JOB-SOMETHING: the job scripts' --dependency=singleton holds back only jobs of one name), t (a
# client call under a timeout),
# ok/bad/finish (checks and the exit status), part_start/part_end (a part of the test run beside
# the rest), job_field/wait_job (batch jobs), check_tasks (AX_* of a step's tasks). Exit 77 =
# skipped (ctest SKIP_RETURN_CODE).
set -uo pipefail

BUILD="${1:?usage: $0 BUILD_DIR REPO_DIR}"
REPO="${2:?usage: $0 BUILD_DIR REPO_DIR}"
STATE="${AX_SLURM_STATE_DIR:-/tmp/ax-slurm-ctest}"
export SLURM_CONF="$STATE/etc/slurm.conf"
CLIENT_TIMEOUT="${AX_SLURM_CLIENT_TIMEOUT:-60}"
TEST_NAME="$(basename "$0" .sh)"
JOB="ax-$TEST_NAME"
FIXTURE="$REPO/topology/fixtures/dgx-h100.json" # check_tasks knows its GPUs and NICs
passed=0
failed=0

# Every client call (srun, sbatch, squeue, scontrol, scancel) goes through t.
t() { timeout -k 5 "$CLIENT_TIMEOUT" "$@"; }
ok() { echo "PASS: $*"; passed=$((passed + 1)); }
bad() { echo "FAIL: $*"; failed=$((failed + 1)); }
skip() { echo "SKIP: $*"; exit 77; }
finish() {
  echo "$TEST_NAME: $passed checks passed, $failed failed"
  ((failed == 0 && passed > 0))
}

# Why the suite cannot run here, or nothing.
slurm_unavailable_reason() {
  if [[ $(id -u) != 0 ]]; then
    echo "needs root (UTS namespaces, /etc/hosts, munged); running as $(id -un)"
    return
  fi
  local b missing=()
  for b in slurmctld slurmd srun sbatch squeue scontrol scancel munged; do
    command -v "$b" >/dev/null 2>&1 || [[ -x /usr/sbin/$b ]] || missing+=("$b")
  done
  if ((${#missing[@]} > 0)); then
    echo "Slurm binaries missing (${missing[*]}): run scripts/setup.sh --with slurm"
  fi
}

require_cluster() {
  local why
  why="$(slurm_unavailable_reason)"
  [[ -z "$why" ]] || skip "$why"
  if ! t scontrol ping 2>/dev/null | grep -q 'is UP'; then
    echo "FAIL: no cluster answers at $SLURM_CONF (did the fixture test slurm_cluster_up pass?)"
    exit 1
  fi
}

# The ids of this test's jobs still listed: named $JOB or $JOB-SOMETHING.
own_jobs() {
  t squeue -h -o '%i %j' 2>/dev/null | awk -v j="$JOB" '$2 == j || index($2, j "-") == 1 {print $1}'
}

# Cancels this test's jobs and waits until they are gone, so the next test finds idle nodes.
cancel_own_jobs() {
  local i ids
  mapfile -t ids < <(own_jobs)
  ((${#ids[@]} == 0)) || t scancel --quiet "${ids[@]}" 2>/dev/null || true
  for ((i = 0; i < 150; i++)); do
    [[ -z "$(own_jobs)" ]] && return 0
    sleep 0.1
  done
  echo "warning: jobs named $JOB or $JOB-* still listed 15 s after scancel" >&2
}
trap cancel_own_jobs EXIT

# A scratch directory for this test under the state dir (the "nodes" share it).
scratch() {
  local d="$STATE/work/$TEST_NAME"
  rm -rf "$d"
  mkdir -p "$d"
  echo "$d"
}

# part_start NAME CMD...: runs CMD, a part of the test that checks with ok/bad (e.g. one
# preemption), in the background beside the test's next steps, on nodes of its own (its jobs are
# named $JOB-NAME: SUB_NAME); its output waits in a file of the scratch directory. part_end NAME
# waits for it, shows that output and counts its checks as this test's (a part that did not run
# to its end is a failed check).
declare -A PART_PID=()
part_start() {
  local name="$1"
  shift
  (
    trap - EXIT
    SUB_NAME="$JOB-$name"
    "$@"
    echo "part $name: ended"
  ) >"$STATE/work/$TEST_NAME/$name.part" 2>&1 &
  PART_PID[$name]=$!
}
part_end() {
  local f="$STATE/work/$TEST_NAME/$1.part"
  wait "${PART_PID[$1]}"
  cat "$f"
  passed=$((passed + $(grep -c '^PASS: ' "$f")))
  failed=$((failed + $(grep -c '^FAIL: ' "$f")))
  grep -qx "part $1: ended" "$f" || bad "part $1 of the test did not run to its end"
}

# job_line ID: the job's record, one line of `scontrol show job -o` ("" once Slurm forgot it).
job_line() { t scontrol show job -o "$1" 2>/dev/null; }

# line_field LINE FIELD: one field of such a line (e.g. JobState, ExitCode, Restarts).
line_field() {
  [[ "$1" =~ \ $2=([^ ]*) ]] && echo "${BASH_REMATCH[1]%%=*}"
}

# job_field ID FIELD: one field of `scontrol show job`. One client call, matched by bash itself:
# the polls below make several a second beside the jobs they wait for, and each process a poll
# starts is CPU time those jobs' ranks do not get on this 2-core machine.
job_field() {
  local line
  line="$(job_line "$1")"
  line_field "$line" "$2"
}

# wait_job ID SECONDS: polls until the job has left PENDING/RUNNING/COMPLETING (sbatch --wait polls
# slowly). Prints the final state; returns 1 on timeout. Every 0.1 s for 2 s (short jobs), then
# every 0.3 s (a poll costs ~35 ms of CPU).
wait_job() {
  local id="$1" deadline=$((SECONDS + $2)) state polls=0
  while ((SECONDS < deadline)); do
    state="$(job_field "$id" JobState)"
    case "$state" in
      PENDING | CONFIGURING | RUNNING | COMPLETING | "")
        if ((polls++ < 20)); then sleep 0.1; else sleep 0.3; fi
        ;;
      *) echo "$state"; return 0 ;;
    esac
  done
  echo "TIMEOUT($state)"
  return 1
}

# daemon_log_lines ID: the lines of the cluster's slurmctld and slurmd logs that name job ID (what
# a failed test shows: a job refused by a node or killed by the controller says why only there).
daemon_log_lines() {
  grep -H -- "$1" "$STATE"/log/slurmctld.log "$STATE"/log/slurmd-*.log 2>/dev/null |
    sed "s|^$STATE/log/||; s/^/  | /" | tail -n 30
}

# The line each task prints, read by check_tasks. `unset` marks a missing variable.
# shellcheck disable=SC2016 # expanded by the task's shell
{
  TASK_PRINTER='echo "TASK $SLURM_PROCID $SLURM_LOCALID $SLURM_NODEID $(hostname)'
  TASK_PRINTER+=' ${AX_RANK-unset} ${AX_WORLD_SIZE-unset} ${AX_LOCAL_RANK-unset}'
  TASK_PRINTER+=' ${AX_LOCAL_WORLD_SIZE-unset} ${AX_NODE_RANK-unset} ${AX_NNODES-unset}'
  TASK_PRINTER+=' ${AX_ICI_MESH-unset} ${AX_DCN_MESH-unset} ${AX_DEVICE-unset}'
  TASK_PRINTER+=' ${AX_COORDINATOR-unset} ${NCCL_IB_HCA-unset} $SLURM_JOB_ID $SLURM_STEP_ID'
  # The job secret only as its length and a fingerprint (secret_of reads it back).
  TASK_PRINTER+=' secret=${#AX_JOB_SECRET}:$(printf %s "${AX_JOB_SECRET-}" | md5sum | cut -c1-12)"'
}

# secret_of OUTPUT: the distinct job-secret fields ("secret=64:<fingerprint>") of OUTPUT's TASK lines.
secret_of() { grep '^TASK ' <<<"$1" | grep -o 'secret=[0-9]*:[0-9a-f]*' | sort -u; }

# check_tasks WHAT OUTPUT NODES PER_NODE ICI DCN DEVICE_RULE: checks every TASK line of OUTPUT (one
# step of NODES x PER_NODE tasks on the dgx-h100 fixture, all holding one 64-digit job secret that
# srun's spank_ax.so made) and records one ok/bad for WHAT.
# DEVICE_RULE: `local` (AX_DEVICE = local rank: the node's 8 GPUs all visible) or a fixed ordinal
# (Slurm narrowed CUDA_VISIBLE_DEVICES to the task's own GPU).
check_tasks() {
  local what="$1" out="$2" nodes="$3" per_node="$4" ici="$5" dcn="$6" device_rule="$7"
  local world=$((nodes * per_node)) errors=() seen=() coords=()
  local tag procid localid nodeid host rank ws lr lws nr nn im dm dev coord hca job step rest
  local want_rank want_dev want_gpu want_coord
  while read -r tag procid localid nodeid host rank ws lr lws nr nn im dm dev coord hca job step \
    rest; do
    [[ "$tag" == TASK ]] || continue
    local e=()
    want_rank=$((nodeid * per_node + localid))
    # One NVLink domain per node and block distribution: the mesh's rank is Slurm's task id.
    [[ "$rank" == "$procid" && "$rank" == "$want_rank" ]] || e+=("AX_RANK=$rank want $want_rank")
    [[ "$ws" == "$world" ]] || e+=("AX_WORLD_SIZE=$ws want $world")
    [[ "$lr" == "$localid" ]] || e+=("AX_LOCAL_RANK=$lr want $localid")
    [[ "$lws" == "$per_node" ]] || e+=("AX_LOCAL_WORLD_SIZE=$lws want $per_node")
    [[ "$nr" == "$nodeid" ]] || e+=("AX_NODE_RANK=$nr want $nodeid")
    [[ "$host" == "n$((nodeid + 1))" ]] || e+=("host $host for node rank $nodeid")
    [[ "$nn" == "$nodes" ]] || e+=("AX_NNODES=$nn want $nodes")
    [[ "$im" == "$ici" ]] || e+=("AX_ICI_MESH=$im want $ici")
    [[ "$dm" == "$dcn" ]] || e+=("AX_DCN_MESH=$dm want $dcn")
    if [[ "$device_rule" == local ]]; then want_dev="$localid"; else want_dev="$device_rule"; fi
    [[ "$dev" == "$want_dev" ]] || e+=("AX_DEVICE=$dev want $want_dev")
    # dgx-h100.json: GPU g's nearest NIC is mlx5_g (PIX); the task uses GPU = its local rank.
    want_gpu="$localid"
    [[ "$hca" == "mlx5_$want_gpu" ]] || e+=("NCCL_IB_HCA=$hca want mlx5_$want_gpu")
    # docs/spank-plugin.md: first host of the step, port 20000 + (job*64 + step%64) % 12000.
    want_coord="n1:$((20000 + (job * 64 + step % 64) % 12000))"
    [[ "$coord" == "$want_coord" ]] || e+=("AX_COORDINATOR=$coord want $want_coord")
    ((${#e[@]} == 0)) || errors+=("task $procid on $host: ${e[*]}")
    seen+=("$rank")
    coords+=("$coord")
  done <<<"$out"
  local distinct_coords distinct_ranks
  distinct_coords="$(printf '%s\n' "${coords[@]}" | sort -u | wc -l)"
  distinct_ranks="$(printf '%s\n' "${seen[@]}" | grep -E '^[0-9]+$' | sort -un | wc -l)"
  ((${#seen[@]} == world)) || errors+=("${#seen[@]} task lines, want $world")
  ((distinct_ranks == world)) || errors+=("$distinct_ranks distinct AX_RANK values, want $world")
  ((distinct_coords == 1)) || errors+=("$distinct_coords different AX_COORDINATOR values")
  local secrets
  secrets="$(secret_of "$out")"
  [[ "$secrets" =~ ^secret=64:[0-9a-f]+$ ]] ||
    errors+=("AX_JOB_SECRET: want one 64-digit secret shared by every task, got: ${secrets//$'\n'/ }")
  if ((${#errors[@]} == 0)); then
    ok "$what: $world tasks, ICI $ici, DCN $dcn, every AX_* value right, one job secret"
  else
    bad "$what: ${#errors[@]} problems"
    printf '  %s\n' "${errors[@]:0:12}"
    echo "  output:"
    sed 's/^/  | /' <<<"$out" | head -n 40
  fi
}
