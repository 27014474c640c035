#!/usr/bin/env bash
# The test command on a fresh machine: installs what ax needs (with PyTorch for the oracle test),
# builds ax once and runs the unit suite, the e2e test (the main job's run with fewer steps), then
# the `slurm` suite on a local 4-node Slurm cluster (root only; docs/testing-slurm.md) in the
# background, while the gpu tests, a short libFuzzer run of the shard reader and ax inside a
# minimal container image (root only; tests/containers) run beside it. Where the CUDA toolkit is
# installed the one build is the CUDA configuration (preset cuda: the CUDA backend and its `gpu`
# tests compile, sm_80 and sm_90; with no GPU every program falls back to the CPU and the gpu
# tests skip themselves), and `scripts/gpu-check.sh --check` runs every part of the GPU acceptance
# on the CPU; without the toolkit it is the CPU configuration. No source is compiled twice (the
# fuzzer's instrumented build of the shard reader aside).
# Before the unit suite, `clang-format --dry-run --Werror` over every tracked .cc, .h and .cu file
# (the layout STYLE.md asks for; .clang-format). Ends with one line "tests: N passed, N failed"
# (plus why the container test or the slurm suite was skipped, if it was).
#   AX_FUZZ_SECONDS=0 skips the fuzz run; AX_SLURM_TESTS=0 skips the slurm suite;
#   AX_CUDA_CHECK=0 builds the CPU configuration even where the toolkit is installed;
#   AX_GPU_CHECK=0 skips scripts/gpu-check.sh --check.
set -euo pipefail
cd "$(dirname "$0")/.."
slurm_tests="${AX_SLURM_TESTS:-1}"
groups=(--with oracle --with container)
[[ "$slurm_tests" == 0 ]] || groups+=(--with slurm)
bash scripts/setup.sh "${groups[@]}"
preset=cpu
if [[ "${AX_CUDA_CHECK:-1}" != 0 && -x /usr/local/cuda/bin/nvcc ]]; then preset=cuda; fi
build_start=$SECONDS
build=$(bash scripts/build.sh "$preset" | tail -n 1)
echo "build ($preset): $((SECONDS - build_start)) s wall time"
log=$(mktemp)
slurm_log=$(mktemp)
container_log=$(mktemp)
slurm_dir=$(sed -n 's/^AX_SLURM_TEST_DIR:[A-Z]*=//p' "$build/CMakeCache.txt")
cleanup() {
  rm -f "$log" "$slurm_log" "$container_log"
  # The suite's cleanup fixture tears the cluster down; this covers a ctest that was killed.
  if [[ -n "$slurm_dir" && -e "$slurm_dir/run" && $(id -u) == 0 ]]; then
    timeout -k 5 60 bash scripts/slurm-cluster.sh down --state-dir "$slurm_dir" >/dev/null 2>&1 ||
      true
  fi
}
trap cleanup EXIT
rc=0
# The tree's layout: clang-format changes nothing (run `clang-format -i FILE` to fix one).
format_passed=0 format_failed=0
if git ls-files -z '*.cc' '*.h' '*.cu' | xargs -0 clang-format --dry-run --Werror; then
  format_passed=1
  echo "clang-format: every tracked .cc, .h and .cu file is formatted"
else
  format_failed=1
  echo "clang-format: the files above are not formatted (clang-format -i FILE)" >&2
fi
ctest --test-dir "$build" -L '^(unit|e2e)$' --output-on-failure -j "$(nproc)" --timeout 600 |
  tee "$log" || rc=$?

# The slurm suite needs root (UTS namespaces, /etc/hosts) and the Slurm daemons. It runs in the
# background while the GPU checks, the fuzz run and the container test run here: its jobs mostly
# wait on Slurm (a quarter of one core over its five minutes), so it costs little beside them.
slurm_skip=""
if [[ "$slurm_tests" == 0 ]]; then
  slurm_skip="AX_SLURM_TESTS=0"
elif [[ $(id -u) != 0 ]]; then
  slurm_skip="needs root (UTS namespaces, /etc/hosts, munged), running as $(id -un)"
