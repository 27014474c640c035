#!/usr/bin/env bash
# Fine-tuning from chance to a task metric on real text, small enough for CI (docs/fine-tuning.md
# "A learnable task"): KJV verses labelled "yes" when they name the LORD, else "no" (balanced,
# so chance is 50 %), a tiny T5 on seq2seq shards and a tiny Llama on prompt/response shards,
# each trained with the task evaluated during training (train.eval_task=mnli: exact match of the
# label word, by greedy decoding with the key/value cache) on held-out verses.
#
#   scripts/finetune_demo.sh OUTDIR [t5|llama|both] [STEPS]
#
# Prints each model's accuracy curve (from its metrics.jsonl) and exits 1 when a model's last
# accuracy is below AX_FT_MIN_ACCURACY (default 90). AX_BUILD names a build directory (default:
# scripts/build.sh's, which installs and builds first).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 1 && $# -le 3 ]] || {
  echo "usage: scripts/finetune_demo.sh OUTDIR [t5|llama|both] [STEPS]" >&2
  exit 2
}
out=$1
which=${2:-both}
steps=${3:-120}
min_accuracy=${AX_FT_MIN_ACCURACY:-90}
[[ $which =~ ^(t5|llama|both)$ ]] || {
  echo "finetune_demo: '$which': expected t5, llama or both" >&2
  exit 2
}
if [[ -n "${AX_BUILD:-}" ]]; then
  build=$AX_BUILD
else
  bash scripts/setup.sh
  build=$(bash scripts/build.sh "" ax-data ax-train | tail -n 1)
fi
axdata="$build/datasets/ax-data"
axtrain="$build/trainer/ax-train"
mkdir -p "$out"
bash scripts/corpus.sh "$out/corpus" >/dev/null

# The task: every verse naming the LORD and as many that do not (a fixed draw), a tenth held out.
python3 - "$out/corpus/kjv-train.txt" "$out" <<'EOF'
import json, random, sys
verses = [l.strip() for l in open(sys.argv[1], encoding="utf-8") if l.strip()]
yes = [v for v in verses if "LORD" in v]
no = [v for v in verses if "LORD" not in v]
rng = random.Random(1234)
rng.shuffle(no)
examples = [(v, "yes") for v in yes] + [(v, "no") for v in no[:len(yes)]]
rng.shuffle(examples)
held_out = len(examples) // 10
for name, part in (("val", examples[:held_out]), ("train", examples[held_out:])):
    with open(f"{sys.argv[2]}/lord-{name}.jsonl", "w", encoding="utf-8") as f:
        for i, (verse, label) in enumerate(part):
            f.write(json.dumps({"inputs": "classify: " + verse, "targets": label, "idx": i}) + "\n")
EOF

[[ -f "$out/spm.model" ]] || "$axdata" train-tokenizer --input "$out/corpus/kjv-train.txt" \
  --vocab-size 2000 --model-type bpe --output "$out/spm.model" >/dev/null

# Accuracy of each task evaluation in a run's metrics.jsonl, as "step:accuracy" words.
curve() {
  python3 - "$1/metrics.jsonl" <<'EOF'
import json, sys
points = []
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("task") == "mnli" and "accuracy" in r:
        points.append(f"{r['step']}:{r['accuracy']:.1f}")
print(" ".join(points))
EOF
}

status=0
run() { # NAME EXPERIMENT FORMAT-ARGS...
  local name=$1 experiment=$2
  shift 2
  local shards="$out/$name/train"
  [[ -f "$shards/index.json" ]] || "$axdata" tokenize --tokenizer "$out/spm.model" \
    --input "$out/lord-train.jsonl" --output "$shards" "$@" >/dev/null
  rm -rf "$out/$name/run"
  local -a sets=(--set train.eval_task=mnli --set "train.eval_task_data=$out/lord-val.jsonl"
    --set train.eval_task_examples=200 --set train.eval_every=10 --set train.log_every=10
    --set train.checkpoint_every=0 --set optim.lr=3e-3 --set optim.warmup_steps=20
    --set train.global_batch=16)
  [[ $experiment == tiny-t5 ]] && sets+=(--set train.encoder_seq_len=128)
  [[ $experiment == tiny-llama ]] &&
    sets+=(--set train.seq_len=128 --set model.max_seq_len=128 --set model.vocab_size=0)
  "$axtrain" --experiment "$experiment" --data "$shards" --tokenizer "$out/spm.model" \
    --run-dir "$out/$name/run" --max-steps "$steps" --device cpu "${sets[@]}" \
    >"$out/$name/train.log" 2>&1 || {
    echo "finetune_demo: $name: ax-train failed ($out/$name/train.log):" >&2
    tail -5 "$out/$name/train.log" >&2
    status=1
    return 0
  }
  local points last
  points=$(curve "$out/$name/run")
  last=${points##*:}
  echo "$name ($experiment): accuracy by step (%): $points"
  awk -v a="$last" -v m="$min_accuracy" 'BEGIN { exit !(a >= m) }' || {
    echo "finetune_demo: $name ends at $last % accuracy, below $min_accuracy %" >&2
    status=1
  }
}
[[ $which == llama ]] || run t5 tiny-t5 --format seq2seq
[[ $which == t5 ]] || run llama tiny-llama --format prompt-response --prompt-field inputs \
  --response-field targets
exit $status
