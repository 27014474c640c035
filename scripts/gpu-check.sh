#!/usr/bin/env bash
# The GPU acceptance of issues 11 and 15 in one command, in steps that each fit one 10-minute
# call of the lent GPU machine (the calls to make: docs/notes/gpu-session.md).
#
#   scripts/gpu-check.sh bundle                   here (CUDA toolkit, no GPU): build, data, bundle
#   scripts/gpu-check.sh run tests curves parallel sanitize     on the GPU machine, call 1
#   scripts/gpu-check.sh run bench                              on the GPU machine, call 2
#   scripts/gpu-check.sh run bench --bench-models t5-small,t5-base,t5-large          call 3: T5
#   scripts/gpu-check.sh report DIR...            here: the report into docs/benchmarks-gpu.md
#   scripts/gpu-check.sh --check                  here and in CI: every part on the CPU
#
# `run` starts with the env step (the GPU, driver, PyTorch, compute-sanitizer, the libraries ax
# finds), then the steps named: tests (every gpu-labelled test binary), sanitize
# (compute-sanitizer memcheck of short ax-train runs, racecheck/synccheck of a parity subset),
# curves (50-step loss curves, GPU against the CPU in the same dtype plan), parallel (FSDP and
# tensor parallelism over NCCL on every GPU, against one process), bench (bench/gpu_bench.sh).
# Each step writes one file as soon as it ends, $OUT/gpu-check/STEP.tgz (STEP/summary.json and
# its logs), and prints its checks.
# Exit status: 0 every step passed (or skipped itself), 1 a step failed or did not finish,
# 2 bad command line, 3 no GPU answered (run).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
helper="$root/scripts/gpu_check.py"
# shellcheck source-path=SCRIPTDIR source=lib/bundle.sh
source "$root/scripts/lib/bundle.sh"

build="$root/build/gpu-check"          # bundle: the CUDA configuration
bundle="$root/build/gpu-check-bundle"  # bundle writes it, run reads it
cpu_build="$root/build/cpu"            # --check: ax's binaries
cuda_build="$root/build/cuda-check"    # --check: the gpu test binaries scripts/test.sh built
budget=560       # seconds for one `run`: the device machine gives a command 10 minutes
curve_steps=50
bench_models="Pile126M,fuji-1B-v2"
out=""
python="${PYTHON:-}"
report_output=""
report_into="$root/docs/benchmarks-gpu.md"
mode=""
args=()

usage() {
  sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  cat <<EOF

options:
  --bundle DIR     the bundle (default build/gpu-check-bundle): bundle writes it, run reads it
  --build DIR      bundle: the CUDA build directory (default build/gpu-check)
  --out DIR        run: where STEP.tgz go (default \$OUT/gpu-check, else ./gpu-check-results);
                   --check: keep its STEP.tgz and report.md there (default: a temporary
                   directory, removed)
  --budget S       run: seconds for all its steps (default $budget); a step past it is
                   recorded as incomplete
  --curve-steps N  run: steps of each loss curve (default $curve_steps)
  --bench-models L run: the bench step's models (default $bench_models; T5 in a call of
                   its own: t5-small,t5-base,t5-large); the report adds up the bench results
                   of several calls
  --python PATH    the Python with PyTorch (default \$PYTHON, else the first of python3 and
                   /usr/bin/python3 that has torch)
  --output FILE    report: write the report here instead of into docs/benchmarks-gpu.md
  --cpu-build DIR  --check: the CPU build with ax-train, ax-launch, ax-data, ax-train-bench,
                   ax-attention-bench (default build/cpu)
  --cuda-build DIR --check: a CUDA build holding the gpu test binaries (default
                   build/cuda-check; without it the tests step records them as not built)
EOF
}

die() {
  echo "gpu-check.sh: $*" >&2
  exit 2
}

while (($#)); do
  case "$1" in
    bundle | run | report) [[ -z "$mode" ]] || die "one mode at a time"; mode="$1"; shift ;;
    --check) [[ -z "$mode" ]] || die "one mode at a time"; mode=check; shift ;;
    --bundle) bundle="${2:?}"; shift 2 ;;
    --build) build="${2:?}"; shift 2 ;;
    --out) out="${2:?}"; shift 2 ;;
    --budget) budget="${2:?}"; shift 2 ;;
    --curve-steps) curve_steps="${2:?}"; shift 2 ;;
    --bench-models) bench_models="${2:?}"; shift 2 ;;
    --python) python="${2:?}"; shift 2 ;;
    --output) report_output="${2:?}"; shift 2 ;;
    --cpu-build) cpu_build="${2:?}"; shift 2 ;;
    --cuda-build) cuda_build="${2:?}"; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    -*) die "unknown option '$1' (see --help)" ;;
    *) args+=("$1"); shift ;;
  esac
done
[[ -n "$mode" ]] || die "give a mode: bundle, run STEP..., report DIR... or --check (see --help)"
[[ "$budget" =~ ^[0-9]+$ && "$curve_steps" =~ ^[0-9]+$ ]] ||
  die "--budget and --curve-steps take integers"

# The Python with PyTorch (the bench's peer needs it), found without importing it (seconds);
# the helper needs only the standard library, so it takes the system's Python when there is one
# (a version manager's shim costs a second or two per call).
if [[ -z "$python" ]]; then
  for p in python3 /usr/bin/python3; do
    if "$p" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("torch") is None)' \
      >/dev/null 2>&1; then
      python="$p"
      break
    fi
  done
  python="${python:-python3}"
