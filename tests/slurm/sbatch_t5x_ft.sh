#!/usr/bin/env bash
# shellcheck disable=SC2034  # `vars` is read by submit_sub (sbatch_lib.sh)
# T5x's fine-tuning scripts and Pax's Lambada script on the cluster (issue 14), tiny configs on CPU
# ranks:
# - tiny-t5 pretrains 6 steps through example_slurm_pretrain_pile.sub;
# - a small MNLI written in GLUE's tsv (the label follows from the hypothesis: the premise itself,
#   "It is not true that" + the premise, or another line), converted with `ax-data convert-task`
#   and tokenized to seq2seq shards in BASE_TFDS_DATA_DIR/mnli2/{train,validation};
# - `sbatch -N 2 example_slurm_ft_frompile.sub 2` with FT_TASK=mnli2 and BASE_CHECKPOINTS_DIR the
#   pretraining run: COMPLETED 0:0, the weights come from its checkpoint, T5x's output folder
#   (mnli2-small-...), dropout 0.1, the loss falls, validation losses and MNLI accuracy
#   (validation.jsonl in the task directory) in metrics.jsonl;
# - preemption: USR1 at step 8 -> checkpoint -> requeue -> the fine-tuning run resumes from its own
#   checkpoint (not from BASE_CHECKPOINTS_DIR again) with the uninterrupted job's losses;
# - singlenode_ft_frompile.sh under srun -N 1 with T5x's positional arguments, on MNLI and on a
#   small SQuAD written in its v1.1 JSON (EM/F1 record);
# - run_lambada_singlenode.sh on a tiny GPT run (run_pile_singlenode.sh): 2 ranks score 40 texts,
#   the Lambada record lands in LOGDIR/metrics.jsonl.
#   sbatch_t5x_ft.sh BUILD_DIR REPO_DIR
source "$(dirname "$0")/lib.sh" "$@"
source "$(dirname "$0")/train_lib.sh"
source "$(dirname "$0")/sbatch_lib.sh"
require_cluster
dir="$(scratch)"
prepare_data "$dir/data" 100
ws="$dir/ws"

# --- pretraining ---------------------------------------------------------------------------------
mapfile -t vars < <(t5x_env "$dir" runs/pre TRAIN_STEPS=6)
id="$(submit_sub "$dir/pre.out" -N 1 "$SUB_DIR/example_slurm_pretrain_pile.sub" 2)"
end_job "$id" 90
if ! job_completed "tiny-t5 pretraining, 6 steps" "$id" "$dir/pre.out" "$dir/pre.out"; then
  finish
  exit
fi

# --- the task's data ---------------------------------------------------------------------------
# GLUE's MNLI tsv columns; 360 pairs from the corpus's lines, 300 to train on, 60 to validate.
awk 'BEGIN { OFS = "\t"; print "index", "promptID", "pairID", "genre", "sentence1_binary_parse",
        "sentence2_binary_parse", "sentence1_parse", "sentence2_parse", "sentence1", "sentence2",
        "label1", "gold_label" }
  length($0) > 30 && length($0) < 120 && !/\t/ {
    n++; k = n % 3
    if (k == 0) { h = $0; l = "entailment" }
    else if (k == 1) { h = "It is not true that " $0; l = "contradiction" }
    else { h = prev; l = "neutral" }
    print n, n, n "e", "fiction", "()", "()", "()", "()", $0, h, l, l
    prev = $0
    if (n >= 360) exit
  }' "$dir/data/text.txt" >"$dir/mnli.tsv"
