#!/usr/bin/env bash
# ax-train driven as a user would: help and usage errors, a short training run with the device
# line and progress lines, SIGTERM -> checkpoint + exit 75 -> resume, NaN -> exit 1, a model
# change refused on resume, --device cuda refused, and sampling. With AX_LAUNCH: the job secret
# (docs/threat-model.md) stays in the ranks' environment, out of command lines, logs and the run
# directory, and a rank without one fails at once, saying so.
#   ax_train_cli_test.sh AX_TRAIN AX_DATA [AX_LAUNCH]
set -uo pipefail
axtrain=$1
axdata=$2
axlaunch=${3:-}
work=$(mktemp -d "${TMPDIR:-/tmp}/ax-train-cli.XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0

fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# expect_status WANT DESCRIPTION -- COMMAND...: runs COMMAND, output in $work/out.
expect_status() {
  local want=$1 what=$2
  shift 3
  "$@" >"$work/out" 2>&1
  local got=$?
  [[ $got -eq $want ]] || { fail "$what: exit $got, want $want"; tail -n 5 "$work/out" >&2; }
}

expect_output() {
  grep -q -- "$1" "$work/out" || { fail "output lacks '$1'"; tail -n 5 "$work/out" >&2; }
}

# Real text: fortunes when installed, else generated sentences.
text="$work/text.txt"
if [[ -d /usr/share/games/fortunes ]]; then
  grep -hv '^%$' /usr/share/games/fortunes/{fortunes,literature,wisdom,people} 2>/dev/null |
    head -c 150000 >"$text"
fi
if [[ ! -s $text ]]; then
  for i in $(seq 1 3000); do
    echo "Line $i: the quick brown fox jumps over the lazy dog while the baker opens his shop."
  done >"$text"
fi
head -n -200 "$text" >"$work/train.txt"
tail -n 200 "$text" >"$work/val.txt"
"$axdata" train-tokenizer --input "$work/train.txt" --vocab-size 500 --output "$work/spm.model" \
  >/dev/null 2>&1 || { echo "FAIL: tokenizer training" >&2; exit 1; }
for split in train val; do
  "$axdata" tokenize --tokenizer "$work/spm.model" --input "$work/$split.txt" \
    --output "$work/shards/$split" >/dev/null 2>&1 || { echo "FAIL: tokenize $split" >&2; exit 1; }
done
common=(--experiment tiny-gpt --data "$work/shards/train" --tokenizer "$work/spm.model")

# Help and usage.
expect_status 0 "--help" -- "$axtrain" --help
expect_output "--experiment NAME"
expect_status 0 "--list-experiments" -- "$axtrain" --list-experiments
expect_output "tiny-llama"
expect_status 0 "--help-config" -- "$axtrain" --help-config
expect_output "model.num_layers"
expect_status 0 "--help-env" -- "$axtrain" --help-env
expect_output "AX_CPU_THREADS"
expect_status 2 "no arguments" -- "$axtrain"
expect_status 2 "unknown option" -- "$axtrain" "${common[@]}" --run-dir "$work/r" --bogus 1
expect_output "^ax-train: unknown option '--bogus'"
expect_status 2 "missing run dir" -- "$axtrain" "${common[@]}"
expect_output "run-dir"
expect_status 2 "unknown key" -- "$axtrain" "${common[@]}" --run-dir "$work/r" --set model.nope=1
expect_output "model.nope"
expect_status 2 "bad device" -- "$axtrain" "${common[@]}" --run-dir "$work/r" --device tpu
expect_status 1 "cuda without a GPU or a CUDA build" -- "$axtrain" "${common[@]}" --run-dir "$work/r" --device cuda
expect_output "no CUDA device"
expect_status 1 "cuda:1 parses, but no GPU answers" -- "$axtrain" "${common[@]}" --run-dir "$work/r" \
  --device cuda:1
expect_output "no CUDA device"
expect_status 2 "bad ordinal" -- "$axtrain" "${common[@]}" --run-dir "$work/r" --device cuda:x
expect_output "expected cuda:N"
expect_status 1 "cpu-bf16 with float32" -- "$axtrain" "${common[@]}" --run-dir "$work/r" \
  --device cpu-bf16 --set train.precision=float32
expect_output "cpu-bf16 computes in bfloat16"
expect_status 1 "missing tokenizer" -- "$axtrain" --experiment tiny-gpt --data "$work/shards/train" \
  --tokenizer "$work/none.model" --run-dir "$work/r"
[[ $(wc -l <"$work/out") -eq 1 ]] || fail "a runtime error is one line"

# A short run: device line, progress, eval on the sibling val/, checkpoints, metrics.
run="$work/run"
expect_status 0 "train 6 steps" -- "$axtrain" "${common[@]}" --run-dir "$run" --max-steps 6 \
  --set train.eval_every=3
expect_output "device: cpu (no GPU answered: no CUDA device"
expect_output "step 6/6 | loss"
expect_output "eval step 3 | val loss"
expect_output "model.num_layers"
[[ -f $run/config.json && -f $run/metrics.jsonl ]] || fail "config.json / metrics.jsonl missing"
ls "$run"/tensorboard/events.out.tfevents.* >/dev/null 2>&1 || fail "no TensorBoard event file"

# Sampling from it.
expect_status 0 "sample" -- "$axtrain" sample --run-dir "$run" --prompt "The" --tokens 8 \
  --temperature 0
expect_output "^The"
expect_status 0 "sample in the bf16 plan" -- "$axtrain" sample --run-dir "$run" --prompt "The" \
  --tokens 8 --temperature 0 --device cpu-bf16
expect_output "^The"

# Export to Hugging Face format, then start new runs from it and from the ax run (--init-from).
expect_status 0 "export" -- "$axtrain" export --run-dir "$run" --output "$work/hf"
expect_output "exported step 6 of $run to $work/hf"
[[ -f $work/hf/model.safetensors && -f $work/hf/config.json ]] || fail "export: files missing"
grep -q '"GPT2LMHeadModel"' "$work/hf/config.json" || fail "export: not GPT-2's config.json"
# The run's tokenizer goes beside the weights (issue 28), and sample / eval take another one.
expect_output "^tokenizer: tokenizer.model"
cmp -s "$work/spm.model" "$work/hf/tokenizer.model" || fail "export: tokenizer.model is not the run's"
expect_status 0 "sample --tokenizer" -- "$axtrain" sample --run-dir "$run" --prompt "The" \
  --tokens 8 --temperature 0 --tokenizer "$work/hf"
expect_output "^The"
expect_status 0 "export --step 6" -- "$axtrain" export --run-dir "$run" --step 6 \
  --output "$work/hf6"
expect_output "exported step 6"
cmp -s "$work/hf/model.safetensors" "$work/hf6/model.safetensors" ||
  fail "export: the same checkpoint exported twice differs"
expect_status 1 "export of a missing step" -- "$axtrain" export --run-dir "$run" --step 4 \
  --output "$work/hf4"
expect_output "no checkpoint of step 4"
expect_status 2 "export without --output" -- "$axtrain" export --run-dir "$run"
expect_status 0 "init from Hugging Face" -- "$axtrain" "${common[@]}" --run-dir "$work/ft-hf" \
  --init-from "$work/hf" --max-steps 2 --set model.num_layers=2 --set train.eval_every=0
expect_output "initialised from Hugging Face gpt $work/hf; optimizer state fresh, starting at step 0"
expect_output "step 2/2 | loss"
# The imported weights are the run's: the first loss of the fine-tuning run is below a fresh
# model's first loss on the same data.
ft_first=$(sed -n 's/^step  *1\/2 | loss \([0-9.]*\).*/\1/p' "$work/out")
expect_status 0 "fresh run" -- "$axtrain" "${common[@]}" --run-dir "$work/fresh" --max-steps 2 \
  --set train.eval_every=0
fresh_first=$(sed -n 's/^step  *1\/2 | loss \([0-9.]*\).*/\1/p' "$work/out")
awk -v a="$ft_first" -v b="$fresh_first" 'BEGIN { exit !(a > 0 && a < b) }' ||
  fail "init from Hugging Face: first loss $ft_first is not below a fresh model's $fresh_first"
expect_status 0 "init from an ax run, keeping its step" -- "$axtrain" "${common[@]}" \
  --run-dir "$work/ft-ax" --init-from "$run" --set train.init_from_keep_step=true \
  --max-steps 10 --set train.eval_every=0
expect_output "initialised from ax checkpoint $run/checkpoints/step_00000006 (step 6)"
expect_output "step 10/10 | loss"
expect_status 0 "init from one checkpoint directory, named with a trailing slash" -- \
  "$axtrain" "${common[@]}" --run-dir "$work/ft-slash" \
  --init-from "$run/checkpoints/step_00000006/" --max-steps 2 --set train.eval_every=0
expect_output "initialised from ax checkpoint $run/checkpoints/step_00000006 (step 6)"
expect_status 2 "a --set model.* that contradicts the checkpoint" -- "$axtrain" "${common[@]}" \
  --run-dir "$work/ft-bad" --init-from "$work/hf" --set model.model_dim=32
expect_output "--set model.model_dim=32 contradicts --init-from $work/hf, whose model has model.model_dim=64"
expect_status 2 "keep_step with a Hugging Face directory" -- "$axtrain" "${common[@]}" \
  --run-dir "$work/ft-bad" --init-from "$work/hf" --set train.init_from_keep_step=true
expect_output "has no step count"
mkdir -p "$work/hf-small"
cp "$work/hf/model.safetensors" "$work/hf-small/"
sed 's/"vocab_size": 512/"vocab_size": 400/' "$work/hf/config.json" >"$work/hf-small/config.json"
expect_status 1 "a tokenizer larger than the checkpoint's vocabulary" -- "$axtrain" \
  "${common[@]}" --run-dir "$work/ft-bad" --init-from "$work/hf-small"
expect_output "has 500 ids, more than the 400 rows of the embedding of --init-from"
mkdir -p "$work/hf-mistral"
cp "$work/hf/model.safetensors" "$work/hf-mistral/"
sed 's/"gpt2"/"mistral"/; s/GPT2LMHeadModel/MistralForCausalLM/' "$work/hf/config.json" \
  >"$work/hf-mistral/config.json"
expect_status 1 "an unknown architecture" -- "$axtrain" "${common[@]}" --run-dir "$work/ft-bad" \
  --init-from "$work/hf-mistral"
expect_output "MistralForCausalLM.*is not an architecture ax imports"
[[ ! -d $work/ft-bad/checkpoints ]] || fail "a refused --init-from left checkpoints"

# The CUDA backend's bf16 dtype plan on the CPU: the same run goes on with bf16 activations.
expect_status 0 "train on cpu-bf16" -- "$axtrain" "${common[@]}" --run-dir "$run" --max-steps 8 \
  --device cpu-bf16
expect_output "device: cpu-bf16"
expect_output "step 8/8 | loss"

# A model change on resume is refused, naming the key.
expect_status 1 "model change" -- "$axtrain" "${common[@]}" --run-dir "$run" --max-steps 8 \
  --set model.model_dim=32
expect_output "model.model_dim"

# SIGTERM: finish the step, checkpoint, exit 75; the same command resumes.
long="$work/long"
"$axtrain" "${common[@]}" --run-dir "$long" --max-steps 100000 --set train.checkpoint_every=0 \
  --set train.eval_every=0 --set train.log_every=1 >"$work/long.out" 2>&1 &
pid=$!
for _ in $(seq 1 200); do
  grep -q "step .*| loss" "$work/long.out" && break
  sleep 0.1
done
kill -TERM "$pid"
wait "$pid"
status=$?
[[ $status -eq 75 ]] || { fail "SIGTERM: exit $status, want 75"; tail -n 5 "$work/long.out" >&2; }
grep -q "stopped after step" "$work/long.out" || fail "SIGTERM: no stop message"
ls -d "$long"/checkpoints/step_* >/dev/null 2>&1 || fail "SIGTERM: no checkpoint"
stopped=$(sed -n 's/^stopped after step \([0-9]*\).*/\1/p' "$work/long.out")
expect_status 0 "resume" -- "$axtrain" "${common[@]}" --run-dir "$long" \
  --max-steps $((stopped + 2)) --set train.checkpoint_every=0 --set train.eval_every=0
expect_output "resumed from step $stopped"

# NaN: a clear error, exit 1, the last good checkpoint stays.
nan="$work/nan"
expect_status 1 "NaN" -- "$axtrain" "${common[@]}" --run-dir "$nan" --set optim.lr=1e30 \
  --set optim.grad_clip=0 --set train.checkpoint_every=1
expect_output "^ax-train: loss is NaN at step"
ls -d "$nan"/checkpoints/step_* >/dev/null 2>&1 || fail "NaN: the last good checkpoint is gone"

# T5: span corruption from the same text, on a tokenizer with sentinels; and what is refused
# before training starts.
"$axdata" train-tokenizer --input "$work/train.txt" --vocab-size 600 --extra-ids 100 \
  --output "$work/t5.model" >/dev/null 2>&1 || fail "T5 tokenizer training"
"$axdata" tokenize --tokenizer "$work/t5.model" --input "$work/train.txt" \
  --output "$work/t5shards/train" >/dev/null 2>&1 || fail "T5 tokenize"
t5=(--experiment tiny-t5 --data "$work/t5shards/train" --tokenizer "$work/t5.model")
expect_status 0 "inspect span corruption" -- "$axdata" inspect "$work/t5shards/train" \
  --tokenizer "$work/t5.model" --span-corruption 64 --samples 2
expect_output "windows of 70 tokens -> 64 inputs, 14 targets"
expect_output "^  \[1\] inputs  (64) .*<extra_id_0>"
expect_output "^      targets (14) <extra_id_0>"
expect_status 0 "tiny-t5 trains" -- "$axtrain" "${t5[@]}" --run-dir "$work/t5run" --max-steps 12 \
  --set train.eval_every=0 --set train.log_every=1
expect_output "^model: t5, 2+2 encoder+decoder layers"
first=$(sed -n 's/^step  *1\/12 | loss \([0-9.]*\).*/\1/p' "$work/out")
last=$(sed -n 's/^step 12\/12 | loss \([0-9.]*\).*/\1/p' "$work/out")
awk -v a="$first" -v b="$last" 'BEGIN { exit !(a > 0 && b > 0 && b < a) }' ||
  fail "tiny-t5: loss does not fall ($first -> $last)"
# T5 answers each prompt (its encoder's input), the same with and without the key/value cache.
t5sample=(sample --run-dir "$work/t5run" --prompt "The man went" --prompt "A" --tokens 6
  --temperature 0)
expect_status 0 "T5 sample" -- "$axtrain" "${t5sample[@]}"
expect_output "tokens/s, with the key/value cache"
cached=$("$axtrain" "${t5sample[@]}" 2>/dev/null)
uncached=$("$axtrain" "${t5sample[@]}" --no-cache 2>/dev/null)
[[ -n $cached && $cached == "$uncached" ]] ||
  fail "T5 sample: '$cached' with the cache, '$uncached' without"
expect_status 1 "T5 sample without a prompt" -- "$axtrain" sample --run-dir "$work/t5run"
expect_output "give --prompt TEXT"
expect_status 0 "export T5" -- "$axtrain" export --run-dir "$work/t5run" --output "$work/t5hf"
grep -q '"T5ForConditionalGeneration"' "$work/t5hf/config.json" || fail "export: not T5's config"
expect_status 0 "tiny-t5 from its Hugging Face export" -- "$axtrain" "${t5[@]}" \
  --run-dir "$work/t5ft" --init-from "$work/t5hf" --max-steps 13 --set train.eval_every=0 \
  --set train.log_every=1
expect_output "initialised from Hugging Face t5"
ft_first=$(sed -n 's/^step  *1\/13 | loss \([0-9.]*\).*/\1/p' "$work/out")
awk -v a="$ft_first" -v b="$last" 'BEGIN { exit !(a > 0 && a < b * 1.2) }' ||
  fail "tiny-t5 from its export: first loss $ft_first, the run it came from ended at $last"
expect_status 1 "T5 without sentinels" -- "$axtrain" --experiment tiny-t5 \
  --data "$work/shards/train" --tokenizer "$work/spm.model" --run-dir "$work/t5-nosent"
expect_output "train one with \`ax-data train-tokenizer --extra-ids 100"
expect_status 1 "ENC_SL too short for one span" -- "$axtrain" "${t5[@]}" --run-dir "$work/t5-enc" \
  --set train.encoder_seq_len=1
expect_output "ENC_SL=1"
expect_status 1 "DEC_SL shorter than the targets" -- "$axtrain" "${t5[@]}" \
  --run-dir "$work/t5-dec" --set train.seq_len=4
expect_output "DEC_SL (train.seq_len) = 4 is shorter than the span-corruption targets"

# Fine-tuning (docs/fine-tuning.md): a small learnable task from the same text, the first three
# words of each line as the answer. T5 on seq2seq shards, a GPT on prompt/response shards, both
# packed; the loss (over the answers only) falls.
# loss_falls NAME STEPS: the first and the last progress line's loss in $work/out.
loss_falls() {
  local a b
  a=$(sed -n "s/^step  *1\/$2 | loss \([0-9.]*\).*/\1/p" "$work/out")
  b=$(sed -n "s/^step  *$2\/$2 | loss \([0-9.]*\).*/\1/p" "$work/out")
  awk -v a="$a" -v b="$b" 'BEGIN { exit !(a > 0 && b > 0 && b < 0.8 * a) }' ||
    fail "$1: loss does not fall ($a -> $b)"
}
head -n 400 "$work/train.txt" | awk '{ gsub(/["\\]/, ""); gsub(/[[:cntrl:]]/, " ") }
  NF > 3 { printf "{\"inputs\": \"%s\", \"targets\": \"%s %s %s\"}\n", $0, $1, $2, $3 }' \
  >"$work/task.jsonl"
sed 's/"inputs"/"question"/; s/"targets"/"answer"/' "$work/task.jsonl" >"$work/task-pr.jsonl"
"$axdata" tokenize --format seq2seq --tokenizer "$work/t5.model" --input "$work/task.jsonl" \
  --output "$work/ft-t5" >/dev/null 2>&1 || fail "seq2seq tokenize"
expect_status 0 "tiny-t5 fine-tunes on seq2seq shards" -- "$axtrain" --experiment tiny-t5 \
  --data "$work/ft-t5" --tokenizer "$work/t5.model" --run-dir "$work/ft-t5-run" --max-steps 30 \
  --set train.eval_every=0 --set train.log_every=1 --set optim.lr=3e-3
expect_output "tokens of (inputs, targets) examples, packed"
expect_output "^fine-tuning data: [0-9]* examples in the 120 rows of this process's steps, [0-9]* of them truncated to ENC_SL 64 / DEC_SL 16 tokens, 0 left without a target"
loss_falls "tiny-t5 fine-tuning" 30
# The same from the span-corruption run's Hugging Face export (pretrain, export, fine-tune).
expect_status 0 "tiny-t5 fine-tunes from its pretraining's export" -- "$axtrain" \
  --experiment tiny-t5 --data "$work/ft-t5" --tokenizer "$work/t5.model" \
  --run-dir "$work/ft-t5-init" --init-from "$work/t5hf" --max-steps 30 \
  --set train.eval_every=0 --set train.log_every=1 --set optim.lr=3e-3
expect_output "initialised from Hugging Face t5 $work/t5hf"
loss_falls "tiny-t5 fine-tuning from the export" 30
expect_status 0 "prompt-response tokenize" -- "$axdata" tokenize --format prompt-response \
  --prompt-field question --response-field answer --tokenizer "$work/spm.model" \
  --input "$work/task-pr.jsonl" --output "$work/ft-gpt"
expect_status 0 "tiny-gpt fine-tunes on prompt/response shards" -- "$axtrain" \
  --experiment tiny-gpt --data "$work/ft-gpt" --tokenizer "$work/spm.model" \
  --run-dir "$work/ft-gpt-run" --max-steps 30 --set train.eval_every=0 --set train.log_every=1 \
  --set optim.lr=3e-3
expect_output "tokens of (prompt, response) examples, packed"
loss_falls "tiny-gpt instruction tuning" 30
# The same task as chat conversations in the Llama 3 template, on tiny-llama.
sed 's/^{"inputs": \(.*\), "targets": \(.*\)}$/{"messages": [{"role": "user", "content": \1}, {"role": "assistant", "content": \2}]}/' \
  "$work/task.jsonl" >"$work/chat.jsonl"
expect_status 0 "chat tokenize" -- "$axdata" tokenize --format chat --template llama3 \
  --tokenizer "$work/spm.model" --input "$work/chat.jsonl" --output "$work/ft-chat"
expect_output "conversation(s) rendered with template llama3, 0 bad record(s) skipped"
head -n 1 "$work/ft-chat/rendered/00000-chat.jsonl" |
  grep -q '^{"prompt":"<|begin_of_text|><|start_header_id|>user<|end_header_id|>\\n\\n' ||
  fail "chat: the rendered prompt does not start with the template's header"
expect_status 0 "tiny-llama fine-tunes on chat shards" -- "$axtrain" \
  --experiment tiny-llama --data "$work/ft-chat" --tokenizer "$work/spm.model" \
  --run-dir "$work/ft-chat-run" --max-steps 30 --set train.eval_every=0 --set train.log_every=1 \
  --set optim.lr=3e-3 --set train.seq_len=160
expect_output " 0 left without a target"
loss_falls "tiny-llama chat tuning" 30

# ax-train eval (docs/evaluation.md): the fine-tuned tiny-t5 on MNLI pairs made from the text,
# converted from MultiNLI's jsonl; alone, then as two ranks under ax-launch (the same numbers and
# predictions); Lambada on the fine-tuned tiny-gpt.
head -n 41 "$work/train.txt" | awk '{ gsub(/["\\]/, ""); gsub(/[[:cntrl:]]/, " ") }
  NR > 1 { split("entailment neutral contradiction", l, " ");
           printf "{\"gold_label\": \"%s\", \"pairID\": \"%de\", \"sentence1\": \"%s\", \"sentence2\": \"%s\"}\n", l[NR % 3 + 1], NR, prev, $0 }
  { prev = $0 }' >"$work/multinli.jsonl"
expect_status 0 "convert mnli" -- "$axdata" convert-task --task mnli --input "$work/multinli.jsonl" \
  --output "$work/mnli.jsonl"
expect_status 0 "eval --help" -- "$axtrain" eval --help
expect_output "--max-new-tokens"
expect_status 2 "eval without --task" -- "$axtrain" eval --run-dir "$work/ft-t5-run" \
  --data "$work/mnli.jsonl"
expect_status 0 "eval mnli" -- "$axtrain" eval --run-dir "$work/ft-t5-run" --task mnli \
  --data "$work/mnli.jsonl" --batch 8 --predictions "$work/mnli-one.jsonl"
expect_output "^mnli accuracy [0-9.]* % ([0-9]* of 40)"
one=$(grep '"task":"mnli"' "$work/ft-t5-run/metrics.jsonl" | tail -n 1)
[[ $(wc -l <"$work/mnli-one.jsonl") -eq 40 ]] || fail "eval mnli: not 40 predictions"
if [[ -n $axlaunch ]]; then
  expect_status 0 "eval mnli on two ranks" -- "$axlaunch" --nproc 2 --run-dir "$work/launch-eval" \
    -- "$axtrain" eval --run-dir "$work/ft-t5-run" --task mnli --data "$work/mnli.jsonl" --batch 8 \
    --predictions "$work/mnli-two.jsonl"
  expect_output "split over 2 ranks"
  two=$(grep '"task":"mnli"' "$work/ft-t5-run/metrics.jsonl" | tail -n 1)
  [[ -n $one && $one == "$two" ]] || fail "eval mnli: '$one' alone, '$two' on two ranks"
  cmp -s "$work/mnli-one.jsonl" "$work/mnli-two.jsonl" ||
    fail "eval mnli: two ranks wrote other predictions"
fi
printf '{"text": "%s"}\n' "The man went to the shop and bought some bread" \
  "She opened the door and saw the garden" >"$work/lambada-in.jsonl"
expect_status 0 "convert lambada" -- "$axdata" convert-task --task lambada \
  --input "$work/lambada-in.jsonl" --output "$work/lambada.jsonl"
expect_status 0 "eval lambada" -- "$axtrain" eval --run-dir "$work/ft-gpt-run" --task lambada \
  --data "$work/lambada.jsonl"
expect_output "^lambada accuracy [0-9.]* % ([0-9]* of 2), perplexity"
expect_status 1 "eval lambada on t5" -- "$axtrain" eval --run-dir "$work/ft-t5-run" \
  --task lambada --data "$work/lambada.jsonl"
expect_output "needs a decoder-only model"

# A Hugging Face tokenizer.json everywhere (docs/tokenization.md): the GPT-2 fixture of
# hf_tokenizer_test makes the shards; tiny-gpt trains on them, samples, exports; a Hugging Face
# directory holding the tokenizer.json is --init-from without --tokenizer (the run takes the
# directory's), and eval reads the run's. Shards of one kind are refused with the other.
hf_tok="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/datasets/hf_tokenizer/gpt2.tokenizer.json"
for split in train val; do
  "$axdata" tokenize --tokenizer "$hf_tok" --input "$work/$split.txt" \
    --output "$work/hfshards/$split" >/dev/null 2>&1 || fail "tokenize $split with tokenizer.json"
done
expect_status 0 "train on tokenizer.json shards" -- "$axtrain" --experiment tiny-gpt \
  --data "$work/hfshards/train" --tokenizer "$hf_tok" --run-dir "$work/hfrun" --max-steps 3 \
  --set train.eval_every=3 --set model.vocab_size=0
expect_output "step 3/3 | loss"
expect_output "eval step 3 | val loss"
expect_status 0 "sample with a tokenizer.json" -- "$axtrain" sample --run-dir "$work/hfrun" \
  --prompt "The Lord" --tokens 4 --temperature 0
expect_output "^The Lord"
expect_status 1 "tokenizer.json shards with a SentencePiece model" -- "$axtrain" \
  --experiment tiny-gpt --data "$work/hfshards/train" --tokenizer "$work/spm.model" \
  --run-dir "$work/hf-bad" --max-steps 3
expect_output "(tokenizer.json 'gpt2.tokenizer.json') in the index"
expect_status 0 "export the tokenizer.json run" -- "$axtrain" export --run-dir "$work/hfrun" \
  --output "$work/hfexport"
expect_output "^tokenizer: tokenizer.json"
cmp -s "$hf_tok" "$work/hfexport/tokenizer.json" || fail "export: tokenizer.json is not the run's"
expect_status 1 "sample --tokenizer with more ids than the model's rows" -- "$axtrain" sample \
  --run-dir "$run" --tokenizer "$hf_tok" --prompt "The"
expect_output "has [0-9]* ids, more than the 512 rows of the model's embedding"
expect_status 0 "init from a Hugging Face directory, its tokenizer.json the run's" -- "$axtrain" \
  --experiment tiny-gpt --data "$work/hfshards/train" --run-dir "$work/hfft" \
  --init-from "$work/hfexport" --max-steps 2 --set train.eval_every=0
expect_output "initialised from Hugging Face gpt $work/hfexport"
grep -q "\"tokenizer\": \"$work/hfexport\"" "$work/hfft/config.json" ||
  fail "--init-from: data.tokenizer is not the Hugging Face directory"
expect_status 0 "eval lambada with the run's tokenizer.json" -- "$axtrain" eval \
  --run-dir "$work/hfft" --task lambada --data "$work/lambada.jsonl"
expect_output "^lambada accuracy [0-9.]* % ([0-9]* of 2), perplexity"
expect_status 0 "eval lambada with --tokenizer" -- "$axtrain" eval --run-dir "$work/hfft" \
  --task lambada --data "$work/lambada.jsonl" --tokenizer "$hf_tok"
expect_output "^lambada accuracy [0-9.]* % ([0-9]* of 2), perplexity"
rm "$work/hfexport/tokenizer.json"
expect_status 2 "init from a Hugging Face directory without a tokenizer" -- "$axtrain" \
  --experiment tiny-gpt --data "$work/hfshards/train" --run-dir "$work/hf-none" \
  --init-from "$work/hfexport"
expect_output "holds no tokenizer.json, tokenizer.model or spiece.model"

# A rank of a two-rank job without the job secret: it fails at once and says why.
SECONDS=0
expect_status 1 "a rank without a job secret" -- env -u AX_JOB_SECRET AX_RANK=1 AX_WORLD_SIZE=2 \
  AX_COORDINATOR=127.0.0.1:1 "$axtrain" "${common[@]}" --run-dir "$work/no-secret"
expect_output "rank 1 of 2 has no job secret (AX_JOB_SECRET is not set)"
expect_output "outside ax's launch path"
((SECONDS < 10)) || fail "the rank without a secret took ${SECONDS} s to fail"

# secret_stays_private WHAT [SECRET]: two ranks under ax-launch, given SECRET or making their own
# (read back from a rank's /proc/PID/environ while it trains). The secret must be in the ranks'
# environment and nowhere else: not in any process's command line (ps), the console, the rank
# logs, metrics.jsonl, config.json, TensorBoard events or checkpoints.
secret_stays_private() {
  local what=$1 secret=${2:-} dir="$work/secret-$1" pid child seen=""
  mkdir -p "$dir"
  if [[ -n $secret ]]; then
    AX_JOB_SECRET=$secret "$axlaunch" --nproc 2 --run-dir "$dir/launch" -- "$axtrain" \
      "${common[@]}" --run-dir "$dir/run" --max-steps 40 --set train.checkpoint_every=10 \
      --set train.log_every=1 >"$dir/console.out" 2>&1 &
  else
    env -u AX_JOB_SECRET "$axlaunch" --nproc 2 --run-dir "$dir/launch" -- "$axtrain" \
      "${common[@]}" --run-dir "$dir/run" --max-steps 40 --set train.checkpoint_every=10 \
      --set train.log_every=1 >"$dir/console.out" 2>&1 &
  fi
  pid=$!
  for _ in $(seq 1 400); do
    for child in $(pgrep -P "$pid"); do
      seen=$(tr '\0' '\n' <"/proc/$child/environ" 2>/dev/null | sed -n 's/^AX_JOB_SECRET=//p')
      [[ -n $seen ]] && break 2
    done
    sleep 0.05
  done
  ps -eo pid,args >"$dir/ps.txt" 2>&1
  ps auxww >>"$dir/ps.txt" 2>&1
  wait "$pid" || fail "$what: ax-launch exited $?"
  if [[ -z $seen ]]; then
    fail "$what: no rank's environment held AX_JOB_SECRET"
    return
  fi
  [[ -z $secret || $seen == "$secret" ]] || fail "$what: the ranks got another secret"
  [[ $seen =~ ^[0-9a-f]{64}$ ]] || fail "$what: the secret is not 64 hex digits"
  grep -q "step 40/40" "$dir/console.out" || fail "$what: the run did not finish"
  [[ -f $dir/run/metrics.jsonl && -f $dir/run/config.json ]] || fail "$what: run files missing"
  local leaks
  leaks=$(grep -rl -- "$seen" "$dir" 2>/dev/null)
  [[ -z $leaks ]] || fail "$what: the secret is written in: $leaks"
  grep -q "ax-train" "$dir/ps.txt" || fail "$what: ps did not list the ranks"
}
if [[ -n $axlaunch ]]; then
  secret_stays_private given "$(od -An -vtx1 -N32 /dev/urandom | tr -d ' \n')"
  secret_stays_private made
fi

# The pipeline's bubble (issue 25): two stages under ax-launch log pipeline_wait (their mean
# waiting fraction) at each progress line and write the trace of step 3, which `ax-train
# timeline` draws one stage per row and as SVG; a run without a trace is refused naming the key.
# (train.global_batch=8: what two ranks of PERCORE 4 make, stated so that the one-process run
# below trains the same batches.)
pipe_flags=(--max-steps 4 --set NUM_MICROBATCHES=4 --set train.global_batch=8
  --set train.log_every=1 --set train.checkpoint_every=0)
pipe_mesh=(--nproc 2 --mesh "ici=2,1,1,1,1;dcn=1,1,1,1,1")
if [[ -n $axlaunch ]]; then
  pdir="$work/pipeline"
  expect_status 0 "two pipeline stages" -- env AX_CPU_THREADS=1 "$axlaunch" "${pipe_mesh[@]}" \
    --run-dir "$pdir/launch" -- "$axtrain" "${common[@]}" --run-dir "$pdir/run" "${pipe_flags[@]}" \
    --set train.pipeline_trace_step=3
  expect_output "| bubble "
  waits=$(grep -o '"pipeline_wait":[0-9.e-]*' "$pdir/run/metrics.jsonl" | cut -d: -f2)
  [[ $(wc -w <<<"$waits") -eq 4 ]] || fail "metrics.jsonl has $(wc -w <<<"$waits") pipeline_wait records, want 4"
  for w in $waits; do
    awk -v w="$w" 'BEGIN { exit !(w > 0 && w < 1) }' || fail "pipeline_wait $w is not inside (0, 1)"
  done
  [[ -f $pdir/run/pipeline_trace/step_3/rank_0.txt && -f $pdir/run/pipeline_trace/step_3/rank_1.txt ]] ||
    fail "no trace of step 3 for both ranks"
  expect_status 0 "ax-train timeline" -- "$axtrain" timeline "$pdir/run" --width 40 --svg "$pdir/t.svg"
  expect_output "^step 3, 2 stage(s)"
  expect_output "^stage 0 (rank 0) |[0-9a-z. ]\{40\}| waiting [0-9.]* %$"
  expect_output "^stage 1 (rank 1) |[0-9a-z. ]\{40\}| waiting [0-9.]* %$"
  expect_output "^mean waiting: [0-9.]* % of the step$"
  grep -q '<rect ' "$pdir/t.svg" || fail "the SVG timeline has no boxes"
  expect_status 1 "timeline of a run without a trace" -- "$axtrain" timeline "$work/no-secret"
  expect_output "a pipelined run writes one at step train.pipeline_trace_step"
  expect_status 1 "timeline of a step not traced" -- "$axtrain" timeline "$pdir/run" --step 2
  expect_output "no pipeline trace of step 2"
fi

# eval, sample and export on a pipelined run's checkpoint (issue 25): each stage saved its layers
# under the whole model's names, and the subcommands load them whole by name. Against the same
# commands on the checkpoint of one process trained with the same config, seed and data:
#  - tiny-llama (untied, optim.grad_clip=0): bit for bit. A stage runs one process's layers and
#    micro-batch order, so the weights are the same bits, the export byte for byte, the Lambada
#    record and predictions the same and the samples the same text. (With clipping, the norm
#    that scales the update is summed over the stages in f32, which may move a weight by an ulp.)
#  - tiny-gpt (the run above; its tied table is on both ends): not bit for bit, since the two
#    ends' gradients of the table are added after the step where one process adds them micro-batch
#    by micro-batch, and the clip factor's norm is summed in f32 over the stages: weights differ
#    by f32 ulps (an attention bias, whose key part has only rounding noise for a gradient, by up
#    to 8e-5 of its rms, as Adam normalises that noise; every other tensor by 1.3e-7 at most).
#    Held: the Lambada perplexities within 1e-6 relative (measured 6e-8), the same predictions,
#    the same greedy and seeded samples, the export's header (names, dtypes, shapes, offsets),
#    config.json and tokenizer byte for byte and every tensor's rms difference within 1e-3 of its
#    rms (a tensor missing, zero or in another layer's place is 1 or more).
# lambada_record RUN: the last Lambada record of the run's metrics.jsonl.
lambada_record() { grep '"task":"lambada"' "$1/metrics.jsonl" | tail -n 1; }
# subcommands_on TAG RUN: eval, samples and export of RUN's newest checkpoint into $pdir/TAG.*.
subcommands_on() {
  local tag=$1 run=$2
  expect_status 0 "eval lambada on $tag" -- "$axtrain" eval --run-dir "$run" --task lambada \
    --data "$work/lambada.jsonl" --predictions "$pdir/$tag.predictions.jsonl"
  lambada_record "$run" >"$pdir/$tag.lambada"
  { "$axtrain" sample --run-dir "$run" --prompt "The" --tokens 24 --temperature 0 &&
    "$axtrain" sample --run-dir "$run" --prompt "The" --prompt "A" --tokens 24 --seed 3; } \
    >"$pdir/$tag.samples" 2>"$pdir/$tag.sample-log" || fail "sample on $tag"
  expect_status 0 "export $tag" -- "$axtrain" export --run-dir "$run" --output "$pdir/$tag.hf"
}
# tensors_close A B: two safetensors files with the same header whose tensors each differ by at
# most 1e-3 of their rms (prints the largest difference).
tensors_close() {
  python3 - "$1" "$2" <<'PY'
import array, json, math, struct, sys
def load(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    return b[8:8 + n], json.loads(b[8:8 + n]), b[8 + n:]
raw_p, head, data_p = load(sys.argv[1])
raw_1, _, data_1 = load(sys.argv[2])
if raw_p != raw_1:
    sys.exit("the headers differ")
worst, name = 0.0, ""
for k, v in head.items():
    if k == "__metadata__":
        continue
    assert v["dtype"] == "F32", (k, v["dtype"])
    s, e = v["data_offsets"]
    p, o = array.array("f"), array.array("f")
    p.frombytes(data_p[s:e])
    o.frombytes(data_1[s:e])
    rms = math.sqrt(sum(x * x for x in o) / len(o))
    diff = math.sqrt(sum((x - y) ** 2 for x, y in zip(p, o)) / len(o))
    if rms == 0 or diff > 1e-3 * rms:
        sys.exit("%s: rms difference %g, rms %g" % (k, diff, rms))
    if diff / rms > worst:
        worst, name = diff / rms, k
print("export: largest rms difference %.3g of the tensor's rms (%s)" % (worst, name))
PY
}
if [[ -n $axlaunch ]]; then
  SECONDS=0
  expect_status 0 "one process, the pipelined run's config" -- env AX_CPU_THREADS=1 "$axtrain" \
    "${common[@]}" --run-dir "$pdir/one" "${pipe_flags[@]}"
  subcommands_on gpt-pipelined "$pdir/run"
  subcommands_on gpt-one "$pdir/one"
  [[ -s $pdir/gpt-one.lambada ]] || fail "no Lambada record of the one-process run"
  read -r ppl_p tok_p < <(sed 's/.*"ppl":\([^,]*\),"token_ppl":\([^,]*\),.*/\1 \2/' "$pdir/gpt-pipelined.lambada")
  read -r ppl_1 tok_1 < <(sed 's/.*"ppl":\([^,]*\),"token_ppl":\([^,]*\),.*/\1 \2/' "$pdir/gpt-one.lambada")
  awk -v a="$ppl_p" -v b="$ppl_1" -v c="$tok_p" -v d="$tok_1" 'function rel(x, y) {
      return (x > y ? x - y : y - x) / y }
    BEGIN { exit !(b > 0 && d > 0 && rel(a, b) <= 1e-6 && rel(c, d) <= 1e-6) }' ||
    fail "Lambada on the pipelined checkpoint: ppl $ppl_p, per token $tok_p; one process: $ppl_1, $tok_1"
  cmp -s <(sed 's/,"nll":[^}]*//' "$pdir/gpt-pipelined.predictions.jsonl") \
    <(sed 's/,"nll":[^}]*//' "$pdir/gpt-one.predictions.jsonl") ||
    fail "Lambada predictions differ between the pipelined and the one-process checkpoint"
  grep -q '^The.' "$pdir/gpt-one.samples" || fail "sample: no continued prompt: $(cat "$pdir/gpt-one.samples")"
  cmp -s "$pdir/gpt-pipelined.samples" "$pdir/gpt-one.samples" ||
    fail "samples differ: $(cat "$pdir/gpt-pipelined.samples") / $(cat "$pdir/gpt-one.samples")"
  for f in config.json tokenizer.model; do
    cmp -s "$pdir/gpt-pipelined.hf/$f" "$pdir/gpt-one.hf/$f" || fail "export: $f differs"
  done
  tensors_close "$pdir/gpt-pipelined.hf/model.safetensors" "$pdir/gpt-one.hf/model.safetensors" ||
    fail "export of the pipelined checkpoint: tensors not within 1e-3 of the one-process run's"

  llama=(--experiment tiny-llama --data "$work/shards/train" --tokenizer "$work/spm.model"
    "${pipe_flags[@]}" --set optim.grad_clip=0)
  expect_status 0 "tiny-llama on two pipeline stages" -- env AX_CPU_THREADS=1 "$axlaunch" \
    "${pipe_mesh[@]}" --run-dir "$pdir/llama-launch" -- "$axtrain" "${llama[@]}" \
    --run-dir "$pdir/llama-run"
  expect_status 0 "tiny-llama on one process" -- env AX_CPU_THREADS=1 "$axtrain" "${llama[@]}" \
    --run-dir "$pdir/llama-one"
  subcommands_on llama-pipelined "$pdir/llama-run"
  subcommands_on llama-one "$pdir/llama-one"
  [[ -s $pdir/llama-one.lambada ]] || fail "no Lambada record of the one-process tiny-llama run"
  for f in lambada predictions.jsonl samples hf/model.safetensors hf/config.json; do
    cmp -s "$pdir/llama-pipelined.$f" "$pdir/llama-one.$f" ||
      fail "tiny-llama: $f of the pipelined checkpoint differs from one process's"
  done

  # tiny-t5 on two stages under ax-launch (issue 25; its stages split by cost: encoder layer 0 |
  # encoder layer 1 and the decoder, the memory passed along): a greedy answer and the export of
  # its checkpoint against one process's (weights within f32 ulps: the tables' gradients are
  # summed over their stages after the step, the clip factor's norm in f32).
  t5pipe=("${t5[@]}" "${pipe_flags[@]}")
  expect_status 0 "tiny-t5 on two pipeline stages" -- env AX_CPU_THREADS=1 "$axlaunch" \
    "${pipe_mesh[@]}" --run-dir "$pdir/t5-launch" -- "$axtrain" "${t5pipe[@]}" \
    --run-dir "$pdir/t5-run"
  expect_output "pipeline stage 1: activations of at most"
  expect_status 0 "tiny-t5 on one process" -- env AX_CPU_THREADS=1 "$axtrain" "${t5pipe[@]}" \
    --run-dir "$pdir/t5-one"
  for tag in t5-run t5-one; do
    "$axtrain" sample --run-dir "$pdir/$tag" --prompt "The quick brown fox" --tokens 12 \
      --temperature 0 >"$pdir/$tag.samples" 2>"$pdir/$tag.sample-log" || fail "sample on $tag"
    expect_status 0 "export $tag" -- "$axtrain" export --run-dir "$pdir/$tag" --output "$pdir/$tag.hf"
  done
  [[ -s $pdir/t5-one.samples ]] || fail "tiny-t5: no answer sampled"
  cmp -s "$pdir/t5-run.samples" "$pdir/t5-one.samples" ||
    fail "tiny-t5 answers differ: $(cat "$pdir/t5-run.samples") / $(cat "$pdir/t5-one.samples")"
  tensors_close "$pdir/t5-run.hf/model.safetensors" "$pdir/t5-one.hf/model.safetensors" ||
    fail "tiny-t5: export of the pipelined checkpoint not within 1e-3 of the one-process run's"
  echo "eval, sample and export on pipelined checkpoints: ${SECONDS} s"
fi

# An `auto` mesh's split from the plan (docs/plan.md "srun --ax-mesh=auto and ax-launch"): two
# ranks under `ax-launch --mesh auto` planned as if on H100s train on the layout `ax-train plan`
# ranks first for the same job (data 2 for tiny-gpt, where the topology's split is fsdp 2), keep
# a spec's tp=, and AX_PLAN=0 or a CPU rank without AX_PLAN_GPU keep the topology's split.
if [[ -n $axlaunch ]]; then
  adir="$work/auto-mesh"
  auto_flags=(--max-steps 2 --set train.checkpoint_every=0 --set train.eval_every=0)
  expect_status 0 "ax-train plan for two H100s" -- "$axtrain" plan --experiment tiny-gpt \
    --tokenizer "$work/spm.model" --nodes 1 \
    --gpus-per-node 2 --gpu H100-80GB --format env --set NUM_MICROBATCHES=1
  want_ici=$(sed -n 's/^AX_PLAN_ICI=//p' "$work/out")
  [[ -n $want_ici ]] || fail "ax-train plan --format env printed no AX_PLAN_ICI"
  # auto_mesh NAME SPEC WANT_LINE WANT_MESH [ENV...]
  auto_mesh() {
    local name=$1 spec=$2 line=$3 mesh=$4
    shift 4
    expect_status 0 "ax-launch --mesh $spec ($name)" -- env AX_CPU_THREADS=1 "$@" "$axlaunch" \
      --nproc 2 --mesh "$spec" --run-dir "$adir/$name-launch" -- "$axtrain" "${common[@]}" \
      --run-dir "$adir/$name" "${auto_flags[@]}"
    expect_output "$line"
    expect_output "; mesh $mesh (this rank"
  }
  auto_mesh planned auto "mesh auto: planned data 2 fsdp 1 tensor 1 (ICI_MESH_SHAPE=\[$want_ici\]" \
    "data=2 fsdp=1 tensor=1" AX_PLAN_GPU=H100-80GB
  [[ $want_ici == 2,1,1 ]] || fail "ax-train plan ranks $want_ici first, the test expects 2,1,1"
  auto_mesh tp auto:tp=2 "mesh auto:tp=2: planned data 1 fsdp 1 tensor 2" "data=1 fsdp=1 tensor=2" \
    AX_PLAN_GPU=H100-80GB
  auto_mesh off auto "mesh auto: not planned (AX_PLAN=0), the topology's split ici=1,2,1" \
    "data=1 fsdp=2 tensor=1" AX_PLAN_GPU=H100-80GB AX_PLAN=0
  auto_mesh cpu auto "mesh auto: not planned (CPU ranks; AX_PLAN_GPU=" "data=1 fsdp=2 tensor=1"
fi

if [[ $failures -gt 0 ]]; then
  echo "$failures failure(s)" >&2
  exit 1
fi
echo "ax-train CLI: all checks passed"