fi
helper_python=python3
[[ -x /usr/bin/python3 ]] && helper_python=/usr/bin/python3

start=$SECONDS
log() { printf '[%4d s] %s\n' "$((SECONDS - start))" "$*"; }

# ---- bundle: binaries, their libraries and the data, for the GPU machine ------------------------

# Real text for the runs (scripts/corpus.sh), small: the first 4000 verses of the KJV train split
# (540 kB), the book of Revelation for validation, a 500-piece tokenizer (tiny-gpt's vocabulary
# is 512) and their token shards; in t5/ the same text with a tokenizer of 500 pieces and T5's
# 100 sentinels (--extra-ids 100: tiny-t5's span corruption needs them).
prepare_data() {  # DIR AX_DATA CORPUS_DIR
  local dir="$1" axdata="$2" corpus="$3" split sub extra
  mkdir -p "$dir"
  bash "$root/scripts/corpus.sh" "$corpus" >/dev/null
  head -n 4000 "$corpus/kjv-train.txt" >"$dir/train.txt"
  cp "$corpus/kjv-val.txt" "$dir/val.txt"
  for sub in . t5; do
    extra=()
    [[ "$sub" == t5 ]] && extra=(--vocab-size 600 --extra-ids 100) || extra=(--vocab-size 500)
    mkdir -p "$dir/$sub"
    "$axdata" train-tokenizer --input "$dir/train.txt" "${extra[@]}" \
      --output "$dir/$sub/spm.model" >"$dir/$sub/tokenizer.log" 2>&1
    for split in train val; do
      "$axdata" tokenize --tokenizer "$dir/$sub/spm.model" --input "$dir/$split.txt" \
        --output "$dir/$sub/shards/$split" >"$dir/$sub/tokenize-$split.log" 2>&1
    done
    rm -f "$dir/$sub/spm.vocab"
  done
  rm -f "$dir/train.txt" "$dir/val.txt"
}

# The bytes that travel with every device call beside a bundle: tracked files and untracked ones
# git does not ignore.
tree_bytes() {
  (cd "$root" && { git ls-files -z; git ls-files -z -o --exclude-standard; } |
    du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
}

make_bundle() {  # AX_BUILD TEST_BUILD CORPUS_DIR
  local axb="$1" testb="$2" corpus="$3" bins=() tests=() t f
  rm -rf "$bundle"
  mkdir -p "$bundle"
  for f in trainer/ax-train launcher/ax-launch bench/ax-train-bench bench/ax-attention-bench; do
    [[ -x "$axb/$f" ]] || die "$axb/$f is not built"
    bins+=("$axb/$f")
  done
  for t in $(helper gpu-tests "$root"); do
    f="$(find "$testb/tests" -type f -name "$t" -perm -u+x -print -quit 2>/dev/null || true)"
    if [[ -n "$f" ]]; then tests+=("$f"); else echo "$t" >>"$bundle/gpu-tests-missing.txt"; fi
  done
  bundle_copy "$bundle" "${bins[@]}" "${tests[@]}"
  for f in "${tests[@]}"; do basename "$f"; done >"$bundle/gpu-tests.txt"
  # The host symbol tables of the test and benchmark binaries (about 0.7 MB each) go: the size a
  # call carries is the limit. ax-train and ax-launch keep theirs, for the sanitizer's and gdb's
  # backtraces (a hang's evidence names functions).
  if command -v strip >/dev/null; then
    for f in "${tests[@]}" ax-train-bench ax-attention-bench; do
      strip --strip-unneeded "$bundle/bin/$(basename "$f")" 2>/dev/null || true
    done
  fi
  prepare_data "$bundle/data" "$axb/datasets/ax-data" "$corpus"
  local size tree
  size="$(du -sb "$bundle" | cut -f1)"
  tree="$(tree_bytes)"
  helper manifest "$bundle/MANIFEST.json" --bytes "$size" --build "$axb" --tests "${tests[@]}"
  log "bundle: $((size / 1024)) KiB in $bundle (binaries, libraries, data); the working tree" \
    "beside it: $((tree / 1024)) KiB; together $(((size + tree) / 1048576)) MiB of the 64 MiB" \
    "a device call carries"
  log "bundle: the GPU machine must have: $(bundle_machine_libraries "${bins[@]}" "${tests[@]}")"
  [[ ! -s "$bundle/gpu-tests-missing.txt" ]] ||
    log "bundle: gpu tests not built, left out: $(tr '\n' ' ' <"$bundle/gpu-tests-missing.txt")"
  if ((size + tree > 64 * 1048576)); then
    if [[ "$mode" == check ]]; then
      # --check bundles the test build's binaries (the test command's CUDA build holds device
      # code for sm_80 and sm_90): not the device bundle, whose size `bundle` checks.
      log "bundle: over 64 MiB, but --check's bundle is not the one a device call carries" \
        "(scripts/gpu-check.sh bundle: sm_90 only)"
    else
      echo "gpu-check.sh: the bundle and the working tree are over 64 MiB: a device call cannot" \
        "carry them" >&2
      return 1
    fi
  fi
}

do_bundle() {
  [[ -x /usr/local/cuda/bin/nvcc ]] || die "bundle builds the CUDA configuration: it needs the" \
    "CUDA toolkit at /usr/local/cuda"
  local tests
  tests="$(helper gpu-tests "$root")"
  # The lent machines are H100 and H200 (sm_90): their machine code only, no PTX, keeps each
  # binary's device code at about half of sm_80 + sm_90 with PTX (4.3 of 8.6 MB a binary, five
  # binaries: the bundle would pass the 64 MiB a call carries). AX_BUNDLE_CUDA_ARCHS=80-real for
  # an A100.
  local archs="${AX_BUNDLE_CUDA_ARCHS:-90-real}"
  log "building the CUDA configuration ($archs) in $build"
  mkdir -p "$build"
  if ! cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DAX_ENABLE_CUDA=ON \
    "-DCMAKE_CUDA_ARCHITECTURES=$archs" >"$build/gpu-check-configure.log" 2>&1; then
    tail -20 "$build/gpu-check-configure.log" >&2
    exit 1
  fi
  # shellcheck disable=SC2086  # the test targets are words
  cmake --build "$build" -j "$(nproc)" --target ax-train ax-launch ax-data ax-train-bench \
    ax-attention-bench $tests
  make_bundle "$build" "$build" "$root/build/gpu-check-corpus"
  log "carry build/gpu-check-bundle in each device call (docs/notes/gpu-session.md)"
}

# ---- run: the steps ------------------------------------------------------------------------------

device=cuda      # cuda on the GPU machine; cpu in --check, where the CPU stands in for the GPU
gpus=0
machine=""
run_start=$SECONDS
overall=0
sanitizer=""
export AX_CPU_GEMM=builtin  # the CPU references: the bundle does not carry OpenBLAS (36 MB)

left() { echo $((budget - (SECONDS - run_start))); }
cap() {  # SECONDS: that, or what is left of the budget (at least 1: `timeout 0` never stops)
  local l
  l="$(left)"
  ((l < 1)) && l=1
  ((l < $1)) && echo "$l" || echo "$1"
}

step_begin() {  # STEP
  step="$1"
  step_dir="$work/$1"
  rm -rf "$step_dir"
  mkdir -p "$step_dir/checks"
  step_start=$SECONDS
  step_notes=()
  check_no=0
  log "step $1 (budget left: $(left) s)"
}

# Sets check_path, the file of the step's next check (not in a subshell: it counts).
next_check() {
  check_no=$((check_no + 1))
  printf -v check_path '%s/checks/%02d.json' "$step_dir" "$check_no"
}

helper() { "$helper_python" "$helper" "$@"; }
record() { next_check; helper record "$1" "$2" "$3" --write "$check_path" "${@:4}"; }
note() { step_notes+=("$*"); }

# Logs over 4 MiB keep their first and last MiB: STEP.tgz must stay under the 16 MiB a device
# call returns per file.
trim_logs() {
  local f
  while read -r f; do
    { head -c 1048576 "$f"; printf '\n[... gpu-check: %s bytes cut ...]\n' "$(stat -c %s "$f")"
      tail -c 1048576 "$f"; } >"$f.cut" && mv "$f.cut" "$f"
  done < <(find "$step_dir" -type f -size +4M)
}

step_end() {
  local n notes=()
  for n in "${step_notes[@]}"; do notes+=(--note "$n"); done
  helper summarize "$step" "$step_dir" --device "$device" --seconds $((SECONDS - step_start)) \
    --machine "$machine" "${notes[@]}"
  trim_logs
  tar czf "$results/$step.tgz" -C "$work" --exclude=checkpoints --exclude=tensorboard "$step"
  case "$(helper_status "$step_dir/summary.json")" in
    failed | incomplete) overall=1 ;;
  esac
}

