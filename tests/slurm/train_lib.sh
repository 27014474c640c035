# shellcheck shell=bash
# Sourced (after lib.sh) by the sharded-training tests of the slurm suite: a small corpus, the
# one-process reference run, and a comparison of per-step losses.
#   prepare_data DIR [EXTRA_IDS] -> DIR/spm.model, DIR/shards/train (the repo's docs as English
#                               text); EXTRA_IDS: that many T5 sentinels at the top of the
#                               vocabulary; on failure the test fails and ends
#   train_args DIR RUN_DIR [EXPERIMENT] -> the ax-train arguments every run of a test uses
#   losses RUN_DIR           -> "step loss" lines from RUN_DIR/metrics.jsonl
#   same_losses WHAT REF GOT -> ok/bad: every step of REF in GOT within 1e-5 relative

AX_DATA="$BUILD/datasets/ax-data"
AX_TRAIN="$BUILD/trainer/ax-train"
AX_LAUNCH="$BUILD/launcher/ax-launch"
TRAIN_STEPS=4

# On failure the test ends here: one FAIL with ax-data's last lines.
prepare_data() {
  local dir="$1" extra_ids=()
  [[ -n "${2-}" ]] && extra_ids=(--extra-ids "$2")
  mkdir -p "$dir"
  cat "$REPO"/docs/*.md "$REPO"/README.md >"$dir/text.txt"
  if "$AX_DATA" train-tokenizer --input "$dir/text.txt" --vocab-size 500 \
    "${extra_ids[@]}" --output "$dir/spm.model" >"$dir/data.log" 2>&1 &&
    "$AX_DATA" tokenize --tokenizer "$dir/spm.model" --input "$dir/text.txt" \
      --output "$dir/shards/train" --threads 1 >>"$dir/data.log" 2>&1; then
    return 0
  fi
  bad "preparing the corpus"
  sed 's/^/  | /' "$dir/data.log" | tail -n 20
  finish
  exit
}

# EXPERIMENT (default tiny-gpt; tiny-llama gets 8 heads over 4 key/value heads, which split over
# 2 tensor ranks) with a global batch every layout of the tests divides, no evaluation.
train_args() {
  local data="$1" run="$2" experiment="${3:-tiny-gpt}"
  echo "--experiment $experiment --data $data/shards/train --tokenizer $data/spm.model"
  [[ "$experiment" != tiny-llama ]] || echo "--set model.num_heads=8 --set model.num_kv_heads=4"
  echo "--run-dir $run --max-steps $TRAIN_STEPS --device cpu"
  echo "--set train.global_batch=16 --set train.eval_every=0 --set train.log_every=1"
  echo "--set train.checkpoint_every=0 --set train.comm_timeout_s=30"
}

losses() {
  python3 -c '
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "loss" in r and "step" in r:
        print(r["step"], repr(r["loss"]))
' "$1/metrics.jsonl" 2>/dev/null
}

same_losses() {
  local what="$1" ref="$2" got="$3"
  local verdict
  verdict="$(python3 -c '
import sys
ref = dict(l.split() for l in sys.argv[1].splitlines() if l.strip())
got = dict(l.split() for l in sys.argv[2].splitlines() if l.strip())
bad = [s for s in ref if s not in got or abs(float(got[s]) - float(ref[s])) > 1e-5 * abs(float(ref[s]))]
print("ok" if ref and not bad else "steps " + ",".join(bad) + " differ or are missing")
' "$ref" "$got")"
  if [[ "$verdict" == ok ]]; then
    ok "$what: $(wc -l <<<"$got") steps, losses equal to one process within 1e-5"
  else
    bad "$what: $verdict"
    paste <(echo "$ref") <(echo "$got") | sed 's/^/  ref | got: /'
  fi
}
