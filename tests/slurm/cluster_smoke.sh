#!/usr/bin/env bash
# Smoke test of scripts/slurm-cluster.sh: brings up 2 nodes x 8 fake GPUs, runs srun / sbatch /
# GRES / PMIx checks, tears the cluster down (also on failure). Needs root and the `slurm` package
# group (scripts/setup.sh --with slurm). Prints "slurm smoke: N checks passed"; non-zero on failure.
#
#   tests/slurm/cluster_smoke.sh            state in /tmp/ax-slurm-smoke (AX_SLURM_SMOKE_DIR)
set -uo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
cluster="$root/scripts/slurm-cluster.sh"
dir="${AX_SLURM_SMOKE_DIR:-/tmp/ax-slurm-smoke}"
export SLURM_CONF="$dir/etc/slurm.conf"
T=60 # seconds per client call
passed=0
failed=0
start=$SECONDS

ok() { echo "PASS: $*"; passed=$((passed + 1)); }
bad() { echo "FAIL: $*"; failed=$((failed + 1)); }

teardown() {
  timeout -k 5 60 bash "$cluster" down --state-dir "$dir" >/dev/null 2>&1 ||
    echo "slurm smoke: teardown failed" >&2
}
trap teardown EXIT

if [[ $(id -u) != 0 ]]; then
  echo "slurm smoke: needs root (UTS namespaces, /etc/hosts)" >&2
  exit 1
fi
if ! command -v slurmctld >/dev/null 2>&1 && [[ ! -x /usr/sbin/slurmctld ]]; then
  echo "slurm smoke: Slurm is not installed: run scripts/setup.sh --with slurm" >&2
  exit 1
fi

# 1. Bring-up: every node idle.
if timeout -k 5 60 bash "$cluster" up --nodes 2 --gpus-per-node 8 --state-dir "$dir"; then
  idle="$(timeout 20 sinfo -h -N -t idle -o %N | sort -u | tr '\n' ' ')"
  if [[ "$idle" == "n1 n2 " ]]; then ok "up: nodes idle: $idle"; else bad "up: idle nodes '$idle', want 'n1 n2'"; fi
else
  bad "up failed"
  echo "slurm smoke: $passed checks passed, $failed failed ($((SECONDS - start)) s)"
  exit 1
fi

# 2. Up again is a no-op.
out="$(timeout -k 5 60 bash "$cluster" up --nodes 2 --gpus-per-node 8 --state-dir "$dir" 2>&1)"
if [[ $? == 0 && "$out" == *"already up"* ]]; then ok "second up is a no-op"; else bad "second up: $out"; fi

# 3. srun over both nodes, each task sees its node's hostname.
out="$(timeout -k 5 $T srun -N2 --ntasks-per-node=2 hostname 2>&1)"
rc=$?
got="$(sort <<<"$out" | tr '\n' ' ')"
if ((rc == 0)) && [[ "$got" == "n1 n1 n2 n2 " ]]; then
  ok "srun -N2 --ntasks-per-node=2 hostname: $got"
else
  bad "srun -N2 --ntasks-per-node=2 hostname (rc=$rc): $out"
fi

# 4. Fake GPUs through GRES.
# shellcheck disable=SC2016 # expanded by the task's shell
out="$(timeout -k 5 $T srun -N2 --ntasks-per-node=1 --gpus-per-node=8 \
  bash -c 'echo "$(hostname) $CUDA_VISIBLE_DEVICES"' 2>&1)"
rc=$?
got="$(sort <<<"$out" | tr '\n' ';')"
if ((rc == 0)) && [[ "$got" == "n1 0,1,2,3,4,5,6,7;n2 0,1,2,3,4,5,6,7;" ]]; then
  ok "--gpus-per-node=8: CUDA_VISIBLE_DEVICES=0,...,7 on n1 and n2"
else
  bad "--gpus-per-node=8 (rc=$rc): $out"
fi

# 5. sbatch with an inner srun runs to completion with exit code 0.
jobout="$dir/smoke-sbatch-%j.out"
jobid="$(cd "$dir" && timeout -k 5 $T sbatch --parsable -N2 -o "$jobout" --wrap 'srun hostname' 2>&1)"
if [[ "$jobid" =~ ^[0-9]+$ ]]; then
  state="" exitcode=""
  deadline=$((SECONDS + 90))
  while ((SECONDS < deadline)); do
    line="$(timeout 20 scontrol show job -o "$jobid" 2>/dev/null)"
    state="$(grep -o 'JobState=[A-Z_]*' <<<"$line" | cut -d= -f2)"
    exitcode="$(grep -o ' ExitCode=[0-9:]*' <<<"$line" | cut -d= -f2)"
    case "$state" in PENDING | CONFIGURING | RUNNING | COMPLETING | "") sleep 0.3 ;; *) break ;; esac
  done
  f="${jobout//%j/$jobid}"
  got="$(sort "$f" 2>/dev/null | tr '\n' ' ')"
  if [[ "$state" == COMPLETED && "$exitcode" == 0:0 && "$got" == "n1 n2 " ]]; then
    ok "sbatch -N2 --wrap 'srun hostname': job $jobid COMPLETED ExitCode=0:0, output: $got"
  else
    bad "sbatch job $jobid: state=$state exit=$exitcode output='$got'"
    [[ -f "$f" ]] && sed 's/^/  | /' "$f"
  fi
else
  bad "sbatch failed: $jobid"
fi

# 6. PMIx across nodes, when Slurm's mpi/pmix plugin is there.
mpis="$(timeout 20 srun --mpi=list 2>&1)"
if grep -qw pmix <<<"$mpis"; then
  out="$(timeout -k 5 $T srun --mpi=pmix -N2 -n2 env 2>&1)"
  rc=$?
  got="$(grep -o '^PMIX_RANK=[0-9]*' <<<"$out" | sort | tr '\n' ' ')"
  if ((rc == 0)) && [[ "$got" == "PMIX_RANK=0 PMIX_RANK=1 " ]]; then
    ok "srun --mpi=pmix -N2 -n2: $got"
  else
    bad "srun --mpi=pmix -N2 -n2 (rc=$rc): $(grep -iE 'error|pmix' <<<"$out" | head -n 5)"
  fi
else
  echo "SKIP: PMIx unavailable: srun --mpi=list offers no pmix plugin (Slurm built without PMIx, or" \
    "slurm-wlm-basic-plugins lacks mpi_pmix*.so): $(tr '\n' ' ' <<<"$mpis")"
fi

# 7. Teardown stops every daemon and is safe twice.
pids="$(cat "$dir"/run/*.pid 2>/dev/null | tr '\n' ' ')"
if timeout -k 5 60 bash "$cluster" down --state-dir "$dir" >/dev/null &&
  timeout -k 5 60 bash "$cluster" down --state-dir "$dir" >/dev/null; then
  alive=""
  for p in $pids; do [[ -d /proc/$p ]] && alive+="$p($(cat /proc/"$p"/comm 2>/dev/null)) "; done
  if [[ -z "$alive" ]] && ! grep -q "ax-slurm:$dir" /etc/hosts; then
    ok "down (twice): daemons $pids stopped, /etc/hosts cleaned"
  else
    bad "down left: ${alive:-/etc/hosts entries}"
  fi
else
  bad "down failed"
fi

summary="slurm smoke: $passed checks passed"
((failed > 0)) && summary+=", $failed failed"
echo "$summary ($((SECONDS - start)) s)"
((failed == 0))
