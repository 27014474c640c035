#!/usr/bin/env bash
# The GPU benchmark of issue 6: tokens/s, step time, peak memory and MFU of ax against plain
# PyTorch (eager and torch.compile) on the same GPU in one run, each at the largest batch that
# fits, for Pile126M (seq 2048) and fuji-1B-v2 (seq 4096), and (issue 15) sequences/s of
# t5-small, t5-base and t5-large (ENC_SL 512, DEC_SL 128, span-corruption-shaped rows) with
# --models t5-small,t5-base,t5-large. Method: docs/notes/cuda-perf.md ("How to run the
# benchmark"); the table's place: docs/benchmarks-gpu.md.
#
#   bench/gpu_bench.sh --bench BUNDLE/bin/ax-train-bench          on the GPU machine
#   bench/gpu_bench.sh --check --bench build/h8/bench/ax-train-bench    here, without a GPU
#   bench/gpu_bench.sh --bundle build/gpu-bench --bench /tmp/cudab/bench/ax-train-bench
#
# ax's side is `ax-train-bench --worker` (ax-train's step on random tokens, no data loader, no
# checkpoint), one process per batch size tried: status 4 (or "out of memory") = does not fit;
# then again at that batch with AX_CUDA_ATTENTION=cuda-cores (side ax-cuda-cores, last for each
# model). PyTorch's side is bench/torch_gpu_peer.py, which tries its batch sizes in one process.
# First of all, ax-attention-bench (beside ax-train-bench) times the attention op alone against
# PyTorch's SDPA (attention.md; at most 90 s).
# Exit status: 0 done (the table says which runs failed), 1 --check found a difference,
# 2 bad command line, 3 no GPU answered.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
peer="$here/torch_gpu_peer.py"
bench=""
models="Pile126M,fuji-1B-v2"
attention_shapes="pile126m,fuji-1b,llama-hd128,t5-encoder,t5-decoder"  # ax-attention-bench
models_given=""  # --models was given: --check runs its pipeline on those
# --check's parameter counts
count_models="Pile126M,fuji-1B-v1,fuji-1B-v2,fuji-1B-v3,t5-small,t5-base,t5-large"
sides="ax,ax-cuda-cores,eager,compile"
device="cuda"
out=""
python="${PYTHON:-python3}"
budget=570      # seconds for the whole run: the device machine gives a command 10 minutes
warmup=3        # untimed steps (compilation and cuBLASLt's plan cache happen here)
steps=10        # timed steps at most ...
max_seconds=20  # ... and at most this long (at least 3 steps)
batches=""      # override the batch sizes tried (largest first)
mode="run"
bundle=""

usage() {
  sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  cat <<EOF

options:
  --bench PATH        ax-train-bench from a CUDA build (or a --bundle directory's bin/)
  --models LIST       experiments, comma-separated (default $models; also t5-small,
                      t5-base, t5-large, and the tiny-gpt, tiny-llama, tiny-t5 of --check)
  --sides LIST        ax,ax-cuda-cores,eager,compile (default all; ax-cuda-cores is ax
                      again at ax's batch with AX_CUDA_ATTENTION=cuda-cores: what the
                      tensor-core attention kernels gain)
  --out DIR           results (default \$OUT/gpu-bench when \$OUT is set, else ./gpu-bench-results)
  --python PATH       the Python with PyTorch (default \$PYTHON or python3)
  --budget S          seconds for everything (default $budget); later runs are skipped past it
  --warmup N          untimed steps (default $warmup)
  --steps N           timed steps at most (default $steps)
  --max-seconds S     stop timing a run after S seconds, at least 3 steps (default $max_seconds)
  --batches LIST      batch sizes to try, largest first (default per model)
  --device cuda|cpu   cpu runs the same pipeline without a GPU (what --check uses)
  --check             without a GPU: parameter counts and FLOPs per token of ax and the
                      peer for Pile126M, fuji-1B and T5 (small, base, large; with the real
                      targets a row), then the whole pipeline on CPU for tiny-gpt,
                      tiny-llama and tiny-t5 (--models and --sides choose others; the
                      pipeline has a 300 s budget of its own)
  --count-models LIST the models --check counts (default $count_models; none: no counts)
  --bundle DIR        copy --bench and the shared libraries it needs (but the CUDA toolkit's
                      and the driver's) into DIR/bin and DIR/lib, to carry to a GPU machine
EOF
}

die() {
  echo "gpu_bench.sh: $*" >&2
  exit 2
}

while (($#)); do
  case "$1" in
    --bench) bench="${2:?--bench needs a path}"; shift 2 ;;
    --models) models="${2:?}"; models_given=1; shift 2 ;;
    --count-models) count_models="${2:?}"; shift 2 ;;
    --sides) sides="${2:?}"; shift 2 ;;
    --out) out="${2:?}"; shift 2 ;;
    --python) python="${2:?}"; shift 2 ;;
    --budget) budget="${2:?}"; shift 2 ;;
    --warmup) warmup="${2:?}"; shift 2 ;;
    --steps) steps="${2:?}"; shift 2 ;;
    --max-seconds) max_seconds="${2:?}"; shift 2 ;;
    --batches) batches="${2:?}"; shift 2 ;;
    --device) device="${2:?}"; shift 2 ;;
    --check) mode="check"; shift ;;
    --bundle) mode="bundle"; bundle="${2:?--bundle needs a directory}"; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
