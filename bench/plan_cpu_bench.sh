#!/usr/bin/env bash
# The cost model of `ax-train plan` against measured steps on this CPU (docs/plan.md "Against CPU
# steps"): for bench-a, bench-b and bench-t5-a on 1, 2 and 4 data-parallel CPU ranks, the real
# trainer (ax-launch + ax-train --device cpu, f32) runs STEPS steps and its median step time
# (metrics.jsonl, the first two steps left out) is set beside `ax-train plan --cpu RATES` for the
# same layout, with RATES measured here:
#   gemm       ax-ops-bench's four matmul lines (bench-a's shapes, forward and backward), their
#              mean GFLOP/s. Not ax-train's start-up figure ("MFU x% of N GFLOP/s"): that is the
#              best single call of a 1536 x 1536 x 768 sgemm summed over the ranks, which with
#              ranks sharing cores is neither one rank's nor sustained.
#   attention  ax-ops-bench's "attention fwd+bwd" line (bench-a's attention shape), GFLOP/s
#   memory     ax-ops-bench's "layernorm fwd+bwd N2048 C256": 20 bytes per element (fwd reads x,
#              writes y; bwd reads x and dy, writes dx) over its time, GB/s
#   link       ax-shard-bench's data=2 row: the gradient all-reduce's bytes over the time rank 0
#              spent in collectives (Gloo over loopback TCP), GB/s; latency 0 (it is in there)
# With N ranks of T threads on C cores, each per-rank rate is the T-thread one x min(1, C / (N T))
# (ranks share the cores).
# Not a timed test: it prints a table and the load (uptime) before and after.
#   bench/plan_cpu_bench.sh [BUILD_DIR (build/cpu)] [STEPS (8)]
set -uo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "${1:-$repo/build/cpu}" && pwd)"
steps="${2:-8}"
source "$repo/bench/lib.sh"
bench_need "$build" trainer/ax-train launcher/ax-launch datasets/ax-data bench/ax-ops-bench \
  bench/ax-shard-bench
axt="$build/trainer/ax-train" axl="$build/launcher/ax-launch" axd="$build/datasets/ax-data"
ops="$build/bench/ax-ops-bench" shard="$build/bench/ax-shard-bench"
work="$(mktemp -d /tmp/ax-plan-cpu-bench.XXXXXX)"
trap 'rm -rf "$work"' EXIT
cores="$(nproc)"
echo "load before: $(uptime)"

