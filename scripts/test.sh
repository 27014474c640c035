#!/usr/bin/env bash
# The test command on a fresh machine: installs what ax needs, builds the CPU configuration and
# runs the unit suite, then a short libFuzzer run of the shard reader.
#   AX_FUZZ_SECONDS=0 skips the fuzz run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --with oracle
build=$(bash scripts/build.sh cpu | tail -n 1)
ctest --test-dir "$build" -L unit --output-on-failure -j "$(nproc)" --timeout 600
fuzz_seconds="${AX_FUZZ_SECONDS:-60}"
if (( fuzz_seconds > 0 )); then
  bash tests/fuzz/run_fuzz.sh "$fuzz_seconds"
fi