for n in "$budget" "$warmup" "$steps" "$max_seconds"; do
  [[ "$n" =~ ^[0-9]+$ ]] || die "--budget, --warmup, --steps and --max-seconds take integers"
done
[[ "$device" == cuda || "$device" == cpu ]] || die "--device expects cuda or cpu"
[[ -n "$bench" ]] || die "--bench PATH/ax-train-bench is required (see --help)"
[[ -x "$bench" ]] || die "$bench is not an executable"

start=$SECONDS
log() { printf '[%4d s] %s\n' "$((SECONDS - start))" "$*"; }

# ---- --bundle: the binary and the libraries the GPU machine may lack ------------------------

# shellcheck source-path=SCRIPTDIR source=../scripts/lib/bundle.sh
source "$here/../scripts/lib/bundle.sh"

make_bundle() {
  # ax-attention-bench too when it was built beside ax-train-bench (run_attention looks there).
  local bins=("$bench") attn
  attn="$(dirname "$bench")/ax-attention-bench"
  [[ -x "$attn" ]] && bins+=("$attn")
  bundle_copy "$bundle" "${bins[@]}"
  ls -l "$bundle/bin" "$bundle/lib" "$bundle/lib/glibc"
  echo "bundle: $(du -sh "$bundle" | cut -f1) in $bundle; from the GPU machine it needs:" \
    "$(bundle_machine_libraries "${bins[@]}")"
}

# ---- running ax-train-bench on another machine ------------------------------------------------

ax_cmd=("$bench")
ax_libpath="${LD_LIBRARY_PATH:-}"  # ax's library path only: Python and nvidia-smi keep theirs
ax_problem=""                      # set: why ax's side cannot run here