task="$dir/ft/mnli2"
if "$AX_DATA" convert-task --task mnli --input "$dir/mnli.tsv" --output "$dir/mnli.jsonl" \
  >"$dir/ftdata.log" 2>&1 && head -n 300 "$dir/mnli.jsonl" >"$dir/train.jsonl" &&
  tail -n 60 "$dir/mnli.jsonl" >"$dir/validation.jsonl" &&
  "$AX_DATA" tokenize --format seq2seq --tokenizer "$dir/data/spm.model" \
    --input "$dir/train.jsonl" --output "$task/train" --threads 1 >>"$dir/ftdata.log" 2>&1 &&
  "$AX_DATA" tokenize --format seq2seq --tokenizer "$dir/data/spm.model" \
    --input "$dir/validation.jsonl" --output "$task/validation" --threads 1 >>"$dir/ftdata.log" 2>&1
then
  ok "a GLUE-format MNLI: convert-task (360 pairs) and seq2seq shards in mnli2/train, validation"
else
  bad "making the MNLI shards"
  show_tail "$dir/ftdata.log"
  finish
  exit
fi

# ft_env MODEL_DIR STEPS [VAR=VALUE...]: a tiny fine-tuning job's variables on top of t5x_env's.
ft_env() {
  local model_dir="$1" steps="$2"
  shift 2
  t5x_env "$dir" "$model_dir" "BASE_TFDS_DATA_DIR=$dir/ft" "BASE_CHECKPOINTS_DIR=$ws/runs/pre" \
    "TRAIN_STEPS=$steps" ENC_SL=128 DEC_SL=8 "$@"
}
sub="$SUB_DIR/example_slurm_ft_frompile.sub"
steps=30
folder="$dir/outputs/multinode/mnli2-small-bfloat16-N2-n4-BS4-MBS1-SL128_8-TP1-FP80"

# --- fine-tuning -------------------------------------------------------------------------------
# validation.jsonl in the task directory: MNLI accuracy at each validation (train.eval_task).
cp "$dir/validation.jsonl" "$task/validation.jsonl"
mapfile -t vars < <(ft_env runs/mnli "$steps" \
  "AX_TRAIN_ARGS=--device=cpu --set=optim.lr=0.003 --set=train.eval_every=10 --set=train.eval_batches=2")
id="$(submit_sub "$dir/ft.out" -N 2 "$sub" 2)"
end_job "$id" 120
out0="$folder/output-$id-0.txt"
job_completed "sbatch -N 2 example_slurm_ft_frompile.sub 2 (FT_TASK=mnli2)" "$id" "$dir/ft.out" \
  "$out0"
run="$ws/runs/mnli"
expect_files "fine-tuning outputs" "$run/metrics.jsonl" \
  "$run/checkpoints/step_$(printf %08d "$steps")/COMMIT" "$out0" "$folder/output-$id-3.txt"
if grep -q "initialised from ax checkpoint $ws/runs/pre/checkpoints/step_00000006" "$out0" &&
  grep -q '"dropout": 0.1' "$run/config.json" && grep -q '"pack_seq2seq": false' "$run/config.json"; then
  ok "the weights of BASE_CHECKPOINTS_DIR's step 6, dropout 0.1, unpacked (PACK=0)"
else
  bad "fine-tuning did not start as the recipe says: $(grep -o 'initialised from.*' "$out0")"
fi
loss_falls "fine-tuning on MNLI" "$run"
n_val="$(grep -c '"val_loss"' "$run/metrics.jsonl")"
if ((n_val == steps / 10)); then
  ok "validation loss every 10 steps on mnli2/validation ($n_val records)"
else
  bad "$n_val validation records in $run/metrics.jsonl, want $((steps / 10))"
fi

n_mnli="$(grep -c '"task":"mnli"' "$run/metrics.jsonl")"
if ((n_mnli == steps / 10)) && [[ -f "$run/predictions/mnli_step_$steps.jsonl" ]] &&
  grep -q "mnli2: mnli metrics on $task/validation.jsonl" "$dir/ft.out"; then
  ok "MNLI accuracy on validation.jsonl at each validation ($n_mnli records, predictions)"
else
  bad "$n_mnli MNLI records in $run/metrics.jsonl, want $((steps / 10)), and the predictions"
fi
# Without the file, validation loss only (the rest of the test runs so).
rm -f "$task/validation.jsonl"

