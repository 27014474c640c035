#!/usr/bin/env bash
# shellcheck disable=SC2034  # `vars` is read by submit_sub (sbatch_lib.sh)
# Pipeline stages and the seq axis through the job scripts. Three jobs, each uninterrupted, then
# the same job preempted (USR1 to the batch script) → every rank checkpoints at one step →
# requeued → restart 1 resumes and logs exactly the uninterrupted job's losses (CPU ranks are
# bit-exact): example_fuji.sub with AXLearn's DCN_PP=2 (issue 25: tiny-llama's two stages on two
# nodes, ICI_TP=2 inside each, 1F1B over GA=4 micro-batches); with ICI_SQP=2 DCN_DP=2 (issue 26:
# each row split over a node's two ranks); example_pile.sub with the Pax script's NUM_STAGES=2.
# Then four stages (ICI_PP=2 x DCN_PP=2, 4 layers) with the middle stage on the second node
# (rank 2) killed -9: the job fails within seconds, naming the rank, its host and its stage.
#   sbatch_fuji_pp.sh BUILD_DIR REPO_DIR
source "$(dirname "$0")/lib.sh" "$@"
source "$(dirname "$0")/train_lib.sh"
source "$(dirname "$0")/sbatch_lib.sh"
require_cluster
dir="$(scratch)"
prepare_data "$dir/data"
ws="$dir/ws"
# Each job's step count (set before each configuration below): long enough that the USR1 sent at
# step 8 stops the ranks well before the last step also on a loaded machine.
steps=200
# fuji_env TRAINER_DIR: the job's variables (the run directory relative to the workspace).
fuji_env() {
  vars=(AX_CPU_THREADS=1 "AX_BIN=$BUILD" "BASE_WORKSPACE_DIR=$ws"
    "BASE_TFDS_DATA_DIR=$dir/data/shards" "BASE_VOCAB_PATH=$dir/data/spm.model" CONFIG=tiny-llama
    GPUS_PER_NODE=2 DCN_PP=2 ICI_TP=2 GA=4 GBS=16 SEQ_LEN=32 "MAX_STEPS=$steps"
    "TRAINER_DIR=$1" "AX_TRAIN_ARGS=--device=cpu --set=train.eval_every=0")
}

# seq_env TRAINER_DIR: the fuji job with ICI_SQP=2 DCN_DP=2 instead (issue 26): each row's
# positions split over a node's two ranks.
seq_env() {
  fuji_env "$1"
  vars=("${vars[@]/DCN_PP=2/ICI_SQP=2}")
  vars=("${vars[@]/ICI_TP=2/DCN_DP=2}")
}
# pax_env TRAINER_DIR: example_pile.sub with the Pax script's NUM_STAGES=2 in Pax's form, both
# shapes five-number with ICI[0] x DCN[0] = NUM_STAGES (tiny-gpt, tied embeddings: a stage per
# node, data 2 inside; alone, NUM_STAGES would give auto:pp=2, FSDP inside the node), 4
# micro-batches.
pax_env() {
  mapfile -t vars < <(sub_env "$dir" "$1" "MAX_STEPS=$steps" "ICI_MESH_SHAPE=[1,2,1,1,1]" \
    "DCN_MESH_SHAPE=[2,1,1,1,1]" NUM_STAGES=2 "AX_TRAIN_ARGS=--device=cpu \
--set=train.eval_every=0 --set=train.checkpoint_every=0 --set=train.num_microbatches=4")
}

# reference_and_preempted WHAT NAME ENV SCRIPT MESH: job SCRIPT with the variables ENV gives,
# uninterrupted (logs/NAME-reference): it completes, its mesh line shows MESH and its loss falls;
# the same job preempted by USR1, requeued and resumed (logs/NAME-preempted), run beside it
# (reference_start), logs exactly the uninterrupted job's losses.
reference_and_preempted() {
  local what="$1" name="$2" env="$3" script="$4" mesh="$5" out
  "$env" "logs/$name-reference"
  reference_start "$what, uninterrupted" "$ws/logs/$name-reference" \
    "$dir/$name-reference.out" "$ws/output/output-%j-0-0.txt" -N 2 "$SUB_DIR/$script"
  "$env" "logs/$name-preempted"
  preempt_resume "$what" "$steps" - "$ws/logs/$name-preempted" \
    "$ws/output/output-%j-0-0.txt" "$dir/$name-preempted.out" -N 2 "$SUB_DIR/$script"
  reference_wait || return 0
  out="$ws/output/output-$REF_ID-0-0.txt"
  if grep -q "$mesh" "$out"; then
    ok "$what reached the trainer: $(grep -m1 -Eo 'mesh [^|]*' "$out")"
  else
    bad "the $what job's mesh line does not show $mesh"
    grep -E 'mesh' "$out" | sed 's/^/  | /'
  fi
  loss_falls "$what" "$ws/logs/$name-reference"
}