# The bundle's lib/, the CUDA toolkit and PyTorch's nvidia-* wheels on ax's library path; the
# bundle's glibc loader when the machine's glibc is older than the binary's.
setup_ax_libraries() {
  bundle_find_libraries "$python" "$bench"
  ax_libpath="$bundle_libpath"
  ax_problem="$bundle_problem"
  ax_cmd=("${bundle_loader[@]}" "$bench")
  ((${#bundle_loader[@]} == 0)) ||
    log "this machine's glibc is older than the binary's: using the bundle's loader"
  log "ax: ${ax_cmd[*]}; library path ${ax_libpath:-(default)}"
}

# ---- device memory in use during a run (nvidia-smi) ---------------------------------------------

gpu_index="${CUDA_VISIBLE_DEVICES:-0}"
gpu_index="${gpu_index%%,*}"
sampler_pid=""
baseline_mib=0

gpu_used_mib() {
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i "$gpu_index" | head -1
}

mem_start() {  # $1: the file the samples go to
  [[ "$device" == cuda ]] || return 0
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i "$gpu_index" -lms 100 \
    >"$1" 2>/dev/null &
  sampler_pid=$!
}

mem_stop() {  # $1: the samples; prints the peak minus the idle baseline, in bytes
  [[ -n "$sampler_pid" ]] || { echo 0; return; }
  kill "$sampler_pid" 2>/dev/null || true
  wait "$sampler_pid" 2>/dev/null || true
  sampler_pid=""
  awk -v base="$baseline_mib" 'BEGIN {m = 0} $1 + 0 > m {m = $1 + 0}
    END {d = m - base; if (d < 0) d = 0; printf "%.0f\n", d * 1048576}' "$1"
}

# ---- one run ----------------------------------------------------------------------------------

# Seconds a run may take: its own cap, and what is left of the budget.
cap_for() {
  local left=$((budget - (SECONDS - start)))
  ((left < $1)) && echo "$left" || echo "$1"
}

write_error() {  # file, message
  "$python" -c 'import json, sys; print(json.dumps({"error": sys.argv[1]}))' "$2" >"$1"
}

json_field() {  # file, key: prints the value from the last JSON line, or nothing
  "$python" - "$1" "$2" <<'EOF' 2>/dev/null || true
import json, sys
lines = [l for l in open(sys.argv[1]).read().splitlines() if l.startswith("{")]
v = json.loads(lines[-1]).get(sys.argv[2]) if lines else None
print("" if v is None else v)
EOF
}

summary() {  # file: one line about a finished run
  "$python" - "$1" <<'EOF' 2>/dev/null || true
import json, statistics, sys
lines = [l for l in open(sys.argv[1]).read().splitlines() if l.startswith("{")]
r = json.loads(lines[-1]) if lines else {"error": "no result"}
if "error" in r:
    print("failed:", r["error"])
else:
    s = statistics.median(r["step_seconds"]) if r["step_seconds"] else float("nan")
    rows = f"{r['batch'] / s:,.1f} sequences/s, " if r.get("encoder_seq") else ""
    print(f"batch {r['batch']}: {1e3 * s:.0f} ms/step, {rows}{r['batch'] * r['seq'] / s:,.0f} "
          f"tokens/s, loss {r['losses'][0]:.3f} -> {r['losses'][-1]:.3f}")
EOF
}

default_batches() {
  if [[ -n "$batches" ]]; then echo "${batches//,/ }"; return; fi
  case "$1" in
    Pile126M) echo "256 128 64 32 16 8 4 2 1" ;;
    fuji-*) echo "64 32 16 8 4 2 1" ;;
    # T5x's batch per GPU: small 256 (A100), large 32 (A100 and H100); ax and eager may fit more.
    t5-small) echo "512 256 128 64 32 16" ;;
    t5-base) echo "256 128 64 32 16 8" ;;
    t5-large) echo "128 64 32 16 8 4" ;;
    *) echo "8 4" ;;
  esac
}

# One ax-train-bench worker run: ax_worker MODEL BATCH CAP PREFIX writes PREFIX.out and
# PREFIX.err and returns the worker's status (124: past CAP seconds).
ax_worker() {
  AX_LOG_LEVEL="${AX_LOG_LEVEL:-info}" LD_LIBRARY_PATH="$ax_libpath" timeout "$3" \
    "${ax_cmd[@]}" --worker "$1" --device "$device" --batch "$2" --warmup "$warmup" \
    --steps "$steps" --max-seconds "$max_seconds" --threads "$(nproc)" >"$4.out" 2>"$4.err"
}

