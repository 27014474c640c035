#!/usr/bin/env bash
# Configures and builds ax with a CMake preset and prints the build directory on the last line.
# Used by main.sh, test.sh and containers/Dockerfile.
#   scripts/build.sh [PRESET [TARGET...]]
# PRESET: cpu, cuda, ... (CMakePresets.json); default cuda when the CUDA toolkit is installed,
# else cpu. TARGETs: build only these (main.sh builds ax-data and ax-train); default everything.
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-}"
if [[ -z "$preset" ]]; then
  if [[ -x /usr/local/cuda/bin/nvcc ]]; then preset=cuda; else preset=cpu; fi
fi
targets=()
(($# < 2)) || targets=(--target "${@:2}")
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)" "${targets[@]}" >&2
echo "build/$preset"
