#!/usr/bin/env bash
# `cmake --install` of this build into a temporary prefix: the programs in bin/ (ax-store-check
# too), the SPANK plugin in lib/slurm/ when the build has one, the job scripts and every piece they
# source in share/ax/sbatch/; and an installed job script, with no ax-train on PATH and no AX_BIN,
# finds the installation's bin/ (AX_DRY_RUN=1 prints the srun command it would run).
#   tests/scripts/install_test.sh BUILD_DIR
set -uo pipefail
build="${1:?usage: install_test.sh BUILD_DIR}"
prefix=$(mktemp -d "${TMPDIR:-/tmp}/ax-install.XXXXXX")
trap 'rm -rf "$prefix"' EXIT
failures=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; failures=$((failures + 1)); }

if out=$(cmake --install "$build" --prefix "$prefix" 2>&1); then
  ok "cmake --install into $prefix"
else
  bad "cmake --install failed: $(tail -3 <<<"$out")"
fi
for b in ax-train ax-data ax-launch ax-topo ax-store-check; do
  [[ -x "$prefix/bin/$b" ]] && ok "bin/$b" || bad "bin/$b not installed"
done
if grep -q '^AX_HAVE_SLURM:INTERNAL=ON' "$build/CMakeCache.txt" 2>/dev/null ||
  [[ -e "$build/spank_plugin/spank_ax.so" ]]; then
  [[ -f "$prefix/lib/slurm/spank_ax.so" ]] && ok "lib/slurm/spank_ax.so" ||
    bad "lib/slurm/spank_ax.so not installed"
fi
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
missing=()
while read -r f; do
  [[ -e "$prefix/share/ax/sbatch/$f" ]] || missing+=("$f")
done < <(cd "$repo/sbatch" && git ls-files 2>/dev/null || find . -type f -printf '%P\n')
((${#missing[@]} == 0)) && ok "share/ax/sbatch holds every file of sbatch/" ||
  bad "share/ax/sbatch lacks: ${missing[*]}"

# The installed example_pile.sub, from outside the repository, with a PATH that has no ax-train.
work="$prefix/work"
mkdir -p "$work/shards" "$work/ws"
echo '{}' >"$work/shards/index.json"
: >"$work/spm.model"
out=$(cd "$work" && env -i PATH=/usr/bin:/bin HOME="$work" AX_DRY_RUN=1 \
  BASE_WORKSPACE_DIR="$work/ws" BASE_TFDS_DATA_DIR="$work/shards" \
  BASE_VOCAB_PATH="$work/spm.model" LOG_DIR_LOCAL=logs/x PREC=bfloat16 GPUS_PER_NODE=2 \
  PERCORE_BATCH_SIZE=4 bash "$prefix/share/ax/sbatch/example_pile.sub" 2>&1)
rc=$?
if ((rc == 0)) && grep -qF "$prefix/bin/ax-train" <<<"$out"; then
  ok "the installed example_pile.sub finds $prefix/bin/ax-train"
else
  bad "the installed example_pile.sub (exit $rc) did not find the installation's bin/: $out"
fi
((failures == 0))
