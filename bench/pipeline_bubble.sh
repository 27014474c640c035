#!/usr/bin/env bash
# The measured pipeline bubble against the schedules' own figure (docs/benchmarks-sharding.md
# "Pipeline bubble"): two pipeline stages on two ranks of one thread each (ax-launch on this
# machine, Gloo over loopback), for gpipe, 1f1b and interleaved (2 chunks per stage) over 2, 4
# and 8 micro-batches, run STEPS steps each; the measured bubble is the median over the steps
# after the first two of metrics.jsonl's pipeline_wait (the part of the schedule the stages spent
# in transfers, mean of the two stages), set beside (p - 1) / (m + p - 1) for gpipe and 1f1b and
# (p - 1) / (v m + p - 1) for interleaved (pipeline_bubble in pipeline_schedule.h). The model is
# bench-a with 8 layers and a 512-piece vocabulary, so that the head adds little to the last stage
# (a stage is 4 layers; the head is a sixth of one). Not a timed test: it prints a table and the
# load before and after; 2 free cores make it meaningful.
#   bench/pipeline_bubble.sh [BUILD_DIR (build/cpu)] [STEPS (10)]
set -uo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "${1:-$repo/build/cpu}" && pwd)"
steps="${2:-10}"
source "$repo/bench/lib.sh"
bench_need "$build" trainer/ax-train launcher/ax-launch datasets/ax-data
axt="$build/trainer/ax-train" axl="$build/launcher/ax-launch" axd="$build/datasets/ax-data"
work="$(mktemp -d /tmp/ax-pipeline-bubble.XXXXXX)"
trap 'rm -rf "$work"' EXIT
echo "load before: $(uptime)"

cat "$repo"/docs/*.md "$repo"/README.md >"$work/text.txt"
if ! "$axd" train-tokenizer --input "$work/text.txt" --vocab-size 512 --output "$work/spm.model" \
  >"$work/data.log" 2>&1 ||
  ! "$axd" tokenize --tokenizer "$work/spm.model" --input "$work/text.txt" \
    --output "$work/shards" --threads 1 >>"$work/data.log" 2>&1; then
  tail -n 20 "$work/data.log" >&2
  exit 1
fi

printf '%-12s %4s %11s %11s %7s %9s\n' schedule m predicted measured ratio "step ms"
for schedule in gpipe 1f1b interleaved; do
  for m in 2 4 8; do
    v=1
    [[ "$schedule" == interleaved ]] && v=2
    run="$work/run-$schedule-$m"
    AX_CPU_THREADS=1 "$axl" --nproc 2 --mesh "ici=2,1,1,1,1;dcn=1,1,1,1,1" \
      --run-dir "$run/launch" -- "$axt" --experiment bench-a --data "$work/shards" \
      --tokenizer "$work/spm.model" --run-dir "$run" --device cpu --max-steps "$steps" \
      --set model.vocab_size=0 --set model.num_layers=8 --set train.precision=float32 \
      --set "NUM_MICROBATCHES=$m" --set "train.pipeline_schedule=$schedule" \
      --set "train.pipeline_virtual_stages=$v" --set train.log_every=1 \
      --set train.checkpoint_every=0 --set train.eval_every=0 >"$run.log" 2>&1 || {
      echo "$schedule over $m micro-batches failed:" >&2
      tail -n 20 "$run.log" >&2
      exit 1
    }
    median() {
      tail -n +3 | sort -g | awk '{ v[NR] = $1 } END { printf "%.4f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
    }
    measured="$(grep -o '"pipeline_wait": *[0-9.e+-]*' "$run/metrics.jsonl" | sed 's/.*: *//' |
      median)"
    step_ms="$(grep -o '"step_time_s": *[0-9.e+-]*' "$run/metrics.jsonl" | sed 's/.*: *//' |
      awk '{ print $1 * 1000 }' | median)"
    predicted="$(awk -v m="$m" -v v="$v" 'BEGIN { printf "%.4f", 1 / (v * m + 1) }')"
    printf '%-12s %4d %11s %11s %7.2f %9.1f\n' "$schedule" "$m" "$predicted" "$measured" \
      "$(awk -v a="$measured" -v b="$predicted" 'BEGIN { print a / b }')" "$step_ms"
  done
done
echo "load after: $(uptime)"