# Data: the docs as text, a tokenizer with T5's sentinels (bench-t5-a needs them; the GPTs ignore
# them), one shard set.
cat "$repo"/docs/*.md "$repo"/README.md >"$work/text.txt"
if ! "$axd" train-tokenizer --input "$work/text.txt" --vocab-size 2000 --extra-ids 100 \
  --output "$work/spm.model" >"$work/data.log" 2>&1 ||
  ! "$axd" tokenize --tokenizer "$work/spm.model" --input "$work/text.txt" \
    --output "$work/shards" --threads 1 >>"$work/data.log" 2>&1; then
  tail -n 20 "$work/data.log" >&2
  exit 1
fi

# rates THREADS: "gemm attention memory" (GFLOP/s, GFLOP/s, GB/s) of one rank of THREADS threads,
# alone.
rates() {
  "$ops" "$1" 5 >"$work/ops-$1.txt" 2>&1 || {
    cat "$work/ops-$1.txt" >&2
    exit 1
  }
  awk '/^matmul_/ { g += $(NF-1); n++ }
       /^attention fwd\+bwd/ { a = $(NF-1) }
       /^layernorm fwd\+bwd N2048 C256/ { m = 20 * 2048 * 256 / ($(NF-2) * 1e-3) / 1e9 }
       END { printf "%.3f %s %.3f\n", g / n, a, m }' "$work/ops-$1.txt"
}
# The link: ax-shard-bench's data=2 row (MB/step over comm % of the step).
"$shard" --steps 6 >"$work/shard.txt" 2>&1 || {
  cat "$work/shard.txt" >&2
  exit 1
}
link="$(awk '/^data=2 fsdp=1 tp=1 / { gsub("%", "", $7); printf "%.3f", $8 * 1e6 / ($4 * 1e-3 * $7 / 100) / 1e9 }' \
  "$work/shard.txt")"
[[ -n "$link" ]] || {
  cat "$work/shard.txt" >&2
  exit 1
}

printf '%-11s %5s %8s %9s %8s %8s %12s %12s %7s\n' config ranks threads "GEMM GF/s" "attn GF/s" \
  "mem GB/s" "measured ms" "predicted ms" ratio
breakdown=""
declare -A measured_rates # by thread count: ax-ops-bench once per count
for cfg in bench-a bench-b bench-t5-a; do
  for n in 1 2 4; do
    threads=$((cores / n > 0 ? cores / n : 1))
    [[ -n "${measured_rates[$threads]-}" ]] || measured_rates[$threads]="$(rates "$threads")"
    read -r gemm attn mem <<<"${measured_rates[$threads]}"
    share="$(awk -v c="$cores" -v n="$n" -v t="$threads" 'BEGIN { s = c / (n * t); print (s < 1 ? s : 1) }')"
    gemm="$(awk -v a="$gemm" -v s="$share" 'BEGIN { printf "%.3f", a * s }')"
    attn="$(awk -v a="$attn" -v s="$share" 'BEGIN { printf "%.3f", a * s }')"
    mem="$(awk -v a="$mem" -v s="$share" 'BEGIN { printf "%.3f", a * s }')"
    run="$work/run-$cfg-$n"
    AX_CPU_THREADS="$threads" "$axl" --nproc "$n" --mesh "ici=$n,1,1;dcn=1,1,1" \
      --run-dir "$run/launch" -- "$axt" --experiment "$cfg" --data "$work/shards" \
      --tokenizer "$work/spm.model" --run-dir "$run" --device cpu --max-steps "$steps" \
      --set train.precision=float32 --set train.log_every=1 --set train.checkpoint_every=0 \
      --set train.eval_every=0 >"$run.log" 2>&1 || {
      echo "$cfg on $n ranks failed:" >&2
      tail -n 20 "$run.log" >&2
      exit 1
    }
    measured="$(sed -n 's/.*"step_time_s": *\([0-9.e+-]*\).*/\1/p' "$run/metrics.jsonl" |
      tail -n +3 | awk '{ print $1 * 1000 }' | sort -g | awk '{ v[NR] = $1 } END { printf "%.1f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')"
    [[ -n "$measured" ]] || {
      echo "$cfg on $n ranks: no step time in its metrics.jsonl" >&2
      tail -n 5 "$run.log" >&2
      exit 1
    }
    plan="$("$axt" plan --experiment "$cfg" --set train.precision=float32 \
      --set NUM_MICROBATCHES=1 --set train.recompute=none --tokenizer "$work/spm.model" \
      --nodes 1 --gpus-per-node "$n" --ici "$n,1,1" --dcn 1,1,1 \
      --cpu "gemm=$gemm,attention=$attn,memory=$mem,link=$link,latency=0" 2>&1)"
    best="$(grep '^best: ' <<<"$plan")"
    breakdown+="$cfg x $n: ${best#*, step }"$'\n'
    predicted="$(grep -o ', step [0-9.]* s (' <<<"$best" | awk '{ printf "%.1f", $3 * 1000 }')"
    [[ -n "$predicted" ]] || {
      echo "$cfg on $n ranks: the plan said: $plan" >&2
      exit 1
    }
    printf '%-11s %5d %8d %9s %8s %8s %12s %12s %7.2f\n' "$cfg" "$n" "$threads" "$gemm" "$attn" \
      "$mem" "$measured" "$predicted" "$(awk -v p="$predicted" -v m="$measured" 'BEGIN { print p / m }')"
  done
done
echo "link (Gloo, loopback): $link GB/s; cores: $cores; the plan's parts of each step (s):"
printf '%s' "$breakdown"
echo "load after: $(uptime)"
