#!/usr/bin/env bash
# Configures and builds ax with a CMake preset (default: cuda when the CUDA toolkit is installed,
# else cpu) and prints the build directory on the last line. Used by main.sh and test.sh.
#   scripts/build.sh [preset]
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-}"
if [[ -z "$preset" ]]; then
  if [[ -x /usr/local/cuda/bin/nvcc ]]; then preset=cuda; else preset=cpu; fi
fi
jobs=$(nproc)
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "$jobs" >&2
echo "build/$preset"
