#!/usr/bin/env bash
# The main job's run, on binaries already built: prepares real English text (the King James
# Bible, from Debian's bible-kjv), trains a SentencePiece tokenizer and zstd token shards with
# ax-data, trains the demo-gpt experiment with ax-train (--device auto: the GPU when the build has
# a CUDA backend and a GPU answers, else the CPU) and prints a text sample from the trained model.
# A second run resumes or reuses what OUT holds. scripts/main.sh builds and calls it; the e2e
# test (tests/e2e) runs it on the test build with fewer steps.
#   scripts/demo.sh BUILD_DIR OUT [all|data|train]
# PHASE data stops after the shards (it needs only ax-data: main.sh runs it while ax-train
# builds), train starts from them; all (the default) is both.
#   AX_DEMO_STEPS=N changes the number of training steps (default: the demo-gpt experiment's).
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: scripts/demo.sh BUILD_DIR OUT [all|data|train]"
build="${1:?$usage}"
out="${2:?$usage}"
phase="${3:-all}"
case "$phase" in all | data | train) ;; *) echo "$usage" >&2; exit 2 ;; esac
axdata="$build/datasets/ax-data"
axtrain="$build/trainer/ax-train"
mkdir -p "$out"

prepare_data() {
  echo "== corpus -> $out/corpus"
  bash scripts/corpus.sh "$out/corpus"

  echo "== tokenizer: 8k BPE with byte fallback -> $out/spm.model"
  if [[ ! -f "$out/spm.model" ]]; then
    "$axdata" train-tokenizer --input "$out/corpus/kjv-train.txt" --vocab-size 8000 \
        --model-type bpe --output "$out/spm.model"
  fi

  for split in train val; do
    if [[ ! -f "$out/shards/$split/index.json" ]]; then
      echo "== tokenize $split -> $out/shards/$split"
      "$axdata" tokenize --tokenizer "$out/spm.model" --input "$out/corpus/kjv-$split.txt" \
          --output "$out/shards/$split"
    fi
    "$axdata" verify "$out/shards/$split" --tokenizer "$out/spm.model"
  done
  "$axdata" inspect "$out/shards/train" --tokenizer "$out/spm.model" --samples 2
}

# (Called from an if body, not an || list, so that set -e stops at a failing step inside it.)
if [[ "$phase" != train ]]; then prepare_data; fi
[[ "$phase" != data ]] || exit 0

echo "== train demo-gpt -> $out/run"
steps=()
if [[ -n "${AX_DEMO_STEPS:-}" ]]; then steps=(--max-steps "$AX_DEMO_STEPS"); fi
"$axtrain" --experiment demo-gpt --data "$out/shards/train" --tokenizer "$out/spm.model" \
    --run-dir "$out/run" --device auto "${steps[@]}"

echo "== sample"
"$axtrain" sample --run-dir "$out/run" --prompt "And God said" --tokens 60 --seed 7
echo "main: done. Run directory: $out/run (config.json, metrics.jsonl, tensorboard/, checkpoints/)"
