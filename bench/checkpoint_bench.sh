#!/usr/bin/env bash
# Background checkpoints against synchronous ones (issue 27, docs/reliability.md "Background
# checkpoints"): the same ax-train run twice in this script, train.checkpoint_async=false and
# =true, and for each periodic checkpoint the time training stood still: the whole write in the
# synchronous run, what the loop waited for (host copy, temporary directory, commit, an unfinished
# write) in the background run. Prints both, their ratio (goal: <= 10 %) and each run's wall time.
#
#   bench/checkpoint_bench.sh BUILD_DIR [--experiment Pile126M] [--steps 12] [--every 4]
#                             [--seq-len 128] [--batch 2] [--device cpu] [--out DIR]
#                             [--data SHARDS --tokenizer MODEL] [--set KEY=VALUE ...]
#
# Without --data, `scripts/demo.sh BUILD OUT/data data` prepares the demo's KJV shards (needs
# ax-data). The model is the experiment's whole (Pile126M with the demo's 8,000-piece tokenizer:
# 93 M parameters; add --set model.vocab_size=50304 for its GPT-2-sized embedding, 125 M and a
# 1.5 GB checkpoint of parameters and AdamW state); --seq-len and --batch keep its steps short on
# a CPU. Each --set reaches both runs. Compared are the checkpoints followed by a whole interval of
# --every steps: the last step's checkpoint waits for its write (the run ends there), and one
# fewer than --every steps before the end is made to wait for its write by that last request.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${1:?usage: $0 BUILD_DIR [options] (see the header)}"
shift
experiment=Pile126M steps=12 every=4 seq_len=128 batch=2 device=cpu out="" data="" tok=""
sets=()
while (($# > 0)); do
  case "$1" in
    --experiment) experiment="${2:?}"; shift ;;
    --steps) steps="${2:?}"; shift ;;
    --every) every="${2:?}"; shift ;;
    --seq-len) seq_len="${2:?}"; shift ;;
    --batch) batch="${2:?}"; shift ;;
    --device) device="${2:?}"; shift ;;
    --out) out="${2:?}"; shift ;;
    --data) data="${2:?}"; shift ;;
    --tokenizer) tok="${2:?}"; shift ;;
    --set) sets+=(--set "${2:?}"); shift ;;
    *) echo "checkpoint_bench.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done
for v in "$steps" "$every" "$seq_len" "$batch"; do
  [[ "$v" =~ ^[1-9][0-9]*$ ]] || { echo "checkpoint_bench.sh: counts must be positive integers" >&2; exit 2; }
done
((steps > 2 * every)) || { echo "checkpoint_bench.sh: --steps must exceed 2 x --every" >&2; exit 2; }
train="$(cd "$BUILD" && pwd)/trainer/ax-train"
[[ -x "$train" ]] || { echo "checkpoint_bench.sh: $train is missing (build ax-train)" >&2; exit 1; }
out="${out:-$(mktemp -d /tmp/ax-checkpoint-bench.XXXXXX)}"
mkdir -p "$out"
if [[ -z "$data" ]]; then
  bash "$REPO/scripts/demo.sh" "$BUILD" "$out/data" data >"$out/data.log" 2>&1 ||
    { echo "checkpoint_bench.sh: scripts/demo.sh data failed: $(tail -1 "$out/data.log")" >&2; exit 1; }
  data="$out/data/shards/train" tok="$out/data/spm.model"
fi

run() {  # NAME ASYNC
  local dir="$out/$1" t0
  rm -rf "$dir"
  t0=$(date +%s.%N)
  "$train" --experiment "$experiment" --data "$data" --tokenizer "$tok" --run-dir "$dir" \
    --device "$device" --max-steps "$steps" --set "train.seq_len=$seq_len" \
    --set "train.global_batch=$batch" --set train.eval_every=0 --set "train.log_every=$every" \
    --set "train.checkpoint_every=$every" --set "train.keep_checkpoints=2" \
    --set "train.checkpoint_async=$2" "${sets[@]}" >"$dir.log" 2>&1 ||
    { echo "checkpoint_bench.sh: the $1 run failed: $(tail -2 "$dir.log")" >&2; exit 1; }
  echo "$(date +%s.%N) - $t0" | bc
}

echo "checkpoint_bench: $experiment on $device, seq_len $seq_len, batch $batch, $steps steps," \
  "a checkpoint every $every; logs and runs in $out"
wall_sync=$(run sync false)
wall_async=$(run async true)
# Synchronous: "checkpoint: step N -> DIR (X s)"; background: "... (written in W s in the
# background; training paused P s: host copy ..., start ..., wait ..., commit ...)".
mapfile -t sync_s < <(sed -n 's/^checkpoint: step \([0-9]*\) -> .* (\([0-9.]*\) s)$/\1 \2/p' "$out/sync.log")
mapfile -t async_s < <(sed -n 's/^checkpoint: step \([0-9]*\) -> .* (written in \([0-9.]*\) s in the background; training paused \([0-9.]*\) s: .*)$/\1 \2 \3/p' "$out/async.log")
size=$(du -sh "$out/sync/checkpoints/step_$(printf %08d "$steps")" | cut -f1)
echo
echo "| step | synchronous write (s) | background: written in (s) | background: training paused (s) | paused / synchronous |"
echo "|---|---|---|---|---|"
worst=0 n=0
for line in "${sync_s[@]}"; do
  read -r step s <<<"$line"
  ((step + every <= steps)) || continue  # followed by a whole interval (see the header)
  for a in "${async_s[@]}"; do
    read -r astep w p <<<"$a"
    [[ "$astep" == "$step" ]] || continue
    ratio=$(echo "scale=4; $p / $s" | bc)
    printf '| %s | %s | %s | %s | %.1f %% |\n' "$step" "$s" "$w" "$p" "$(echo "$ratio * 100" | bc)"
    worst=$(echo "if ($ratio > $worst) $ratio else $worst" | bc)
    n=$((n + 1))
  done
done
((n > 0)) || { echo "checkpoint_bench.sh: no checkpoint lines to compare (see $out/*.log)" >&2; exit 1; }
printf '\ncheckpoint size %s; the worst pause is %.1f %% of the synchronous write (goal <= 10 %%);' \
  "$size" "$(echo "$worst * 100" | bc)"
printf ' whole runs: synchronous %.1f s, background %.1f s\n' "$wall_sync" "$wall_async"
