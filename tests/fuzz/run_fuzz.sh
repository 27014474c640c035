#!/usr/bin/env bash
# Builds the shard reader fuzzer (CMake preset "fuzz": clang, libFuzzer + ASan + UBSan) and runs
# it for SECONDS (default 60) from a seed corpus of small valid shards. Exits non-zero on any
# crash, leak, sanitizer report or hang; the input that caused it is kept under the build dir.
#
#   tests/fuzz/run_fuzz.sh [SECONDS]
#   AX_FUZZ_BUILD_DIR=build/my-fuzz tests/fuzz/run_fuzz.sh 30
set -euo pipefail

seconds=${1:-60}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${AX_FUZZ_BUILD_DIR:-$root/build/fuzz}
cd "$root"

cmake --preset fuzz -B "$build" >/dev/null
cmake --build "$build" --target shard_reader_fuzz make_shard_seeds

work=$(mktemp -d "${TMPDIR:-/tmp}/ax-fuzz-XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/seeds" "$work/corpus" "$build/fuzz-artifacts"
"$build/tests/fuzz/make_shard_seeds" "$work/seeds"

echo "fuzz: shard_reader_fuzz for ${seconds}s from $(ls "$work/seeds" | wc -l) seeds"
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1 \
  "$build/tests/fuzz/shard_reader_fuzz" "$work/corpus" "$work/seeds" \
    -dict="$root/tests/fuzz/shard.dict" -max_total_time="$seconds" -timeout=10 \
    -rss_limit_mb=2048 -max_len=16384 -print_final_stats=1 \
    -artifact_prefix="$build/fuzz-artifacts/"
echo "fuzz: no crash in ${seconds}s"
