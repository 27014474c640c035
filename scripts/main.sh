#!/usr/bin/env bash
# The main job on a fresh machine: installs what ax needs, builds it, and runs the data pipeline
# end to end on real English text (the King James Bible, from Debian's bible-kjv): trains a
# SentencePiece tokenizer, tokenizes train and validation text into zstd token shards, verifies
# them and shows decoded samples. Outputs land in $AX_OUT (default: ./out).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${AX_OUT:-$PWD/out}"
mkdir -p "$out"

bash scripts/setup.sh
build=$(bash scripts/build.sh | tail -n 1)
axdata="$build/datasets/ax-data"

echo "== corpus -> $out/corpus"
bash scripts/corpus.sh "$out/corpus"

echo "== tokenizer: 8k BPE with byte fallback"
if [[ ! -f "$out/spm.model" ]]; then
  "$axdata" train-tokenizer --input "$out/corpus/kjv-train.txt" --vocab-size 8000 \
      --model-type bpe --output "$out/spm.model"
fi

for split in train val; do
  echo "== tokenize $split -> $out/shards/$split"
  "$axdata" tokenize --tokenizer "$out/spm.model" --input "$out/corpus/kjv-$split.txt" \
      --output "$out/shards/$split" --overwrite
  "$axdata" verify "$out/shards/$split"
done
echo "== inspect"
"$axdata" inspect "$out/shards/train" --tokenizer "$out/spm.model" --samples 3
echo "main: done; shards in $out/shards, tokenizer $out/spm.model"