run_ax() {  # model
  local m="$1" res="$results/$1.ax.json" b rc cap t0 mem
  if [[ -n "$ax_problem" ]]; then
    write_error "$res" "$ax_problem"
    log "$m ax: $ax_problem"
    return
  fi
  local tried=""
  for b in $(default_batches "$m"); do
    cap="$(cap_for 180)"
    if ((cap < 20)); then
      write_error "$res" \
        "skipped: the ${budget}s budget is (nearly) spent${tried:+ (did not fit: $tried)}"
      log "$m ax: skipped, out of time"
      return
    fi
    t0=$SECONDS
    mem_start "$results/$m.ax.mem"
    rc=0
    ax_worker "$m" "$b" "$cap" "$results/$m.ax.b$b" || rc=$?
    mem="$(mem_stop "$results/$m.ax.mem")"
    if ((rc == 0)); then
      # The device memory the run used, as nvidia-smi saw it, joins ax's JSON line.
      tail -1 "$results/$m.ax.b$b.out" | sed "s/}\$/,\"device_used_bytes\":$mem}/" >"$res"
      log "$m ax: $(summary "$res") ($((SECONDS - t0)) s)"
      return
    fi
    if ((rc == 4)) || grep -qi "out of memory" "$results/$m.ax.b$b.err"; then
      tried+="${tried:+, }$b"
      log "$m ax: batch $b does not fit ($((SECONDS - t0)) s)"
      continue
    fi
    local why
    why="$( ((rc == 124)) && echo "timed out after ${cap}s at batch $b" ||
      echo "batch $b: status $rc: $(grep -v '^\s*$' "$results/$m.ax.b$b.err" | tail -1)")"
    write_error "$res" "$why"
    log "$m ax: $why (log: $results/$m.ax.b$b.err)"
    tail -5 "$results/$m.ax.b$b.err" | sed 's/^/    /'
    return
  done
  write_error "$res" "no batch fits (did not fit: $tried)"
  log "$m ax: no batch fits"
}

# ax again at the batch ax ran, with the f32 CUDA-core attention kernels for every call
# (AX_CUDA_ATTENTION=cuda-cores): the table's "ax / this" of this row is what the tensor-core
# kernels gain, measured in the same call.
run_ax_cuda_cores() {  # model
  local m="$1" res="$results/$1.ax-cuda-cores.json" b cap t0 rc=0
  b="$(json_field "$results/$m.ax.json" batch)"
  if [[ -z "$b" ]]; then
    write_error "$res" "ax did not run"
    return
  fi
  cap="$(cap_for 180)"
  if ((cap < 20)); then
    write_error "$res" "skipped: the ${budget}s budget is (nearly) spent"
    log "$m ax-cuda-cores: skipped, out of time"
    return
  fi
  t0=$SECONDS
  AX_CUDA_ATTENTION=cuda-cores ax_worker "$m" "$b" "$cap" "$results/$m.ax-cuda-cores" || rc=$?
  if ((rc == 0)); then
    tail -1 "$results/$m.ax-cuda-cores.out" >"$res"
  else
    write_error "$res" "status $rc: $(grep -v '^\s*$' "$results/$m.ax-cuda-cores.err" | tail -1)"
  fi
  log "$m ax-cuda-cores: $(summary "$res") ($((SECONDS - t0)) s)"
}

# The attention op alone (bench/attention_bench.cc, beside ax-train-bench): ax's tensor-core and
# CUDA-core kernels and PyTorch's SDPA at the models' attention shapes, into attention.md; the
# report prints it under the table. On the CPU (--check) the smoke shape only; its failure there
# fails the check.
attention_status=0
run_attention() {
  local attn rc=0 cap shapes t0=$SECONDS
  attn="$(dirname "$bench")/ax-attention-bench"
  if [[ ! -x "$attn" ]]; then
    echo "ax-attention-bench is not beside $bench: not run" >"$results/attention.md"
    log "attention alone: not run (no ax-attention-bench beside ax-train-bench)"
    return
  fi
  shapes="$([[ "$device" == cuda ]] && echo "$attention_shapes" || echo tiny)"
  cap="$(cap_for 90)"
  # ax_cmd is the loader (when the bundle's glibc is needed) and ax-train-bench: the same loader.
  AX_LOG_LEVEL=warning LD_LIBRARY_PATH="$ax_libpath" timeout "$cap" \
    "${ax_cmd[@]:0:${#ax_cmd[@]}-1}" "$attn" --device "$device" --shapes "$shapes" --repeats 5 \
    --peer --python "$python" --peer-script "$here/torch_attention_peer.py" \
    >"$results/attention.md" 2>"$results/attention.err" || rc=$?
  if ((rc != 0)); then
    echo "ax-attention-bench: status $rc: $(grep -v '^\s*$' "$results/attention.err" | tail -1)" \
      >>"$results/attention.md"
    attention_status=1
  fi
  log "attention alone: $( ((rc == 0)) && echo "measured" || echo "status $rc") ($((SECONDS - t0)) s)"
}