helper_status() {  # summary.json: the step's status
  "$helper_python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["status"])' "$1"
}

# The command that runs the bundle's binary NAME with its libraries: env LD_LIBRARY_PATH=... so
# that only ax's programs get the bundle's path (compute-sanitizer, Python and nvidia-smi keep
# the machine's), and the bundle's glibc loader when the machine's glibc is older.
axbin() {
  ax_cmd=(env "LD_LIBRARY_PATH=$bundle_libpath" "${bundle_loader[@]}" "$bundle/bin/$1")
}


# The data options of MODEL's runs: the T5 tokenizer and shards for t5 experiments.
data_of() {  # MODEL: sets model_data
  model_data=("${data[@]}")
  [[ "$1" != *t5* ]] || model_data=("${t5_data[@]}")
}

# train DIR DEVICE STEPS MODEL SECONDS [ax-train args...]: a run in DIR, its output in DIR.log,
# its exit status in train_rc (124: timed out).
train() {
  local dir="$1" dev="$2" n="$3" model="$4" t="$5"
  shift 5
  axbin ax-train
  data_of "$model"
  train_rc=0
  timeout -k 10 "$t" "${ax_cmd[@]}" --experiment "$model" "${model_data[@]}" --run-dir "$dir" \
    --device "$dev" --max-steps "$n" --set train.eval_every=0 --set train.checkpoint_every=0 \
    --set train.log_every=1 "$@" >"$dir.log" 2>&1 || train_rc=$?
}