# --- preemption --------------------------------------------------------------------------------
# Long enough that the signal, sent at step 8, reaches the ranks well before the last step.
psteps=150
pargs="AX_TRAIN_ARGS=--device=cpu --set=train.eval_every=0"
# The uninterrupted job runs beside the preempted one (reference_start).
mapfile -t vars < <(ft_env runs/reference "$psteps" "$pargs")
reference_start "the uninterrupted fine-tuning job" "$ws/runs/reference" "$dir/reference.out" \
  "$folder/output-%j-0.txt" -N 2 "$sub" 2
mapfile -t vars < <(ft_env runs/preempted "$psteps" "$pargs")
preempt_resume srun "$psteps" - "$ws/runs/preempted" "$folder/output-%j-0.txt" \
  "$dir/preempted.out" -N 2 "$sub" 2
reference_wait

# --- one node: singlenode_ft_frompile.sh ----------------------------------------------------------
# <FT_TASK> <T5_SIZE> <PREC> <NUM_GPUS> <BSIZE_PER_GPU> <LOG_DIR> <MODEL_DIR_LOCAL>: the weights of
# runs/pre, fine-tuned in runs/pre_mnli2.
(
  cd "$ws" || exit 1
  AX_CPU_THREADS=1 AX_BIN="$BUILD" CONFIG=tiny-t5 TRAIN_STEPS=12 ENC_SL=128 DEC_SL=8 \
    TFDS_DATA_DIR="$dir/ft" VOCAB_PATH="$dir/data/spm.model" \
    AX_TRAIN_ARGS="--device=cpu --set=optim.lr=0.003 --set=train.eval_every=0" \
    t srun -J "$JOB" -N 1 bash "$SUB_DIR/singlenode_ft_frompile.sh" mnli2 small bfloat16 2 4 \
    ftlogs runs/pre >"$dir/single.out" 2>&1
)
rc=$?
log="$ws/ftlogs/ft_small_gpu_2_bfloat16_gbs_8_fp8_0_fuseqkv_1_transbs_1.log"
if ((rc == 0)) && grep -q 'Run succeeded!' "$dir/single.out" && grep -q 'done: step 12' "$log" &&
  grep -q "initialised from ax checkpoint $ws/runs/pre/checkpoints/step_00000006" "$log"; then
  ok "singlenode_ft_frompile.sh mnli2 small bfloat16 2 4 ftlogs runs/pre: exit 0, T5x's log name"
else
  bad "singlenode_ft_frompile.sh exited $rc"
  show_tail "$dir/single.out"
fi
expect_files "single node: the run beside MODEL_DIR_LOCAL" "$ws/runs/pre_mnli2/metrics.jsonl" \
  "$ws/runs/pre_mnli2/checkpoints/step_00000012/COMMIT" "$ws/runs/pre_mnli2/logs/rank_1.log"
loss_falls "single node fine-tuning" "$ws/runs/pre_mnli2"

# SQuAD v1.1 through the single-node script: a file in SQuAD's JSON (the question asks for the
# first word of its context line), convert-task, shards in squad1/, the EM/F1 record.
python3 - "$dir/data/text.txt" "$dir/squad.json" <<'PY'
import json, sys
lines = [l.strip() for l in open(sys.argv[1]) if 40 < len(l.strip()) < 120 and l[0].isalpha()]
qas = lambda i, l: [{"id": "q%d" % i, "question": "What is the first word?",
                     "answers": [{"text": l.split()[0], "answer_start": 0}]}]
paragraphs = [{"context": l, "qas": qas(i, l)} for i, l in enumerate(lines[:120])]
json.dump({"version": "1.1", "data": [{"title": "docs", "paragraphs": paragraphs}]},
          open(sys.argv[2], "w"))