elif ! [[ -x /usr/sbin/slurmctld && -x /usr/sbin/slurmd && -x /usr/sbin/munged ]] ||
  ! command -v srun >/dev/null; then
  slurm_skip="Slurm binaries missing (scripts/setup.sh --with slurm)"
fi
slurm_passed=0 slurm_failed=0 slurm_rc=0 slurm_pid=""
if [[ -z "$slurm_skip" ]]; then
  slurm_start=$SECONDS
  echo "slurm suite: started in the background (its output follows the other checks)"
  # One local cluster per machine (its nodes are n1..n4 in /etc/hosts): wait for another's.
  # -o: the suite does not inherit the lock's descriptor, so a daemon its tests start (munged)
  # cannot hold the lock after a killed run (it did once: the next run waited forever).
  flock -o /tmp/ax-slurm.lock \
    ctest --test-dir "$build" -L slurm --output-on-failure --timeout 300 >"$slurm_log" 2>&1 &
  slurm_pid=$!
fi

# The CUDA configuration built above: its gpu tests skip themselves when no GPU answers.
cuda_passed=0 cuda_failed=0 cuda_note="" cuda_built=0
if [[ "$preset" == cuda ]]; then
  cuda_built=1
  cuda_log=$(mktemp)
  echo "cuda: the CUDA backend and its gpu tests compiled (sm_80, sm_90) in $build"
  # Each gpu suite is one ctest test (tests/CMakeLists.txt): its cases are counted from gtest's
  # summary lines ("[  PASSED  ] N tests.", "[  SKIPPED ] N tests").
  ctest --test-dir "$build" -L gpu -V --timeout 1200 >"$cuda_log" 2>&1 || cuda_failed=1
  gtest_count() {
    grep -oE "\[  $1 *\] [0-9]+ tests?" "$cuda_log" | awk '{s += $(NF-1)} END {print s + 0}'
  }
  cuda_skipped=$(gtest_count SKIPPED)
  cuda_ran=$(gtest_count PASSED)
  cuda_passed=$((1 + cuda_ran))
  ((cuda_skipped == 0)) || cuda_note="$cuda_skipped gpu tests skipped: no GPU answered"
  ((cuda_failed == 0)) || grep -E 'Failed|FAILED|\*\*\*' "$cuda_log" | head -20 >&2
  rm -f "$cuda_log"
fi

# The GPU acceptance (scripts/gpu-check.sh) run on the CPU so that it never rots: its bundle, every
# step with the CPU standing in for the GPU, and its report (into a temporary file).
gpucheck_passed=0 gpucheck_failed=0 gpucheck_skip=""
if [[ "${AX_GPU_CHECK:-1}" == 0 ]]; then
  gpucheck_skip="AX_GPU_CHECK=0"
elif [[ "${AX_CUDA_CHECK:-1}" == 0 || ! -x /usr/local/cuda/bin/nvcc ]]; then
  gpucheck_skip="no CUDA toolkit at /usr/local/cuda (or AX_CUDA_CHECK=0): no gpu test binaries"
elif ((cuda_built == 0)); then
  gpucheck_skip="the CUDA backend did not compile"
else
  gpucheck_start=$SECONDS
  if bash scripts/gpu-check.sh --check --cpu-build "$build" --cuda-build "$build"; then
    gpucheck_passed=1
  else
    gpucheck_failed=1
  fi
  echo "gpu-check --check: $((SECONDS - gpucheck_start)) s wall time"
fi

fuzz_seconds="${AX_FUZZ_SECONDS:-60}"
fuzz_passed=0 fuzz_failed=0
if (( fuzz_seconds > 0 )); then
  if bash tests/fuzz/run_fuzz.sh "$fuzz_seconds"; then fuzz_passed=1; else fuzz_failed=1; fi
