#!/usr/bin/env bash
# The main job on a fresh machine: installs what ax needs, builds it, prepares real English text
# (the King James Bible, from Debian's bible-kjv), trains a SentencePiece tokenizer and zstd token
# shards with ax-data, then trains a small GPT with ax-train (on the GPU when this build has a
# CUDA backend and a GPU answers, else on the CPU), and prints a text sample from the trained
# model. Outputs land in $AX_OUT (default: ./out); a second run resumes or reuses what is there.
#   AX_DEMO_STEPS=N changes the number of training steps (default: the demo-gpt experiment's).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${AX_OUT:-$PWD/out}"
mkdir -p "$out"

bash scripts/setup.sh
build=$(bash scripts/build.sh | tail -n 1)
axdata="$build/datasets/ax-data"
axtrain="$build/trainer/ax-train"

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

echo "== train demo-gpt -> $out/run"
steps=()
if [[ -n "${AX_DEMO_STEPS:-}" ]]; then steps=(--max-steps "$AX_DEMO_STEPS"); fi
"$axtrain" --experiment demo-gpt --data "$out/shards/train" --tokenizer "$out/spm.model" \
    --run-dir "$out/run" --device auto "${steps[@]}"

echo "== sample"
"$axtrain" sample --run-dir "$out/run" --prompt "And God said" --tokens 60 --seed 7
echo "main: done. Run directory: $out/run (config.json, metrics.jsonl, tensorboard/, checkpoints/)"
