#!/usr/bin/env bash
# Host memory over a long run (issue 27, docs/reliability.md "Long runs"): ax-train for many steps
# with periodic checkpoints, evaluation and TensorBoard, its resident set size (VmRSS of
# /proc/PID/status) sampled every --every-s seconds beside the step it had reached (its newest
# progress line, every 100 steps). Prints the samples' table thinned to about 20 rows, the RSS at the
# first sample from --from-step on and at the end, and the growth between them (goal < 2 %).
#
#   bench/long_run_rss.sh BUILD_DIR [--experiment tiny-gpt] [--steps 20000] [--from-step 1000]
#                         [--checkpoint-every 500] [--eval-every 500] [--every-s 1] [--out DIR]
#                         [--data SHARDS --tokenizer MODEL --validation SHARDS]
#
# Without --data, `scripts/demo.sh BUILD OUT/data data` prepares the demo's KJV shards (needs
# ax-data). The vocabulary is sized from the tokenizer (model.vocab_size=0). Exits 1 when the run
# fails; the growth is printed, not judged.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${1:?usage: $0 BUILD_DIR [options] (see the header)}"
shift
experiment=tiny-gpt steps=20000 from=1000 ckpt=500 eval=500 every_s=1 out="" data="" tok="" val=""
while (($# > 0)); do
  case "$1" in
    --experiment) experiment="${2:?}"; shift ;;
    --steps) steps="${2:?}"; shift ;;
    --from-step) from="${2:?}"; shift ;;
    --checkpoint-every) ckpt="${2:?}"; shift ;;
    --eval-every) eval="${2:?}"; shift ;;
    --every-s) every_s="${2:?}"; shift ;;
    --out) out="${2:?}"; shift ;;
    --data) data="${2:?}"; shift ;;
    --tokenizer) tok="${2:?}"; shift ;;
    --validation) val="${2:?}"; shift ;;
    *) echo "long_run_rss.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done
train="$(cd "$BUILD" && pwd)/trainer/ax-train"
[[ -x "$train" ]] || { echo "long_run_rss.sh: $train is missing (build ax-train)" >&2; exit 1; }
out="${out:-$(mktemp -d /tmp/ax-long-run.XXXXXX)}"
mkdir -p "$out"
if [[ -z "$data" ]]; then
  bash "$REPO/scripts/demo.sh" "$BUILD" "$out/data" data >"$out/data.log" 2>&1 ||
    { echo "long_run_rss.sh: scripts/demo.sh data failed: $(tail -1 "$out/data.log")" >&2; exit 1; }
  data="$out/data/shards/train" tok="$out/data/spm.model" val="$out/data/shards/val"
fi
run="$out/run"
rm -rf "$run"
val_args=()
[[ -z "$val" ]] || val_args=(--set "data.validation_dir=$val")
"$train" --experiment "$experiment" --data "$data" --tokenizer "$tok" "${val_args[@]}" \
  --run-dir "$run" --max-steps "$steps" --set model.vocab_size=0 --set "train.checkpoint_every=$ckpt" \
  --set "train.eval_every=$eval" --set train.log_every=100 >"$out/train.log" 2>&1 &
pid=$!
samples="$out/rss.tsv"
: >"$samples"
while kill -0 "$pid" 2>/dev/null; do
  rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
  step=$( (tail -n 20 "$out/train.log" 2>/dev/null || true) |
    sed -n 's/^step *\([0-9]*\)\/.*/\1/p' | tail -1)
  [[ -z "$rss" || -z "$step" ]] || printf '%s\t%s\t%s\n' "$SECONDS" "$step" "$rss" >>"$samples"
  sleep "$every_s"
done
wait "$pid" || { echo "long_run_rss.sh: the run failed: $(tail -2 "$out/train.log")" >&2; exit 1; }
n=$(wc -l <"$samples")
((n > 0)) || { echo "long_run_rss.sh: no samples (see $out)" >&2; exit 1; }
echo "long_run_rss: $experiment, $steps steps, a checkpoint every $ckpt, evaluation every $eval;" \
  "$n samples in $samples"
echo
echo "| s | step | RSS (MiB) |"
echo "|---|---|---|"
awk -v n="$n" 'BEGIN {k = int(n / 20); if (k < 1) k = 1} (NR - 1) % k == 0 || NR == n {
  printf "| %d | %d | %.1f |\n", $1, $2, $3 / 1024 }' "$samples"
awk -v from="$from" '$2 >= from && !base {base = $3; bs = $2} {last = $3; ls = $2; if ($3 > peak) peak = $3}
  END {
    if (!base) { print "no sample at or after step " from; exit 1 }
    printf "\nRSS at step %d: %.1f MiB; at step %d: %.1f MiB; growth %+.2f %% (goal < 2 %%); peak %.1f MiB\n",
      bs, base / 1024, ls, last / 1024, 100 * (last - base) / base, peak / 1024 }' "$samples"
