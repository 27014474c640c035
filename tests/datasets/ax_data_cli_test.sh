#!/usr/bin/env bash
# Drives ax-data as a user would, on real text from scripts/corpus.sh (Debian's bible-kjv and
# fortunes): train a tokenizer, tokenize four inputs, verify, inspect, and check that each kind
# of mistake exits non-zero with one line naming the problem.
#
#   tests/datasets/ax_data_cli_test.sh path/to/ax-data
set -euo pipefail

[[ $# -eq 1 ]] || { echo "usage: $0 AX_DATA_BINARY" >&2; exit 2; }
ax_data=$(realpath "$1")
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/ax-data-cli.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"

checks=0
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
pass() { checks=$((checks + 1)); }

# run_ok NAME CMD...: the command succeeds; its stdout is in $work/NAME.out.
run_ok() {
  local name=$1
  shift
  if ! "$@" >"$name.out" 2>"$name.err"; then
    cat "$name.err" >&2
    fail "$name: '$*' failed"
  fi
  pass
}

# expect_fail CODE CMD PATTERN ARGS...: ax-data CMD ARGS exits with CODE and prints exactly one
# line, "ax-data CMD: ..." containing PATTERN (a fixed string).
expect_fail() {
  local code=$1 cmd=$2 pattern=$3
  shift 3
  local rc=0
  AX_LOG_LEVEL=warn "$ax_data" "$cmd" "$@" >fail.out 2>fail.err || rc=$?
  [[ $rc -eq $code ]] || fail "ax-data $cmd $*: exit $rc, expected $code; stderr: $(cat fail.err)"
  [[ $(wc -l <fail.err) -eq 1 ]] || fail "ax-data $cmd $*: expected one line, got: $(cat fail.err)"
  grep -q "^ax-data $cmd: " fail.err || fail "ax-data $cmd $*: message lacks the prefix: $(cat fail.err)"
  grep -qF -- "$pattern" fail.err || fail "ax-data $cmd $*: '$pattern' not in: $(cat fail.err)"
  pass
}

# expect_in FILE TEXT: FILE contains TEXT (fixed string).
expect_in() {
  grep -qF -- "$2" "$1" || { cat "$1" >&2; fail "'$2' not in $1"; }
  pass
}

# --- corpus, tokenizer, shards ---------------------------------------------------------------
run_ok corpus bash "$root/scripts/corpus.sh" corpus
for f in kjv-train.txt kjv-val.txt fortunes.jsonl pile-sample.jsonl.zst; do
  [[ -s corpus/$f ]] || fail "corpus.sh did not write $f"
  pass
done
run_ok corpus-again bash "$root/scripts/corpus.sh" corpus
expect_in corpus-again.out "kjv-train.txt exists, kept"

run_ok train "$ax_data" train-tokenizer --input corpus/kjv-train.txt --vocab-size 4000 \
  --model-type bpe --extra-ids 10 --output tok/spm.model
[[ -s tok/spm.model && -s tok/spm.vocab ]] || fail "train-tokenizer wrote no spm.model/spm.vocab"
pass

run_ok tok-train "$ax_data" tokenize --tokenizer tok/spm.model --input corpus/kjv-train.txt \
  --output shards/train --threads 2 --shard-tokens 300000
run_ok tok-train1 "$ax_data" tokenize --tokenizer tok/spm.model --input corpus/kjv-train.txt \
  --output shards/train1 --threads 1 --shard-tokens 300000
for s in shards/train/*.axs shards/train/index.json; do
  cmp -s "$s" "shards/train1/$(basename "$s")" || fail "$s differs between 1 and 2 threads"
  pass
done
run_ok tok-val "$ax_data" tokenize --tokenizer tok/spm.model --input corpus/kjv-val.txt \
  --output shards/val
run_ok tok-fortunes "$ax_data" tokenize --tokenizer tok/spm.model --input corpus/fortunes.jsonl \
  --output shards/fortunes
run_ok tok-pile "$ax_data" tokenize --tokenizer tok/spm.model \
  --input corpus/pile-sample.jsonl.zst --output shards/pile

for set in train val fortunes pile; do
  run_ok "verify-$set" "$ax_data" verify "shards/$set" --tokenizer tok/spm.model
  expect_in "verify-$set.out" ": OK"
done
expect_in verify-train.out "30698 docs"
expect_in verify-val.out "404 docs"

run_ok inspect-val "$ax_data" inspect shards/val --tokenizer tok/spm.model --samples 2
expect_in inspect-val.out "documents   404"
expect_in inspect-val.out "The Revelation of Jesus Christ"
run_ok inspect-pile "$ax_data" inspect shards/pile --tokenizer tok/spm.model --samples 1
expect_in inspect-pile.out "Bible: 1189 docs"
expect_in inspect-pile.out "Fortunes:"
expect_in inspect-pile.out "In the beginning God created the heaven and the earth."
run_ok inspect-train "$ax_data" inspect shards/train
expect_in inspect-train.out "shards      "
grep -q "^shards      [2-9]" inspect-train.out || fail "expected several train shards"
pass

# --- long documents ----------------------------------------------------------------------------
# The whole training text as one line: encoded in pieces, or skipped / truncated at a limit.
tr '\n' ' ' <corpus/kjv-train.txt >kjv-line.txt
head -c 2000000 kjv-line.txt >one-line.txt
echo >>one-line.txt
run_ok long "$ax_data" tokenize --tokenizer tok/spm.model --input one-line.txt --output shards/long
expect_in long.err "1 document(s) over 4096 bytes encoded in pieces"
expect_in long.out "1 docs"
run_ok long-skip "$ax_data" tokenize --tokenizer tok/spm.model --input one-line.txt corpus/kjv-val.txt \
  --output shards/long-skip --max-doc-bytes 100000
expect_in long-skip.err "1 over --max-doc-bytes"
expect_in long-skip.out "404 docs"
run_ok long-cut "$ax_data" tokenize --tokenizer tok/spm.model --input one-line.txt \
  --output shards/long-cut --max-doc-bytes 100000 --long-docs truncate
expect_in long-cut.err "truncated 1 at --max-doc-bytes"
expect_fail 1 tokenize "one-line.txt:1: a document of 2000000 bytes" --tokenizer tok/spm.model \
  --input one-line.txt --output shards/long-fail --max-doc-bytes 100000 --long-docs fail

# --- a job of several tasks ----------------------------------------------------------------------
# Five Pile-layout files; any number of tasks gives the same dataset (shards and index.json).
mkdir -p pile
zstd -q -dc corpus/pile-sample.jsonl.zst >pile-sample.jsonl
split -n l/5 -d --additional-suffix=.jsonl pile-sample.jsonl pile/part-
for f in pile/*.jsonl; do zstd -q --rm "$f"; done
for n in 2 3; do
  job=(--tokenizer tok/spm.model --input 'pile/*.jsonl.zst' --output "jobs/$n" --tasks "$n"
    --threads 1 --shard-tokens 100000)
  run_ok "plan-$n" "$ax_data" tokenize "${job[@]}" --plan-only
  expect_in "plan-$n.out" "5 input file(s) over $n task(s)"
  for ((t = 0; t < n; t++)); do run_ok "task-$n-$t" "$ax_data" tokenize "${job[@]}" --task "$t"; done
  run_ok "progress-$n" "$ax_data" progress "jobs/$n"
  expect_in "progress-$n.out" "5 / 5 files"
  run_ok "merge-$n" "$ax_data" merge "jobs/$n"
  run_ok "verify-job-$n" "$ax_data" verify "jobs/$n" --tokenizer tok/spm.model
done
expect_in task-3-0.out "task 0 of 3 done"
for f in jobs/2/*; do
  cmp -s "$f" "jobs/3/$(basename "$f")" || fail "$f differs between 2 and 3 tasks"
  pass
done
[[ $(find jobs/3 -maxdepth 1 | wc -l) -eq $(find jobs/2 -maxdepth 1 | wc -l) ]] || fail "file counts differ"
pass
expect_in verify-job-2.out "16406 docs"
run_ok merge-again "$ax_data" merge jobs/2
run_ok task-again "$ax_data" tokenize --tokenizer tok/spm.model --input 'pile/*.jsonl.zst' \
  --output jobs/2 --tasks 2 --task 1 --threads 1 --shard-tokens 100000
expect_in task-again.out "merged already"
run_ok partial "$ax_data" tokenize --tokenizer tok/spm.model --input 'pile/*.jsonl.zst' \
  --output jobs/partial --tasks 2 --task 0 --threads 1
expect_fail 1 merge "of 5 input files are not tokenized yet" jobs/partial
mkdir -p jobs/none
expect_fail 1 merge "holds no tokenize job" jobs/none

# --- progress of a requeued job ------------------------------------------------------------------
# A task that was stopped (or killed) mid-file leaves that file's progress behind; the requeued
# run starts the file again, so the bytes done go down while `progress --watch` runs. The rate it
# prints must stay sane: it printed 9203433304781.98 MB/s (an unsigned difference that wrapped).
run_ok plan-requeued "$ax_data" tokenize --tokenizer tok/spm.model --input 'pile/*.jsonl.zst' \
  --output jobs/requeued --tasks 2 --plan-only
size0=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["files"][0]["bytes"])' \
  jobs/requeued/parts/plan.json)
echo "$size0 $size0" >jobs/requeued/parts/00000.progress   # the stopped run got to the end of file 0
"$ax_data" progress jobs/requeued --watch 0.2 >watch.out 2>&1 &
watcher=$!
sleep 0.7
echo "1000 $size0" >jobs/requeued/parts/00000.progress     # the requeued run starts file 0 again
sleep 0.7
echo "$((size0 / 2)) $size0" >jobs/requeued/parts/00000.progress
sleep 0.9
kill "$watcher"
wait "$watcher" 2>/dev/null || true
[[ $(grep -c '^ax-data progress: ' watch.out) -ge 5 ]] || fail "progress --watch: too few lines: $(cat watch.out)"
pass
rates=$(grep -o '[-0-9.e+]* MB/s' watch.out | cut -d' ' -f1 || true)
[[ -n "$rates" ]] || fail "progress --watch printed no rate: $(cat watch.out)"
for r in $rates; do
  awk -v r="$r" 'BEGIN { exit !(r >= 0 && r < 1000) }' ||
    fail "progress --watch printed $r MB/s after the bytes done went down: $(cat watch.out)"
done
pass
# After the restart it counts from there: the last line's rate is the second half's, not zero.
awk -v r="$(tail -n 1 <<<"$rates")" 'BEGIN { exit !(r > 0) }' ||
  fail "progress --watch: no rate after the restart: $(cat watch.out)"
pass
expect_fail 2 tokenize "--tasks needs either --task I or --plan-only" --tokenizer tok/spm.model \
  --input corpus/kjv-val.txt --output shards/y --tasks 2
expect_fail 2 tokenize "--task and --plan-only need --tasks" --tokenizer tok/spm.model \
  --input corpus/kjv-val.txt --output shards/y --task 1
expect_fail 2 tokenize "--long-docs needs --max-doc-bytes" --tokenizer tok/spm.model \
  --input corpus/kjv-val.txt --output shards/y --long-docs truncate

# --- help --------------------------------------------------------------------------------------
for cmd in train-tokenizer tokenize merge progress verify inspect; do
  run_ok "help-$cmd" "$ax_data" "$cmd" --help
  expect_in "help-$cmd.out" "usage: ax-data $cmd"
done
run_ok help-env "$ax_data" --help-env
expect_in help-env.out "AX_LOG_LEVEL"

# --- mistakes ----------------------------------------------------------------------------------
expect_fail 1 tokenize "no-such-file.txt" --tokenizer tok/spm.model \
  --input corpus/kjv-val.txt no-such-file.txt --output shards/x
[[ ! -e shards/x ]] || fail "a failed tokenize created its output directory"
pass
expect_fail 1 tokenize "matches no file" --tokenizer tok/spm.model --input 'corpus/*.parquet' \
  --output shards/x
expect_fail 1 train-tokenizer "missing.txt" --input missing.txt --vocab-size 100 --output t.model
expect_fail 2 train-tokenizer "--vocab-size" --input corpus/kjv-val.txt --vocab-size lots \
  --output t.model
expect_fail 2 train-tokenizer "--vocab-size" --input corpus/kjv-val.txt --vocab-size -5 \
  --output t.model
expect_fail 2 train-tokenizer "--vocab-size is required" --input corpus/kjv-val.txt \
  --output t.model
expect_fail 2 tokenize "unknown option '--bogus'" --tokenizer tok/spm.model \
  --input corpus/kjv-val.txt --output shards/x --bogus
expect_fail 2 tokenize "--output needs a value" --tokenizer tok/spm.model \
  --input corpus/kjv-val.txt --output
expect_fail 2 tokenize "--threads" --tokenizer tok/spm.model --input corpus/kjv-val.txt \
  --output shards/x --threads two
expect_fail 2 tokenize "--format: expected text|seq2seq|prompt-response|chat, got 'xml'" --tokenizer tok/spm.model \
  --input corpus/kjv-val.txt --output shards/x --format xml
printf '{"messages": [{"role": "user", "content": "hi"}]}\n' >chat-bad.jsonl
expect_fail 2 tokenize "--format chat runs as one task (no --tasks)" --tokenizer tok/spm.model \
  --input chat-bad.jsonl --output shards/x --format chat --tasks 2 --task 0
expect_fail 1 tokenize "chat template (simple, llama3, chatml, a JSON template file, or a Hugging Face model's tokenizer_config.json or directory): open nope" \
  --tokenizer tok/spm.model --input chat-bad.jsonl --output shards/x --format chat --template nope
expect_fail 1 tokenize "chat-bad.jsonl:1: no assistant message to train on" \
  --tokenizer tok/spm.model --input chat-bad.jsonl --output shards/x --format chat
expect_fail 1 tokenize "kjv-val.txt: --format chat reads JSON lines (.jsonl)" \
  --tokenizer tok/spm.model --input corpus/kjv-val.txt --output shards/x --format chat
expect_fail 2 verify "DIR is required" --tokenizer tok/spm.model
expect_fail 1 verify "index.json" "$work/nowhere"
expect_fail 1 tokenize "--overwrite" --tokenizer tok/spm.model --input corpus/kjv-val.txt \
  --output shards/val
run_ok overwrite "$ax_data" tokenize --tokenizer tok/spm.model --input corpus/kjv-val.txt \
  --output shards/val --overwrite

printf 'not a model at all' >garbage.model
expect_fail 1 tokenize "not a SentencePiece model" --tokenizer garbage.model \
  --input corpus/kjv-val.txt --output shards/x

# A tokenizer other than the one the shards were made with.
run_ok train-other "$ax_data" train-tokenizer --input corpus/kjv-val.txt --vocab-size 500 \
  --output tok/other.model
expect_fail 1 inspect "tokenizer" shards/val --tokenizer tok/other.model
expect_fail 1 verify "tokenizer" shards/val --tokenizer tok/other.model

# Invalid JSON on line 3: an error naming file:line, or skipped and counted with --skip-bad.
printf '{"text": "In the beginning"}\n{"text": "was the word"}\n{"text": broken\n{"text": "Amen."}\n' \
  >bad.jsonl
expect_fail 1 tokenize "bad.jsonl:3: invalid JSON" --tokenizer tok/spm.model --input bad.jsonl \
  --output shards/bad
[[ ! -e shards/bad/index.json ]] || fail "a failed tokenize wrote an index"
pass
run_ok skip-bad "$ax_data" tokenize --tokenizer tok/spm.model --input bad.jsonl \
  --output shards/bad --skip-bad
expect_in skip-bad.err "skipped 1 bad records"
run_ok inspect-bad "$ax_data" inspect shards/bad
expect_in inspect-bad.out "0 empty, 1 bad"
expect_in inspect-bad.out "documents   3"

# Files that are not what their names say: one error naming the file and the line.
head -c 300000 corpus/pile-sample.jsonl.zst >cut.jsonl.zst
expect_fail 1 tokenize "cut.jsonl.zst:" --tokenizer tok/spm.model --input cut.jsonl.zst \
  --output shards/cut
grep -qE "cut\.jsonl\.zst:[0-9]+: truncated zstd stream" fail.err || fail "no line in: $(cat fail.err)"
pass
cp corpus/pile-sample.jsonl.zst packed.jsonl
expect_fail 1 tokenize "packed.jsonl:1: text is not valid UTF-8" --tokenizer tok/spm.model \
  --input packed.jsonl --output shards/packed
head -c 3000000 "$ax_data" >program.txt
expect_fail 1 tokenize "program.txt:1: text is not valid UTF-8" --tokenizer tok/spm.model \
  --input program.txt --output shards/program

# A flipped byte inside the first data frame (after the 64-byte header frame).
cp -r shards/val shards/corrupt
shard=shards/corrupt/shard-00000.axs
offset=200
byte=$(od -An -tu1 -j "$offset" -N1 "$shard" | tr -d ' ')
printf "\\$(printf '%03o' $(((byte + 1) % 256)))" |
  dd of="$shard" bs=1 seek="$offset" count=1 conv=notrunc status=none
cmp -s "$shard" shards/val/shard-00000.axs && fail "the shard was not modified"
pass
expect_fail 1 verify "shard-00000.axs" shards/corrupt

# --- convert-task: a GLUE MNLI tsv into jsonl, then into seq2seq shards -------------------------
printf 'index\tpromptID\tpairID\tgenre\tsentence1\tsentence2\tlabel1\tgold_label\n' >mnli.tsv
printf '0\t1\t1e\tfiction\tThe door was locked.\tNobody could get in.\tentailment\tentailment\n' \
  >>mnli.tsv
printf '1\t2\t2n\tfiction\tIt rained all day.\tThe game was cancelled.\tneutral\t-\n' >>mnli.tsv
run_ok convert-mnli "$ax_data" convert-task --task mnli --input mnli.tsv --output ft/mnli.jsonl
expect_in convert-mnli.out "ft/mnli.jsonl: 1 examples from mnli.tsv (GLUE tsv); 1 pairs without a gold label skipped"
expect_in ft/mnli.jsonl '"inputs":"mnli hypothesis: Nobody could get in. premise: The door was locked."'
run_ok tok-mnli "$ax_data" tokenize --tokenizer tok/spm.model --input ft/mnli.jsonl \
  --output shards/mnli --format seq2seq
expect_in tok-mnli.out "1 shard(s), 2 docs"
expect_fail 2 convert-task "--task: expected mnli|squad|lambada, got 'qqp'" --task qqp \
  --input mnli.tsv --output x.jsonl
expect_fail 2 convert-task "--ascii-quotes goes only with --task lambada" --task mnli \
  --input mnli.tsv --output x.jsonl --ascii-quotes
printf '{"text": "alone"}\n' >one-word.jsonl
expect_fail 1 convert-task "one-word.jsonl:1: the text 'alone' is one word" --task lambada \
  --input one-word.jsonl --output x.jsonl
[[ ! -e x.jsonl ]] || fail "a failed convert-task wrote its output"
pass

# A Hugging Face tokenizer.json (the GPT-2 fixture of hf_tokenizer_test) in place of spm.model.
hf_tok="$root/tests/datasets/hf_tokenizer/gpt2.tokenizer.json"
run_ok tok-hf "$ax_data" tokenize --tokenizer "$hf_tok" --input corpus/kjv-val.txt \
  --output shards/hf-val
run_ok verify-hf "$ax_data" verify shards/hf-val
expect_in verify-hf.out "404 docs"
run_ok inspect-hf "$ax_data" inspect shards/hf-val --tokenizer "$hf_tok" --samples 2
expect_in inspect-hf.out "The Revelation of Jesus Christ"
# The index records which kind of tokenizer made the shards; a set made with one is refused with
# the other, naming the kind; an index written before the kind was recorded still reads.
grep -q '"kind": "tokenizer.json"' shards/hf-val/index.json || fail "hf-val: no tokenizer kind"
grep -q '"kind": "sentencepiece"' shards/val/index.json || fail "val: no tokenizer kind"
pass
expect_in inspect-hf.out "gpt2.tokenizer.json (tokenizer.json), hash"
run_ok verify-hf-tok "$ax_data" verify shards/hf-val --tokenizer "$hf_tok"
expect_fail 1 verify "(tokenizer.json 'gpt2.tokenizer.json') in the index" shards/hf-val \
  --tokenizer tok/spm.model
expect_fail 1 inspect "(sentencepiece 'spm.model') in the index" shards/val --tokenizer "$hf_tok"
cp -r shards/hf-val shards/hf-old
python3 -c 'import json, sys; j = json.load(open(sys.argv[1])); del j["tokenizer"]["kind"]; json.dump(j, open(sys.argv[1], "w"), indent=2)' \
  shards/hf-old/index.json
run_ok verify-hf-old "$ax_data" verify shards/hf-old --tokenizer "$hf_tok"
# A Hugging Face model directory: its tokenizer.json (with the tokenizer_config.json beside it
# naming EOS), or a SentencePiece tokenizer.model when it has no tokenizer.json.
mkdir -p hfdir spmdir
cp "$root/tests/datasets/hf_tokenizer/qwen3.tokenizer.json" hfdir/tokenizer.json
cp tok/spm.model spmdir/tokenizer.model
printf '{"eos_token": "<|im_end|>"}' >hfdir/tokenizer_config.json
run_ok tok-hfdir "$ax_data" tokenize --tokenizer hfdir --input corpus/kjv-val.txt \
  --output shards/hfdir
grep -q '"eos_id": 843' shards/hfdir/index.json || fail "hfdir: EOS is not <|im_end|> (843)"
pass
run_ok inspect-hfdir "$ax_data" inspect shards/hfdir --tokenizer hfdir/ --samples 1
expect_in inspect-hfdir.out "The Revelation of Jesus Christ"
run_ok tok-spmdir "$ax_data" tokenize --tokenizer spmdir --input corpus/kjv-val.txt \
  --output shards/spmdir
cmp -s shards/spmdir/shard-00000.axs shards/val/shard-00000.axs ||
  fail "a directory's tokenizer.model did not give the .model's shards"
pass
expect_fail 1 tokenize "holds none of tokenizer.json, tokenizer.model, spiece.model" \
  --tokenizer corpus --input corpus/kjv-val.txt --output shards/none
# convert-task's output on through tokenize with a tokenizer.json (seq2seq pairs).
run_ok tok-mnli-hf "$ax_data" tokenize --tokenizer "$hf_tok" --input ft/mnli.jsonl \
  --output shards/mnli-hf --format seq2seq
expect_in tok-mnli-hf.out "1 shard(s), 2 docs"
# Chat data in the template of the model's tokenizer_config.json (Qwen2.5's ChatML, with its
# default system message); <|im_start|> and <|im_end|> are single tokens of the tokenizer.json.
python3 - <<'PY'
import json
jinja = ("{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + "
         "'<|im_end|>\\n' }}{%- else %}{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
         "{%- endif %}{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + "
         "message.content + '<|im_end|>' + '\\n' }}{%- endfor %}")
json.dump({"eos_token": "<|im_end|>", "chat_template": jinja}, open("hfdir/tokenizer_config.json", "w"))
with open("chat.jsonl", "w") as f:
    for q, a in [("Who wrote Revelation?", "John."), ("What is 2+2?", "4")]:
        f.write(json.dumps({"messages": [{"role": "user", "content": q},
                                         {"role": "assistant", "content": a}]}) + "\n")
PY
run_ok tok-chat-hf "$ax_data" tokenize --format chat --template hfdir --tokenizer hfdir \
  --input chat.jsonl --output shards/chat-hf
expect_in tok-chat-hf.out "2 conversation(s) rendered with template hfdir"
expect_in shards/chat-hf/rendered/00000-chat.jsonl \
  '{"prompt":"<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWho wrote Revelation?<|im_end|>\n<|im_start|>assistant\n","response":"John.<|im_end|>\n"}'
run_ok inspect-chat-hf "$ax_data" inspect shards/chat-hf --tokenizer hfdir --samples 2
expect_in inspect-chat-hf.out "<|im_start|>assistant"
printf '{"chat_template": "{{ bos_token }}{%% for m in messages %%}[INST] {{ m.content }} [/INST]{%% endfor %%}"}' \
  >hfdir/tokenizer_config.json
expect_fail 1 tokenize "Llama 2's or Mistral's [INST] ... [/INST] is not a template ax renders" \
  --format chat --template hfdir --tokenizer hfdir --input chat.jsonl --output shards/chat-bad
mkdir -p wordpiece
printf '{"version": "1.0", "model": {"type": "WordPiece", "vocab": {}}}' >wordpiece/tokenizer.json
expect_fail 1 tokenize 'model "WordPiece" is not supported (supported: BPE, Unigram)' \
  --tokenizer wordpiece --input corpus/kjv-val.txt --output shards/wp

echo "ax_data_cli: $checks checks passed"