fi
summary=$(grep -E "tests passed, [0-9]+ tests failed out of [0-9]+" "$log" || true)
total=$(sed -E 's/.* out of ([0-9]+).*/\1/' <<<"$summary")
failed=$(sed -E 's/.*, ([0-9]+) tests failed.*/\1/' <<<"$summary")
# Skipped cases (GTEST_SKIP) are in ctest's total: not counted as passed.
unit_skipped=$(grep -c '(Skipped)$' "$log" || true)
total=$((total - unit_skipped))
if [[ -z "$summary" ]]; then
  echo "tests: ctest printed no summary" >&2
  exit 1
fi

# The container image test in its reduced form (a root file system of the built binaries and their
# libraries, containers/README.md); the full Debian image test (label container) is not run here.
# It skips itself without root or squashfs-tools: reported, not counted as passed.
container_passed=0 container_failed=0 container_skip="" container_rc=0
ctest --test-dir "$build" -L container-minimal --verbose --timeout 300 | tee "$container_log" ||
  container_rc=$?
container_summary=$(grep -E "tests passed, [0-9]+ tests failed out of [0-9]+" "$container_log" ||
  true)
if [[ -z "$container_summary" ]]; then
  echo "tests: the container test's ctest printed no summary" >&2
  container_failed=1
else
  container_total=$(sed -E 's/.* out of ([0-9]+).*/\1/' <<<"$container_summary")
  container_failed=$(sed -E 's/.*, ([0-9]+) tests failed.*/\1/' <<<"$container_summary")
  container_skipped=$(grep -c '(Skipped)$' "$container_log" || true)
  container_passed=$((container_total - container_failed - container_skipped))
  if ((container_skipped > 0)); then
    container_skip=$(grep -o 'SKIPPED: .*' "$container_log" | head -n 1 | cut -c10-)
    container_skip=${container_skip:-see above}
  fi
fi

if [[ -n "$slurm_pid" ]]; then
  wait "$slurm_pid" || slurm_rc=$?
  cat "$slurm_log"
  echo "slurm suite: $((SECONDS - slurm_start)) s wall time (in the background since the unit suite)"
  slurm_summary=$(grep -E "tests passed, [0-9]+ tests failed out of [0-9]+" "$slurm_log" || true)
  if [[ -z "$slurm_summary" ]]; then
    echo "tests: the slurm suite's ctest printed no summary" >&2
    slurm_failed=1
  else
    slurm_total=$(sed -E 's/.* out of ([0-9]+).*/\1/' <<<"$slurm_summary")
    slurm_failed=$(sed -E 's/.*, ([0-9]+) tests failed.*/\1/' <<<"$slurm_summary")
    # A test that skipped itself (exit 77) counts as passed in ctest's summary: not here.
    slurm_skipped=$(grep -c '(Skipped)$' "$slurm_log" || true)
    slurm_passed=$((slurm_total - slurm_failed - slurm_skipped))
    if ((slurm_skipped > 0)); then
      slurm_skip="$slurm_skipped of its tests skipped themselves (see above)"
    fi
  fi
else
  echo "tests: slurm suite SKIPPED: $slurm_skip"
fi

line="tests: $((total - failed + format_passed + fuzz_passed + cuda_passed + gpucheck_passed +
  container_passed + slurm_passed))"
line+=" passed, $((failed + format_failed + fuzz_failed + cuda_failed + gpucheck_failed +
  container_failed + slurm_failed)) failed"
[[ -z "$cuda_note" ]] || line+=" ($cuda_note)"
[[ -z "$gpucheck_skip" ]] || line+=" (gpu-check --check skipped: $gpucheck_skip)"
((unit_skipped == 0)) || line+=" ($unit_skipped unit cases skipped themselves, see above)"
[[ -z "$container_skip" ]] || line+=" (container test skipped: $container_skip)"
[[ -z "$slurm_skip" ]] || line+=" (slurm suite skipped: $slurm_skip)"
echo "$line"
(( rc == 0 && format_failed == 0 && fuzz_failed == 0 && cuda_failed == 0 && gpucheck_failed == 0 && container_rc == 0 &&
   container_failed == 0 && slurm_rc == 0 && slurm_failed == 0 ))