# tiny-llama's pipeline and seq-split steps take 90-140 ms here, and the ranks stopped 3-13 steps
# after the signal's step (at steps 11-21): 80 steps, each job 15-20 s shorter than with 200.
steps=80
reference_and_preempted DCN_PP=2 pp fuji_env example_fuji.sub 'pipeline=2 data=1 fsdp=1 tensor=2'
reference_and_preempted ICI_SQP=2 sqp seq_env example_fuji.sub 'data=2 fsdp=1 seq=2 tensor=1'
# tiny-gpt's pipeline steps take 20-60 ms (stops at steps 21-57): 200.
steps=200
reference_and_preempted "NUM_STAGES=2 (example_pile.sub)" pax pax_env example_pile.sub \
  'pipeline=2 data=2 fsdp=1'

# --- kill -9 of a middle stage --------------------------------------------------------------------
# A 4-stage job (ICI_PP=2 x DCN_PP=2, 4 layers) whose rank 2 (stage 2, on n2) gets kill -9 at step
# 5. The other ranks see the closed connections and agree on the cause (comm.md), which the job's
# last line repeats; when srun's kill (--kill-on-bad-exit: SIGTERM, SIGKILL after KillWait) ends
# them before any reported it, the line names the task srun saw end first (ax_srun_first_end).
# Either way it names rank 2, n2 and stage 2; the srun form is also checked on this job's real
# srun messages and outputs, whichever form the job printed.
run="$ws/logs/kill"
vars=(AX_CPU_THREADS=1 "AX_BIN=$BUILD" "BASE_WORKSPACE_DIR=$ws"
  "BASE_TFDS_DATA_DIR=$dir/data/shards" "BASE_VOCAB_PATH=$dir/data/spm.model" CONFIG=tiny-llama
  GPUS_PER_NODE=2 ICI_PP=2 DCN_PP=2 GA=4 GBS=16 SEQ_LEN=32 MAX_STEPS=100000 TRAINER_DIR=logs/kill
  "AX_TRAIN_ARGS=--device=cpu --set=train.eval_every=0 --set=model.num_layers=4")
id="$(submit_sub "$dir/kill.out" -N 2 "$SUB_DIR/example_fuji.sub")"
out="$ws/output/output-$id-0-0.txt"
wait_step "$id" "$out" 5 || bad "job $id did not reach step 5 ($(job_field "$id" JobState))"
kill_rank "$run" 2 "$id" "$dir/kill.out" "$out"
took=$KILL_TOOK
if [[ "$JOB_STATE" == FAILED && "$JOB_EXIT" != 0:0 ]] && ((took <= 30)) &&
  grep -q 'mesh pipeline=4' "$out" && grep -q 'n2: task 2: Killed' "$dir/kill.out"; then
  ok "kill -9 of stage 2 of 4 (rank 2 on n2): job $id $JOB_STATE with exit $JOB_EXIT within $took s; srun names task 2"
else
  bad "kill -9 of stage 2: job $id $JOB_STATE, exit $JOB_EXIT, after $took s"
  grep -m1 'mesh' "$out" | sed 's/^/  | /'
  show_tail "$dir/kill.out"
fi
agreed="rank 2 (host n2, pipeline stage 2) stopped answering first"
srun_saw="rank 2 (host n2, pipeline stage 2) ended first (srun: Killed), before the ranks agreed on a cause"
outs=("$ws/output/output-$id-"*.txt)
last="$(grep -F 'the training step failed with status' "$dir/kill.out" | tail -n 1)"
if [[ "$last" == *": $agreed"* ]]; then
  ok "the job's last line repeats the ranks' cause, naming the rank and its stage: $last"
elif [[ "$last" == *": $srun_saw"* ]] && ! grep -qF "$agreed" "${outs[@]}"; then
  ok "srun ended the ranks before they reported; the job's last line names its first ended task and stage: $last"
else
  bad "the job's last line names neither '$agreed' nor '$srun_saw': $last"
  grep -h 'ax-train:' "${outs[@]}" | sed 's/^/  | /'
fi
saw="$(source "$SUB_DIR/ax_job.sh" && AX_STEP_ERR_FILE="$dir/kill.out" AX_STEP_ERR_FROM=0 \
  ax_srun_first_end "${outs[@]}")"
if [[ "$saw" == "$srun_saw" ]]; then
  ok "from this job's srun messages and outputs, ax_srun_first_end says: $saw"
else
  bad "ax_srun_first_end on this job: '$saw', not '$srun_saw'"
  grep '^srun: error' "$dir/kill.out" | sed 's/^/  | /'
fi
left="$(rank_pids "$run" 0; rank_pids "$run" 1; rank_pids "$run" 3)"
if [[ -z "$left" ]]; then ok "no rank left running"; else bad "ranks still running: $left"; fi
finish