find_sanitizer() {
  local c
  sanitizer="$(command -v compute-sanitizer || true)"
  for c in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda-*/bin/compute-sanitizer \
    /usr/local/cuda/compute-sanitizer/compute-sanitizer /opt/nvidia/*/compute-sanitizer; do
    [[ -z "$sanitizer" && -x "$c" ]] && sanitizer="$c"
  done
  [[ -n "$sanitizer" || "$device" != cuda ]] || sanitizer="$(find /usr/local /opt -maxdepth 5 \
    -type f -name compute-sanitizer -perm -u+x -print -quit 2>/dev/null || true)"
}

step_env() {
  step_begin env
  if [[ "$device" == cuda ]]; then
    nvidia-smi >"$step_dir/nvidia-smi.log" 2>&1 || true
    gpus="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)"
    local q driver cuda
    q="$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null |
      sort | uniq -c | sed 's/^ *\([0-9]*\) /\1 x /' | tr '\n' ';' | sed 's/;$//')"
    driver="$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)"
    cuda="$(sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' "$step_dir/nvidia-smi.log" | head -1)"
    if ((gpus > 0)); then
      machine="${q%%;*}, driver $driver"
      record gpu passed "$gpus GPU(s) answered: $q" --data "count=$gpus"
      record driver passed "driver $driver, CUDA $cuda (the driver's)"
    else
      machine="$(uname -n) (no GPU answered)"
      record gpu failed "no GPU answered: $(head -c 300 "$step_dir/nvidia-smi.log" | tr '\n' ' ')"
    fi
  else
    gpus=0
    machine="$(uname -n) CPU (--check)"
    record gpu skipped "--check: the CPU stands in for the GPU in every step"
  fi
  bundle_find_libraries "$python" "$bundle"/bin/*
  bundle_ldd "$bundle"/bin/* >"$step_dir/ldd.log" 2>&1
  if [[ -n "$bundle_problem" ]]; then
    record libraries failed "$bundle_problem"
  else
    record libraries passed "$(awk '$1 ~ /^lib(nccl|cublasLt|cudart|cuda)\./ && !s[$1]++ \
      {printf "%s%s => %s", n++ ? ", " : "", $1, $3}' "$step_dir/ldd.log")$( \
      ((${#bundle_loader[@]})) && echo "; with the bundle's glibc loader")"
  fi
  # Imported on the GPU machine (does it see the GPU?); here only its version (an import of
  # Debian's PyTorch costs 5-10 s, and the bench step imports it anyway).
  local torch
  if torch="$("$python" - "$device" 2>&1 <<'EOF'
import importlib.metadata, sys
if sys.argv[1] == "cuda":
    import torch
    print(f"{torch.__version__} (CUDA {torch.version.cuda}, sees a GPU: "
          f"{torch.cuda.is_available()})")
else:
    print(importlib.metadata.version("torch"), "(not imported in --check)")
EOF
)"; then
    record torch passed "$python: PyTorch $torch"
  else
    record torch failed "$python has no PyTorch: $(tail -1 <<<"$torch")"
  fi
  find_sanitizer
  if [[ -n "$sanitizer" ]]; then
    record sanitizer passed "$sanitizer, $("$sanitizer" --version 2>&1 | grep -m1 -i version)"
  elif [[ "$device" == cuda ]]; then
    record sanitizer failed "compute-sanitizer not found (PATH, /usr/local/cuda*, /opt)"
  else
    record sanitizer skipped "not installed here (needs the CUDA toolkit's full install)"
  fi
  record bundle passed "$(helper manifest-line "$bundle/MANIFEST.json")"
  record host passed "$(uname -srm); $(ldd --version | head -1); $(nproc) cores"
  step_end
}

step_tests() {
  step_begin tests
  local t rc tests
  if [[ -s "$bundle/gpu-tests-missing.txt" ]]; then
    record "not built" skipped "gpu tests not in the bundle (no CUDA build):$(tr '\n' ' ' \
      <"$bundle/gpu-tests-missing.txt" | sed 's/^/ /; s/ $//')"
  fi
  mapfile -t tests <"$bundle/gpu-tests.txt"
  for t in "${tests[@]}"; do
    axbin "$t"
    # The parity cases' GEMM plans and cuBLASLt's algorithms, on stderr after each [ RUN ] line:
    # what a failing GEMM ran (docs/cuda-backend.md "GEMMs").
    [[ "$t" != cuda_parity_test ]] || ax_cmd=("${ax_cmd[0]}" AX_CUDA_GEMM_LOG=1 "${ax_cmd[@]:1}")
    rc=0
    timeout -k 10 "$(cap 240)" "${ax_cmd[@]}" --gtest_color=no \
      --gtest_output="json:$step_dir/$t.json" >"$step_dir/$t.log" 2>&1 || rc=$?
    next_check
    helper gtest "$t" --json "$step_dir/$t.json" --log "$step_dir/$t.log" --rc "$rc" \
      --write "$check_path"
  done
  ((gpus != 1)) || note "one GPU: nccl_communicator_test's cases of two or more ranks skip" \
    "themselves; they need a machine with two GPUs"
  step_end
}

# Runs ARGS... under compute-sanitizer TOOL (on the CPU in --check: without it) and records the
# verdict as check NAME. LOG: the program's output; LOG.sanitizer: the sanitizer's reports.
sanitized() {  # NAME TOOL LOG SECONDS ARGS...
  local name="$1" tool="$2" log="$3" t="$4" rc=0
  shift 4
  if ((t < 30)); then
    record "$name" incomplete "not run: the ${budget} s budget is spent"
    return
  fi
  if [[ "$device" == cuda && -n "$sanitizer" ]]; then
    # The program is `env LD_LIBRARY_PATH=... ax-...`: the sanitizer follows it through the exec
    # (--target-processes all) and keeps the machine's library path for itself.
    timeout -k 10 "$t" "$sanitizer" --tool "$tool" --target-processes all \
      --log-file "$log.sanitizer" "$@" >"$log" 2>&1 || rc=$?
    next_check
    helper sanitizer "$name" --tool "$tool" --log "$log.sanitizer" --app-log "$log" --rc "$rc" \
      --write "$check_path"
  elif [[ "$device" == cuda ]]; then
    record "$name" failed "compute-sanitizer not found"
  else
    timeout -k 10 "$t" "$@" >"$log" 2>&1 || rc=$?
    if ((rc == 0)); then
      record "$name" skipped "no GPU: the same command ran on the CPU without $tool, exit 0"
    else
      record "$name" failed "the command failed on the CPU (exit $rc): $(tail -1 "$log")"
    fi
  fi
}

step_sanitize() {
  step_begin sanitize
  find_sanitizer
  local m run dev="$device" filter
  [[ "$device" == cuda ]] || dev=cpu
  axbin ax-train
  for m in tiny-gpt tiny-llama tiny-t5; do
    run="$step_dir/$m"
    data_of "$m"
    sanitized "memcheck: ax-train $m, 4 steps with an evaluation and a checkpoint" memcheck \
      "$run.log" "$(cap 150)" "${ax_cmd[@]}" --experiment "$m" "${model_data[@]}" \
      --run-dir "$run" \
      --device "$dev" --max-steps 4 --set train.eval_every=2 --set train.eval_batches=1 \
      --set train.checkpoint_every=4 --set train.log_every=1
  done
  # Sampling runs shorter sequences after longer ones on one backend (RoPE's table, issue 11).
  sanitized "memcheck: ax-train sample from the tiny-llama run, 8 tokens" memcheck \
    "$step_dir/sample.log" "$(cap 90)" "${ax_cmd[@]}" sample --run-dir "$step_dir/tiny-llama" \
    --prompt "In the beginning" --tokens 8 --temperature 0 --device "$dev"
  # The kernels that use shared memory and barriers: op-table cases (tests/trainer/backend/
  # op_table*.cc) of packed and general attention (bias over batch chunks, segments), the norms
  # and the cross-entropy, in every plan.
  local t="*OpTableParity.MatchesTheCpuBackend"
  filter="$t/attention_causal_B2_Tq37_*:$t/attention_general_causal_segments_B2_Tq65_*"
  filter+=":$t/attention_general_bidirectional_B3_Tq45_*:$t/layernorm_N300_C768_*"
  filter+=":$t/rmsnorm_N300_C768_*:$t/cross_entropy_N9_V1000_*:*CudaParityTest.SumSquares/*"
  if grep -qx cuda_parity_test "$bundle/gpu-tests.txt"; then
    axbin cuda_parity_test
    for tool in racecheck synccheck; do
      sanitized "$tool: cuda_parity_test $filter" "$tool" "$step_dir/parity-$tool.log" \
        "$(cap 150)" "${ax_cmd[@]}" --gtest_color=no --gtest_filter="$filter"
    done
  else
    record "racecheck, synccheck" skipped "cuda_parity_test is not in the bundle"
  fi
  step_end
}

step_curves() {
  step_begin curves
  local m d n="$curve_steps" gpu=cuda gpu_label=cuda drop=(--min-drop 0.5)
  # tiny-t5 trains on span corruption (the bundle's t5/ data); its GPU loss must fall too (the
  # CPU's falls 1.90 over 50 steps, mean of the first five against the last five).
  local models=(tiny-gpt tiny-llama tiny-t5)
  if [[ "$device" != cuda ]]; then
    # The f32 CPU stands in for the GPU: the bf16 pair then compares the bf16 plan with f32.
    gpu=cpu
    gpu_label=cpu
    drop=()
    models=(tiny-gpt tiny-t5)
    note "--check: 'cpu' stands in for cuda, so the bf16 pair compares the CPU's bf16 plan" \
      "with f32 and the f32 pair compares train.precision=float32 with the default;" \
      "tiny-gpt and tiny-t5 (the parallel step runs tiny-llama)"
  fi
  for m in "${models[@]}"; do
    d="$step_dir/$m"
    mkdir -p "$d"
    # tiny-t5 trains with dropout, as T5 fine-tuning does: the CUDA kernel draws the CPU's masks
    # (docs/t5.md "Dropout"), so the curves stay within each plan's bound.
    local extra=()
    [[ "$m" == tiny-t5 ]] && extra=(--set model.dropout=0.1)
    # bf16: the GPU's dtype plan against the CPU running the same plan (docs/precision.md: 1 %
    # per step is the bound of that plan against f32, measured 0.45 % at most over 200 steps).
    train "$d/gpu-bf16" "$gpu" "$n" "$m" "$(cap 120)" "${extra[@]}"
    local rc_gpu=$train_rc
    train "$d/cpu-bf16" cpu-bf16 "$n" "$m" "$(cap 120)" "${extra[@]}"
    next_check
    helper curve "$m bf16: $gpu_label vs cpu-bf16" --steps "$n" --tol 1e-2 "${drop[@]}" \
      --a "$d/gpu-bf16/metrics.jsonl" --label-a "$gpu_label" --log-a "$d/gpu-bf16.log" \
      --rc-a "$rc_gpu" --device-a "$gpu" \
      --b "$d/cpu-bf16/metrics.jsonl" --label-b cpu-bf16 --log-b "$d/cpu-bf16.log" \
      --rc-b "$train_rc" --device-b cpu-bf16 --write "$check_path"
    # f32: train.precision=float32 on the GPU (f32 kernels, no TF32) against the f32 CPU. Bound
    # 1e-4 per step, the parity test's f32 tolerance per op: two f32 CPU GEMM kernels that sum
    # in different orders (OpenBLAS, AX_CPU_GEMM=builtin) differ by at most 9e-8 over these 50
    # steps, so 1e-4 leaves the GPU's other summation orders and expf three decades.
    train "$d/gpu-f32" "$gpu" "$n" "$m" "$(cap 120)" --set train.precision=float32 "${extra[@]}"
    rc_gpu=$train_rc
    train "$d/cpu-f32" cpu "$n" "$m" "$(cap 120)" "${extra[@]}"
    next_check
    helper curve "$m f32: $gpu_label (train.precision=float32) vs cpu" --steps "$n" --tol 1e-4 \
      "${drop[@]}" --a "$d/gpu-f32/metrics.jsonl" --label-a "$gpu_label" \
      --log-a "$d/gpu-f32.log" --rc-a "$rc_gpu" --device-a "$gpu" \
      --b "$d/cpu-f32/metrics.jsonl" --label-b cpu --log-b "$d/cpu-f32.log" --rc-b "$train_rc" \
      --device-b cpu --write "$check_path"
  done
  step_end
}

# PID and its descendants (parents first), from /proc's parent links: the ranks ax-launch starts
# run in process groups of their own.
tree_pids() {  # PID
  local -A kids=()
  local f line rest pid ppid queue=("$1")
  for f in /proc/[0-9]*/stat; do
    { read -r line <"$f"; } 2>/dev/null || continue  # a process that ended meanwhile
    pid="${line%% *}"
    rest="${line##*) }"  # after the command name, which may hold spaces
    read -r _ ppid _ <<<"$rest"
    [[ "$ppid" =~ ^[0-9]+$ ]] && kids[$ppid]+=" $pid"
  done
  while ((${#queue[@]})); do
    pid="${queue[0]}"
    queue=("${queue[@]:1}")
    echo "$pid"
    # shellcheck disable=SC2206  # the children's ids are words
    queue+=(${kids[$pid]:-})
  done
}

# What every process of the tree under PID is doing, into FILE: first one line, a word per process
# (name[pid] state, threads, the main thread's wait channel); then per process its command line,
# signal masks (/proc/PID/status) and descriptors, per thread (/proc/PID/task/TID) its name, state,
# wait channel, system call and kernel stack where readable; then (unless a third argument says
# no-gdb) gdb's backtraces of every thread where gdb is installed. Sets hang_summary to the first
# line.
hang_evidence() {  # PID FILE [no-gdb]
  # A subshell without errexit: a process or thread that ends meanwhile fails a read, and that
  # must not end gpu-check.sh.
  (
    set +e
    local pid t f state summary=() pids
    mapfile -t pids < <(tree_pids "$1")
    for pid in "${pids[@]}"; do
      { read -r f <"/proc/$pid/stat"; } 2>/dev/null || continue
      state="${f##*) }"
      summary+=("$(cat "/proc/$pid/comm" 2>/dev/null)[$pid] ${state%% *}, $(sed -n \
        's/^Threads:[[:space:]]*//p' "/proc/$pid/status" 2>/dev/null) thread(s), main in $(cat \
        "/proc/$pid/wchan" 2>/dev/null || echo '?')")
    done
    f="$(printf '%s; ' "${summary[@]}")"
    echo "${f%; }"
    for pid in "${pids[@]}"; do
      [[ -d "/proc/$pid" ]] || continue
      echo
      echo "== process $pid: $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-400)"
      grep -E '^(Name|State|PPid|Threads|SigQ|SigPnd|ShdPnd|SigBlk|SigIgn|SigCgt):' \
        "/proc/$pid/status"
      find "/proc/$pid/fd" -mindepth 1 -maxdepth 1 -printf '  fd %f -> %l\n'
      for t in /proc/"$pid"/task/*; do
        [[ -d "$t" ]] || continue
        { read -r f <"$t/stat"; } 2>/dev/null || f="? (?) ?"
        state="${f##*) }"
        echo "-- thread ${t##*/} '$(cat "$t/comm")' state ${state%% *}, wchan $(cat "$t/wchan")," \
          "syscall $(cat "$t/syscall")"
        grep -E '^(SigPnd|SigBlk):' "$t/status" | sed 's/^/   /'
        sed 's/^/   /' "$t/stack"
      done
    done
    if [[ "${3:-}" == no-gdb ]]; then
      :
    elif command -v gdb >/dev/null; then
      for pid in "${pids[@]}"; do
        [[ -d "/proc/$pid" ]] || continue
        echo
        echo "== gdb -p $pid: thread apply all bt"
        if [[ "$(sed -n 's/^State:[[:space:]]*//p' "/proc/$pid/status")" == Z* ]]; then
          echo "(a zombie: it has exited, its parent has not reaped it)"
          continue
        fi
        timeout -k 5 20 gdb -batch -nx -iex "set debuginfod enabled off" -p "$pid" \
          -ex "info threads" -ex "thread apply all bt" </dev/null 2>&1 |
          grep -v '^\[New LWP\|^Reading symbols\|^Downloading'
      done
    else
      echo
      echo "gdb: not installed here"
    fi
  ) >"$2" 2>&1
  hang_summary="$(head -1 "$2")"
}

# watched SECONDS NAME CMD...: runs CMD (the caller's redirections apply) for at most SECONDS;
# once CMD has a child (a launcher has started its ranks), NAME.threads.txt gets its tree's
# processes and threads (hang_evidence without gdb: the launcher's threads and the signals they
# block, hang or not); past SECONDS, first writes
# what every process of its tree is doing into NAME.hang.txt (hang_evidence), then stops CMD as
# `timeout -k 20` would (SIGTERM, SIGKILL 20 s later, to what is left of the tree too) and
# prints a last line naming the file. watched_rc: CMD's exit status, 124 when it ran out of time.
watched() {
  local t="$1" name="$2" pid deadline pids p snapshot=1
  shift 2
  "$@" &
  pid=$!
  deadline=$((SECONDS + t))
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do
    if ((snapshot)) && (($(tree_pids "$pid" | wc -l) > 1)); then
      sleep 0.5  # the ranks' first threads
      hang_evidence "$pid" "$name.threads.txt" no-gdb
      snapshot=0
    fi
    sleep 0.2
  done
  if ! kill -0 "$pid" 2>/dev/null; then
    watched_rc=0
    wait "$pid" || watched_rc=$?
    return
  fi
  mapfile -t pids < <(tree_pids "$pid")
  local -A comms=()
  for p in "${pids[@]}"; do comms[$p]="$(cat "/proc/$p/comm" 2>/dev/null)"; done
  hang_evidence "$pid" "$name.hang.txt"
  kill -TERM "$pid" 2>/dev/null || true
  deadline=$((SECONDS + 20))
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
  for p in "${pids[@]}"; do  # still the same process: its name unchanged
    [[ -n "${comms[$p]}" && "$(cat "/proc/$p/comm" 2>/dev/null)" == "${comms[$p]}" ]] &&
      kill -KILL "$p" 2>/dev/null
  done
  wait "$pid" 2>/dev/null || true
  # Last, after what the processes printed on the way out: the line a check quotes.
  echo "gpu-check: no exit after $t s; then SIGTERM: what every thread was doing is in" \
    "$(basename "$name").hang.txt beside this log ($hang_summary)"
  watched_rc=124
}

# launch DIR NPROC ICI SECONDS MODEL [ax-train args...]: ax-launch NPROC ranks of ax-train on
# the mesh ici=ICI, the output in DIR.log, rank r's in DIR.launch/logs/rank_r.log; its status in
# launch_rc (124: no exit after SECONDS; then DIR.hang.txt holds what each thread was doing, and
# DIR.log's last line names it).
launch() {
  local dir="$1" nproc="$2" ici="$3" t="$4" model="$5" train_cmd
  shift 5
  axbin ax-train
  train_cmd=("${ax_cmd[@]:2}")  # without env: the ranks inherit ax-launch's library path
  axbin ax-launch
  watched "$t" "$dir" "${ax_cmd[@]}" --nproc "$nproc" --mesh "ici=$ici;dcn=1,1,1" \
    --run-dir "$dir.launch" -- "${train_cmd[@]}" --experiment "$model" "${data[@]}" \
    --run-dir "$dir" --set train.eval_every=0 --set train.checkpoint_every=0 \
    --set train.log_every=1 "$@" >"$dir.log" 2>&1
  launch_rc=$watched_rc
}

step_parallel() {
  step_begin parallel
  local n dev ref tol want steps=10 gb model d layouts l ici name nproc seen f t
  local models=(tiny-gpt tiny-llama)
  if [[ "$device" == cuda ]]; then
    n="$gpus" dev=auto ref=cuda tol=1e-3 want=cuda
  else
    n=2 dev=cpu-bf16 ref=cpu-bf16 tol=2e-4 want=cpu-bf16 steps=5 models=(tiny-llama)
    note "--check: 2 CPU ranks over Gloo in the bf16 plan (cpu-bf16) stand in for GPUs over" \
      "NCCL; tiny-llama only (the curves step runs tiny-gpt)"
  fi
  # bf16 bound: the sharded suite's 2e-4 for cpu-bf16 layouts (measured 2.3e-5), times 5 on GPUs:
  # NCCL rounds a bf16 sum at every hop of its ring, and the embedding gradient's atomics add in
  # a different order on every run.
  if ((n <= 1)); then
    layouts=("1,1,1")
    note "one GPU answered: the layout is world 1 (ax-launch --nproc 1). ax-train builds no" \
      "communicator at world 1, so this checks the launcher -> ax-train -> CUDA path, not" \
      "NCCL, FSDP or tensor parallelism; nccl_communicator_test's one-rank cases (tests step)" \
      "are the NCCL checks a single GPU allows. FSDP and tensor parallelism over NCCL wait" \
      "for a machine with two or more GPUs."
  else
    layouts=("1,$n,1" "1,$n,1 no-prefetch")
    ((n % 2)) || layouts+=("1,$((n / 2)),2")
  fi
  gb=$((4 * (n < 2 ? 2 : n)))
  for model in "${models[@]}"; do
    d="$step_dir/$model"
    mkdir -p "$d"
    local o=(--set "train.global_batch=$gb" --set train.comm_timeout_s=60)
    [[ "$model" == tiny-llama ]] && o+=(--set model.num_heads=8 --set model.num_kv_heads=4)
    train "$d/one" "$ref" "$steps" "$model" "$(cap 90)" "${o[@]}"
    local rc_one=$train_rc
    for l in "${layouts[@]}"; do
      ici="${l%% *}"
      IFS=, read -r _ f t <<<"$ici"
      nproc=$((f * t))
      name="fsdp${f}_tensor${t}"
      local extra=()
      if [[ "$l" == *no-prefetch ]]; then
        name+="_no_prefetch"
        extra=(--set train.fsdp_prefetch=false)
      fi
      launch "$d/$name" "$nproc" "$ici" "$(cap 120)" "$model" --device "$dev" \
        --max-steps "$steps" "${o[@]}" "${extra[@]}"
      # Rank 0 prints the device and the mesh; the others print nothing. NCCL refuses two ranks
      # on one GPU, and a rank on another kind of device could not join rank 0's collectives.
      next_check
      helper curve "$model $name, $nproc rank(s), against one process" --steps "$steps" \
        --tol "$tol" --a "$d/$name/metrics.jsonl" --label-a "$name" --log-a "$d/$name.log" \
        --rc-a "$launch_rc" --device-a "$want" --b "$d/one/metrics.jsonl" \
        --label-b "one process" --log-b "$d/one.log" --rc-b "$rc_one" --device-b "$ref" \
        --write "$check_path"
      seen="$(sed -n 's/^\[r0\] \(job: .*\)/\1/p' "$d/$name.log" | head -1)"
      note "$model $name: ${seen:-rank 0 printed no job line (world 1 prints none)}"
    done
  done
  step_end
}

step_bench() {
  step_begin bench
  local rc=0
  # T5 (issue 15): --bench-models t5-small,t5-base,t5-large, a call of its own (ax, eager and
  # torch.compile of the three fill the 10 minutes as Pile126M and fuji-1B-v2 do); the report's
  # T5 section (scripts/gpu_check.py) states T5x's published figures beside its rows.
  if [[ "$device" == cuda ]]; then
    bash "$root/bench/gpu_bench.sh" --bench "$bundle/bin/ax-train-bench" \
      --models "$bench_models" --out "$step_dir/bench" --budget "$(cap 570)" --python "$python" \
      >"$step_dir/bench.log" 2>&1 || rc=$?
  else
    note "--check: bench/gpu_bench.sh --check on tiny-gpt and tiny-t5 (CPU; parameter counts" \
      "of t5-small only); the GPU run measures $bench_models"
    bash "$root/bench/gpu_bench.sh" --check --count-models t5-small --models tiny-gpt,tiny-t5 \
      --bench "$bundle/bin/ax-train-bench" --out "$step_dir/bench" --python "$python" \
      >"$step_dir/bench.log" 2>&1 || rc=$?
  fi
  local f
  for f in "$step_dir"/bench/*.{ax,ax-cuda-cores,eager,compile}.json; do
    [[ -e "$f" ]] || continue
    next_check
    helper bench-run "$f" --write "$check_path"
  done
  if ((rc != 0)); then
    record "gpu_bench.sh" failed "exit $rc: $(grep -v '^\s*$' "$step_dir/bench.log" | tail -1)"
  fi
  step_end
}

run_steps() {  # STEP...
  local s
  for s in "$@"; do
    case "$s" in
      tests | sanitize | curves | parallel | bench) ;;
      *) die "unknown step '$s' (tests, sanitize, curves, parallel, bench)" ;;
    esac
  done
  [[ -f "$bundle/MANIFEST.json" ]] || die "no bundle in $bundle (scripts/gpu-check.sh bundle)"
  mkdir -p "$results"
  data=(--data "$bundle/data/shards/train" --tokenizer "$bundle/data/spm.model")
  t5_data=(--data "$bundle/data/t5/shards/train" --tokenizer "$bundle/data/t5/spm.model")
  work="$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")"
  run_start=$SECONDS
  step_env
  if [[ "$device" == cuda ]] && ((gpus == 0)); then
    echo "gpu-check.sh: no GPU answered (see $results/env.tgz); without one: --check" >&2
    exit 3
  fi
  for s in "$@"; do
    if (($(left) < 30)); then
      step_begin "$s"
      record "$s" incomplete "not run: the ${budget} s budget of this call is spent"
      step_end
    else
      "step_$s"
    fi
  done
  log "results in $results: $(find "$results" -maxdepth 1 -name '*.tgz' -printf '%f ')"
}

do_run() {
  ((${#args[@]})) || die "run: name the steps (tests sanitize curves parallel bench)"
  results="${out:-${OUT:+$OUT/gpu-check}}"
  results="${results:-$PWD/gpu-check-results}"
  trap 'rm -rf "${work:-}"' EXIT  # every step's logs are in its STEP.tgz
  run_steps "${args[@]}"
  exit "$overall"
}

do_report() {
  ((${#args[@]})) || die "report: give the directories (or .tgz files) the device calls returned"
  if [[ -n "$report_output" ]]; then
    helper report "${args[@]}" --output "$report_output"
  else
    helper report "${args[@]}" --into "$report_into"
  fi
}

# ---- --check: every part on the CPU --------------------------------------------------------------

check_tmp=""
do_check() {
  check_tmp="$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-check.XXXXXX")"
  trap 'rm -rf "$check_tmp" "${work:-}"' EXIT
  local tmp="$check_tmp"
  device=cpu
  curve_steps=5
  bundle="$tmp/bundle"
  results="${out:-$tmp/results}"
  log "--check: the bundle from $cpu_build (gpu tests from $cuda_build) into $bundle"
  make_bundle "$cpu_build" "$cuda_build" "$root/build/gpu-check-corpus"
  run_steps tests sanitize curves parallel bench
  helper report "$results" --output "$results/report.md"
  helper validate "$results/report.md"
  if ((overall != 0)); then
    echo "gpu-check --check: FAILED (a step above failed or did not finish)" >&2
    exit 1
  fi
  log "gpu-check --check: passed in $((SECONDS - start)) s"
}

case "$mode" in
  bundle) do_bundle ;;
  run) do_run ;;
  report) do_report ;;
  check) do_check ;;
esac