run_torch() {  # model, eager|compile, batch sizes (space-separated)
  local m="$1" side="$2" list="$3" res="$results/$1.$2.json" cap t0 rc=0
  cap="$(cap_for "$([[ "$side" == compile ]] && echo 300 || echo 180)")"
  if ((cap < 30)); then
    write_error "$res" "skipped: the ${budget}s budget is (nearly) spent"
    log "$m $side: skipped, out of time"
    return
  fi
  t0=$SECONDS
  timeout "$cap" "$python" "$peer" run --model "$m" --mode "$side" --device "$device" \
    --batches "${list// /,}" --warmup "$warmup" --steps "$steps" --max-seconds "$max_seconds" \
    >"$res" 2>"$results/$m.$side.err" || rc=$?
  if ! grep -q '^{' "$res"; then
    local why
    why="status $rc: $(grep -v '^\s*$' "$results/$m.$side.err" | tail -1)"
    ((rc == 124)) && why="timed out after ${cap}s"
    write_error "$res" "$why"
    tail -5 "$results/$m.$side.err" | sed 's/^/    /'
  fi
  log "$m $side: $(summary "$res") ($((SECONDS - t0)) s)"
}

# torch.compile's batch sizes: compiled code usually needs less memory than eager, so it starts
# above eager's batch, at most at twice it (and at most at ax's, when that is larger); each size
# tried costs a compilation, so at most three.
compile_batches() {  # model
  local e a top="" list="" b n=0
  e="$(json_field "$results/$1.eager.json" batch)"
  a="$(json_field "$results/$1.ax.json" batch)"
  if [[ -n "$e" ]]; then
    top=$((2 * e))
    [[ -n "$a" ]] && ((a > e && a < top)) && top="$a"
    [[ -n "$a" ]] && ((a <= e)) && top="$e"
  elif [[ -n "$a" ]]; then
    top="$a"
  fi
  for b in $(default_batches "$1"); do
    [[ -n "$top" ]] && ((b > top)) && continue
    list+="${list:+ }$b"
    n=$((n + 1))
    ((n == 3)) && break
  done
  echo "$list"
}

