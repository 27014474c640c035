#!/usr/bin/env bash
# The test command on a fresh machine: installs what ax needs (with PyTorch for the oracle test),
# builds the CPU configuration and runs the unit suite, then a short libFuzzer run of the shard
# reader. Ends with one line "tests: N passed, N failed".
#   AX_FUZZ_SECONDS=0 skips the fuzz run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --with oracle
build=$(bash scripts/build.sh cpu | tail -n 1)
log=$(mktemp)
trap 'rm -f "$log"' EXIT
rc=0
ctest --test-dir "$build" -L unit --output-on-failure -j "$(nproc)" --timeout 600 | tee "$log" ||
  rc=$?
fuzz_seconds="${AX_FUZZ_SECONDS:-60}"
fuzz_passed=0 fuzz_failed=0
if (( fuzz_seconds > 0 )); then
  if bash tests/fuzz/run_fuzz.sh "$fuzz_seconds"; then fuzz_passed=1; else fuzz_failed=1; fi
fi
summary=$(grep -E "tests passed, [0-9]+ tests failed out of [0-9]+" "$log" || true)
total=$(sed -E 's/.* out of ([0-9]+).*/\1/' <<<"$summary")
failed=$(sed -E 's/.*, ([0-9]+) tests failed.*/\1/' <<<"$summary")
if [[ -z "$summary" ]]; then
  echo "tests: ctest printed no summary" >&2
  exit 1
fi
echo "tests: $((total - failed + fuzz_passed)) passed, $((failed + fuzz_failed)) failed"
(( rc == 0 && fuzz_failed == 0 ))
