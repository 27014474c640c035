#!/usr/bin/env bash
# Writes real English text for the demo and the tests from Debian packages that
# scripts/setup.sh installs (bible-kjv, fortunes, zstd); nothing is downloaded.
#
#   scripts/corpus.sh OUTDIR
#
#   OUTDIR/kjv-train.txt          King James Bible, Genesis to Jude, one verse per line
#   OUTDIR/kjv-val.txt            the book of Revelation (held out), one verse per line
#   OUTDIR/fortunes.jsonl         one {"text": ...} per fortune
#   OUTDIR/pile-sample.jsonl.zst  The Pile's layout: {"text": ..., "meta": {"pile_set_name": ...}},
#                                 one KJV chapter per "Bible" document, one fortune per "Fortunes"
#
# Idempotent: each file is written under a temporary name and renamed when complete, and a file
# that exists is left alone.
set -euo pipefail

die() {
  echo "corpus.sh: $*" >&2
  exit 1
}

[[ $# -eq 1 ]] || die "usage: scripts/corpus.sh OUTDIR"
out=$1
fortune_dir=/usr/share/games/fortunes
command -v bible >/dev/null || die "'bible' not found: install bible-kjv (scripts/setup.sh)"
command -v zstd >/dev/null || die "'zstd' not found: install zstd (scripts/setup.sh)"
[[ -d $fortune_dir ]] || die "$fortune_dir not found: install fortunes (scripts/setup.sh)"
mkdir -p "$out"

tmp=$(mktemp -d "$out/.corpus.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# JSON string escaping in awk (mawk or gawk): backslash, quote and control characters.
json_awk='
function replace_all(s, from, to,    n, parts, i, r) {
  n = split(s, parts, from)
  r = parts[1]
  for (i = 2; i <= n; i++) r = r to parts[i]
  return r
}
function json_string(s,    i, c) {
  s = replace_all(s, "\\", "\\\\")
  s = replace_all(s, "\"", "\\\"")
  s = replace_all(s, "\t", "\\t")
  s = replace_all(s, "\n", "\\n")
  for (i = 1; i < 32; i++) {
    c = sprintf("%c", i)
    if (index(s, c)) s = replace_all(s, c, sprintf("\\u%04x", i))
  }
  return "\"" s "\""
}'

# The whole Bible, one verse per line with its reference ("Ge1:1 In the beginning ...").
# -f prints one verse per line (without it the text is wrapped and headed); the program reads
# no terminal and no home directory, so it runs the same in CI.
kjv_verses() {
  if [[ ! -s $tmp/kjv.txt ]]; then
    bible -f "Gen1:1-Rev22:21" </dev/null >"$tmp/kjv.txt"
    local n
    n=$(wc -l <"$tmp/kjv.txt")
    [[ $n -eq 31102 ]] || die "bible printed $n verses, expected 31102 (is bible-kjv-text installed?)"
  fi
  cat "$tmp/kjv.txt"
}

# Fortune files: the text ones only (.dat are indexes, .u8 links to the same text; no offensive/).
fortune_files() {
  find "$fortune_dir" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | LC_ALL=C sort
}

# One {"text": ...} per %-separated fortune.
fortunes_jsonl() {
  local files
  mapfile -t files < <(fortune_files)
  [[ ${#files[@]} -gt 0 ]] || die "no fortune files in $fortune_dir"
  awk "$json_awk"'
    function flush() {
      if (text ~ /[^ \t\n]/) print "{\"text\": " json_string(text) extra "}"
      text = ""; n = 0
    }
    FNR == 1 { flush() }
    $0 == "%" { flush(); next }
    { text = n++ ? text "\n" $0 : $0 }
    END { flush() }' extra="$1" "${files[@]}"
}

# Writes $1 with the output of the remaining command, unless it exists.
produce() {
  local target=$out/$1
  shift
  if [[ -e $target ]]; then
    echo "corpus.sh: $target exists, kept"
    return
  fi
  "$@" >"$tmp/part"
  mv "$tmp/part" "$target"
  echo "corpus.sh: wrote $target ($(wc -c <"$target") bytes)"
}

kjv_split() {  # $1 = train | val
  kjv_verses | awk -v want="$1" '{
    ref = $1; sub(/^[^ ]* /, "")
    if ((ref ~ /^Rev[0-9]/) == (want == "val")) print
  }'
}

pile_sample() {
  {
    # One document per chapter: "Ge1:1", "Ge1:2", ... share the chapter "Ge1".
    kjv_verses | awk "$json_awk"'
      function flush() {
        if (text != "") print "{\"text\": " json_string(text) ", \"meta\": {\"pile_set_name\": \"Bible\"}}"
        text = ""
      }
      {
        ref = $1; sub(/:[0-9]+$/, "", ref); sub(/^[^ ]* /, "")
        if (ref != chapter) { flush(); chapter = ref }
        text = text == "" ? $0 : text " " $0
      }
      END { flush() }'
    fortunes_jsonl ', "meta": {"pile_set_name": "Fortunes"}'
  } | zstd -q -c
}

produce kjv-train.txt kjv_split train
produce kjv-val.txt kjv_split val
produce fortunes.jsonl fortunes_jsonl ""
produce pile-sample.jsonl.zst pile_sample