PY
squad="$dir/ft/squad1"
if "$AX_DATA" convert-task --task squad --input "$dir/squad.json" --output "$dir/squad.jsonl" \
  >"$dir/squad.log" 2>&1 && head -n 100 "$dir/squad.jsonl" >"$dir/squad_train.jsonl" &&
  mkdir -p "$squad" && tail -n 20 "$dir/squad.jsonl" >"$squad/validation.jsonl" &&
  "$AX_DATA" tokenize --format seq2seq --tokenizer "$dir/data/spm.model" \
    --input "$dir/squad_train.jsonl" --output "$squad/train" --threads 1 >>"$dir/squad.log" 2>&1; then
  (
    cd "$ws" || exit 1
    AX_CPU_THREADS=1 AX_BIN="$BUILD" CONFIG=tiny-t5 TRAIN_STEPS=10 ENC_SL=64 DEC_SL=16 \
      TFDS_DATA_DIR="$dir/ft" VOCAB_PATH="$dir/data/spm.model" \
      AX_TRAIN_ARGS="--device=cpu --set=train.eval_every=10" \
      t srun -J "$JOB" -N 1 bash "$SUB_DIR/singlenode_ft_frompile.sh" squad1 small bfloat16 2 4 \
      ftlogs runs/pre >"$dir/squad.out" 2>&1
  )
  rc=$?
  if ((rc == 0)) && grep -q '"task":"squad".*"exact_match".*"examples":20' \
    "$ws/runs/pre_squad1/metrics.jsonl"; then
    ok "singlenode_ft_frompile.sh squad1: exit 0, SQuAD EM/F1 of 20 questions in runs/pre_squad1"
  else
    bad "singlenode_ft_frompile.sh squad1 exited $rc"
    show_tail "$dir/squad.out"
  fi
else
  bad "making the SQuAD shards"
  show_tail "$dir/squad.log"
fi

# --- Lambada -----------------------------------------------------------------------------------
# A tiny GPT pretrains 8 steps through run_pile_singlenode.sh, then run_lambada_singlenode.sh scores
# it on 40 texts in OpenAI's jsonl made from the corpus.
gpt="$dir/gptlogs"
AX_CPU_THREADS=1 AX_BIN="$BUILD" CONFIG=tiny-gpt MAX_STEPS=8 \
  AX_TRAIN_ARGS="--device=cpu --set=train.eval_every=0" t srun -J "$JOB" -N 1 \
  bash "$SUB_DIR/run_pile_singlenode.sh" "$dir/data/shards" "$dir/data/spm.model" bfloat16 2 4 \
  "$gpt" >"$dir/gpt.out" 2>&1 || bad "run_pile_singlenode.sh (the GPT to evaluate) failed"
awk 'length($0) > 60 && !/[|`#"\\]/ { printf "{\"text\": \"%s\"}\n", $0; if (++n >= 40) exit }' \
  "$dir/data/text.txt" >"$dir/lambada_test.jsonl"
mkdir -p "$dir/lambada"
"$AX_DATA" convert-task --task lambada --input "$dir/lambada_test.jsonl" \
  --output "$dir/lambada/lambada.jsonl" >"$dir/lambada.log" 2>&1 || bad "convert-task lambada"
AX_CPU_THREADS=1 AX_BIN="$BUILD" t srun -J "$JOB" -N 1 \
  bash "$SUB_DIR/run_lambada_singlenode.sh" "$dir/lambada" "$dir/data/spm.model" bfloat16 2 4 \
  "$gpt" >"$dir/lambada.out" 2>&1
rc=$?
if ((rc == 0)) && grep -q '"task":"lambada".*"examples":40' "$gpt/metrics.jsonl" &&
  [[ -f "$gpt/predictions/lambada_step_8.jsonl" ]] && [[ -f "$gpt/lambada_output.log" ]] &&
  grep -q 'split over 2 ranks' "$gpt/lambada_output.log"; then
  ok "run_lambada_singlenode.sh: 40 texts scored by 2 ranks, the record in LOGDIR/metrics.jsonl"
else
  bad "run_lambada_singlenode.sh exited $rc"
  show_tail "$dir/lambada.out"
fi
finish