run_all() {
  if [[ -z "$out" ]]; then
    out="${OUT:+$OUT/gpu-bench}"
    out="${out:-$PWD/gpu-bench-results}"
  fi
  results="$out"
  mkdir -p "$results"
  rm -f "$results"/*.{ax,ax-cuda-cores,eager,compile}.json "$results"/*.{err,out,mem} "$results"/device.json \
    "$results"/attention.md \
    "$results"/table.md
  if [[ "$device" == cuda ]]; then
    if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
      echo "gpu_bench.sh needs a GPU: nvidia-smi $(command -v nvidia-smi >/dev/null &&
        echo 'lists no GPU' || echo 'is not installed'). Without one: --check." >&2
      exit 3
    fi
    baseline_mib="$(gpu_used_mib)"
    local gpu
    gpu="$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader \
      -i "$gpu_index")"
    log "GPU $gpu_index: $gpu; $baseline_mib MiB in use before the runs"
    "$python" - "$results/device.json" "$gpu" <<'EOF'
import json, sys
name, memory, driver = [s.strip() for s in sys.argv[2].split(",")]
try:
    import torch
    t = f"PyTorch {torch.__version__} (CUDA {torch.version.cuda})"
except ImportError as e:
    t = f"no PyTorch ({e})"
json.dump({"gpu": f"{name}, {memory}", "driver": driver, "torch": t}, open(sys.argv[1], "w"))
EOF
    [[ ",$sides," == *,ax,* ]] && setup_ax_libraries
  fi
  log "results in $results; budget ${budget}s; $warmup warm-up + up to $steps timed steps" \
    "(at most ${max_seconds}s) per run"
  local m list
  [[ ",$sides," == *,ax,* ]] && run_attention
  for m in ${models//,/ }; do
    [[ ",$sides," == *,ax,* ]] && run_ax "$m"
    [[ ",$sides," == *,eager,* ]] && run_torch "$m" eager "$(default_batches "$m")"
    if [[ ",$sides," == *,compile,* ]]; then
      list="$(compile_batches "$m")"
      run_torch "$m" compile "${list:-$(default_batches "$m")}"
    fi
    # Last: the budget skips it before the peers when time runs short.
    [[ ",$sides," == *,ax-cuda-cores,* ]] && run_ax_cuda_cores "$m"
  done
  "$python" "$peer" report "$results" | tee "$results/table.md"
  log "done"
}

# ---- --check: everything that runs without a GPU ------------------------------------------------

check() {
  local status=0 m ax_json peer_json need_kb avail_kb
  echo "parameter counts and FLOPs per token, ax (ax-train-bench --count-params) against the peer:"
  [[ "$count_models" == none ]] && count_models=""
  for m in ${count_models//,/ }; do
    peer_json="$("$python" "$peer" count --model "$m")"
    # ax allocates f32 parameters and gradients for the count: 8 bytes per parameter.
    need_kb=$(( $("$python" -c 'import json, sys; print(json.loads(sys.argv[1])["params"])' \
      "$peer_json") * 8 / 1024 ))
    avail_kb="$(awk '/MemAvailable/ {print $2}' /proc/meminfo)"
    if ((need_kb * 3 / 2 > avail_kb)); then
      echo "  $m: skipped (ax's count allocates $((need_kb / 1048576)) GiB;" \
        "$((avail_kb / 1048576)) GiB available)"
      continue
    fi
    ax_json="$("$bench" --worker "$m" --count-params)"
    if "$python" - "$ax_json" "$peer_json" <<'EOF'; then
import json, sys
ax, peer = json.loads(sys.argv[1]), json.loads(sys.argv[2])
# T5: the encoder length and the real targets a row (span corruption) shape the batch too.
keys = ("params", "matmul_params", "flops_per_token", "encoder_seq", "targets_per_row")
keys = [k for k in keys if k in ax or k in peer]
print("  ", ", ".join(f"{k} ax {ax.get(k, 'none')} peer {peer.get(k, 'none')}" for k in keys))
# FLOPs are sums of products in doubles: equal up to rounding.
same = lambda k: (k in ax and k in peer and
                  (ax[k] == peer[k] if k != "flops_per_token" else
                   abs(ax[k] - peer[k]) <= 1e-12 * abs(peer[k])))
sys.exit(0 if all(same(k) for k in keys) else 1)
EOF
      echo "  $m: same"
    else
      echo "  $m: DIFFERENT"
      status=1
    fi
  done
  echo
  [[ -n "$models_given" ]] || models="tiny-gpt,tiny-llama,tiny-t5"
  echo "the pipeline on CPU ($models; torch.compile where this PyTorch has it):"
  device=cpu
  warmup=2
  steps=3
  budget=300
  start=$SECONDS  # the pipeline's budget is its own: the counts above can take minutes
  run_all
  local targets
  for m in ${models//,/ }; do
    targets=""
    for s in ax eager; do
      [[ ",$sides," == *,$s,* ]] || continue
      if [[ -n "$(json_field "$results/$m.$s.json" error)" ]]; then
        echo "check: $m $s failed: $(json_field "$results/$m.$s.json" error)"
        status=1
      fi
      # T5: both sides train rows with the same number of real targets.
      targets+="$(json_field "$results/$m.$s.json" targets_per_row) "
    done
    if (($(tr ' ' '\n' <<<"$targets" | sort -u | grep -c .) > 1)); then
      echo "check: $m: ax and the peer train rows of different real targets ($targets)"
      status=1
    fi
  done
  if ((attention_status != 0)); then
    echo "check: ax-attention-bench failed: $(tail -1 "$results/attention.md")"
    status=1
  fi
  exit "$status"
}

case "$mode" in
  bundle) make_bundle ;;
  check) check ;;
  run) run_all ;;
esac
