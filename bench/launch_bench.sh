#!/usr/bin/env bash
# The SPANK plugin's cost in a step launch (issue 4 "Performance", goal < 50 ms), measured on the
# local Slurm cluster of scripts/slurm-cluster.sh: `srun -N2 --ntasks-per-node=8 /bin/true` with
# spank_ax.so in plugstack.conf and --ax-mesh=auto, against the same srun with plugstack.conf
# empty. srun and every slurmstepd read plugstack.conf anew for each step (checked below first),
# so the variants run interleaved on one cluster. Prints a table of medians
# (docs/benchmarks-launch.md); ax-launch-bench measures the rest of the launch path.
#
#   bench/launch_bench.sh BUILD_DIR [--runs N] [--state-dir DIR]
#
# Brings up a 2-node cluster (8 fake GPUs per node) in its own state dir and takes it down at the
# end. Refuses to start while another cluster runs: they would share the controller address.
# Needs root, like scripts/slurm-cluster.sh.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${1:?usage: $0 BUILD_DIR [--runs N] [--state-dir DIR]}"
shift
runs=15
STATE=/tmp/ax-launch-bench
while (($# > 0)); do
  case "$1" in
    --runs) runs="${2:?--runs needs a value}"; shift ;;
    --state-dir) STATE="${2:?--state-dir needs a value}"; shift ;;
    *) echo "launch_bench.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done
if ! [[ "$runs" =~ ^[0-9]+$ ]] || ((runs < 1)); then
  echo "launch_bench.sh: --runs wants N >= 1" >&2
  exit 2
fi
BUILD="$(cd "$BUILD" && pwd)"
PLUGIN="$BUILD/spank_plugin/spank_ax.so"
FIXTURE="$REPO/topology/fixtures/dgx-h100.json"
[[ -e "$PLUGIN" ]] || { echo "launch_bench.sh: $PLUGIN is missing (build spank_ax)" >&2; exit 1; }
[[ $(id -u) == 0 ]] || { echo "launch_bench.sh: needs root" >&2; exit 1; }
if pgrep -x slurmctld >/dev/null; then
  echo "launch_bench.sh: a Slurm cluster is already running (pgrep -x slurmctld)" >&2
  exit 1
fi

export AX_SLURM_CTLD_PORT="${AX_SLURM_CTLD_PORT:-6837}"
export AX_SLURM_PORT_BASE="${AX_SLURM_PORT_BASE:-17200}"
export SLURM_CONF="$STATE/etc/slurm.conf"
cluster=(bash "$REPO/scripts/slurm-cluster.sh")
stack="$STATE/plugstack-ax.conf"
t() { timeout -k 5 60 "$@"; }

mkdir -p "$STATE"
echo "required $PLUGIN topology=$FIXTURE" >"$stack"
trap 't "${cluster[@]}" down --state-dir "$STATE" >/dev/null 2>&1 || true' EXIT
t "${cluster[@]}" up --nodes 2 --gpus-per-node 8 --state-dir "$STATE" --plugstack "$stack" \
  >/dev/null

# Per-step re-reading: with default=auto the plugin acts without --ax-mesh, so AX_RANK in the
# tasks shows whether this step's slurmstepd loaded it.
ranks() {
  { t srun -J ax-launch-bench -N2 --ntasks-per-node=8 printenv AX_RANK 2>/dev/null || true; } |
    sort -n | tr '\n' ' '
}
echo "required $PLUGIN default=auto topology=$FIXTURE" >"$stack"
with="$(ranks)"
: >"$stack"
without="$(ranks)"
echo "required $PLUGIN default=auto topology=$FIXTURE" >"$stack"
again="$(ranks)"
want="0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 "
if [[ "$with" != "$want" || -n "$without" || "$again" != "$want" ]]; then
  echo "launch_bench.sh: plugstack.conf is not re-read per step" \
    "(AX_RANK: '$with' / '$without' / '$again')" >&2
  exit 1
fi
echo "plugstack.conf is re-read per step: AX_RANK set, unset, set again across three steps"

# variant name, plugstack line, extra srun option
names=("no plugin (empty plugstack.conf)" "spank_ax.so loaded, no --ax-mesh"
  "spank_ax.so --ax-mesh=auto, dgx-h100 fixture" "spank_ax.so --ax-mesh=auto, hwloc discovery")
lines=("" "required $PLUGIN topology=$FIXTURE" "required $PLUGIN topology=$FIXTURE"
  "required $PLUGIN")
opts=("" "" "--ax-mesh=auto" "--ax-mesh=auto")
declare -A samples
for ((r = 0; r < runs + 1; r++)); do  # run 0 warms up and is not counted
  for v in "${!names[@]}"; do
    echo "${lines[$v]}" >"$stack"
    start=$(date +%s%N)
    # shellcheck disable=SC2086
    t srun -J ax-launch-bench -N2 --ntasks-per-node=8 ${opts[$v]} /bin/true
    ms=$((($(date +%s%N) - start) / 1000))
    ((r == 0)) || samples[$v]+="$ms "
  done
done

median() {
  tr ' ' '\n' | grep . | sort -n |
    awk '{a[NR] = $1} END {m = NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
                            printf "%.1f", m / 1000}'
}
best() { tr ' ' '\n' | grep . | sort -n | head -n 1 | awk '{printf "%.1f", $1 / 1000}'; }
base="$(median <<<"${samples[0]}")"
echo "srun -N2 --ntasks-per-node=8 /bin/true on $(nproc) cores, median and best of $runs runs (ms)"
printf '%-48s %9s %9s %10s\n' "variant" "median" "best" "added"
for v in "${!names[@]}"; do
  m="$(median <<<"${samples[$v]}")"
  printf '%-48s %9s %9s %+10.1f\n' "${names[$v]}" "$m" "$(best <<<"${samples[$v]}")" \
    "$(awk -v a="$m" -v b="$base" 'BEGIN {print a - b}')"
done
