#!/usr/bin/env bash
# shellcheck disable=SC2034  # `vars` is read by submit_sub (sbatch_lib.sh)
# sbatch/example_fuji.sub with AXLearn's DCN_PP=2 (issue 25): tiny-llama's two pipeline stages on
# two nodes, tensor parallel inside each (ICI_TP=2), 1F1B over GA=4 micro-batches. An
# uninterrupted job, then the same job preempted (USR1 to the batch script) → every rank
# checkpoints at one step → requeued → restart 1 resumes and logs exactly the uninterrupted
# job's losses (CPU ranks are bit-exact). Then four stages (ICI_PP=2 x DCN_PP=2, 4 layers) with the
# middle stage on the second node (rank 2) killed -9: the job fails within seconds, naming it and
# its stage. Between them the Pax script (example_pile.sub) with its NUM_STAGES=2 and 4
# micro-batches (ICI_MESH_SHAPE=[1,2,1,1,1] DCN_MESH_SHAPE=[2,1,1,1,1]): uninterrupted, then
# preempted and resumed, the same losses.
# Also the seq axis (issue 26): ICI_SQP=2 DCN_DP=2 (each row split over a node's two ranks),
# uninterrupted, then preempted and resumed, the same losses.
#   sbatch_fuji_pp.sh BUILD_DIR REPO_DIR
source "$(dirname "$0")/lib.sh" "$@"
source "$(dirname "$0")/train_lib.sh"
source "$(dirname "$0")/sbatch_lib.sh"
require_cluster
dir="$(scratch)"
prepare_data "$dir/data"
ws="$dir/ws"
steps=200
# fuji_env TRAINER_DIR: the job's variables (the run directory relative to the workspace).
fuji_env() {
  vars=(AX_CPU_THREADS=1 "AX_BIN=$BUILD" "BASE_WORKSPACE_DIR=$ws"
    "BASE_TFDS_DATA_DIR=$dir/data/shards" "BASE_VOCAB_PATH=$dir/data/spm.model" CONFIG=tiny-llama
    GPUS_PER_NODE=2 DCN_PP=2 ICI_TP=2 GA=4 GBS=16 SEQ_LEN=32 "MAX_STEPS=$steps"
    "TRAINER_DIR=$1" "AX_TRAIN_ARGS=--device=cpu --set=train.eval_every=0")
}

fuji_env logs/reference
id="$(submit_sub "$dir/reference.out" -N 2 "$SUB_DIR/example_fuji.sub")"
end_job "$id" 120
out="$ws/output/output-$id-0-0.txt"
if ! job_completed "DCN_PP=2, uninterrupted" "$id" "$dir/reference.out" "$out"; then
  finish
  exit
fi
if grep -q 'pipeline 2' "$out" || grep -q 'pipeline=2' "$out"; then
  ok "DCN_PP=2 reached the trainer: $(grep -m1 -Eo 'mesh [^|]*' "$out")"
else
  bad "the trainer's mesh line does not show pipeline 2"
  grep -E 'mesh' "$out" | sed 's/^/  | /'
fi
ref="$(step_losses "$ws/logs/reference")"
loss_falls "DCN_PP=2" "$ws/logs/reference"

fuji_env logs/preempted
preempt_resume srun "$steps" "$ref" "$ws/logs/preempted" "$ws/output/output-%j-0-0.txt" \
  "$dir/preempted.out" -N 2 "$SUB_DIR/example_fuji.sub"

# --- the seq axis (issue 26): ICI_SQP=2, each row's positions split over a node's two ranks ------
seq_env() {
  fuji_env "$1"
  vars=("${vars[@]/DCN_PP=2/ICI_SQP=2}")
  vars=("${vars[@]/ICI_TP=2/DCN_DP=2}")
}
seq_env logs/sqp-reference
id="$(submit_sub "$dir/sqp-reference.out" -N 2 "$SUB_DIR/example_fuji.sub")"
end_job "$id" 120
out="$ws/output/output-$id-0-0.txt"
if job_completed "ICI_SQP=2, uninterrupted" "$id" "$dir/sqp-reference.out" "$out"; then
  if grep -q 'seq=2' "$out"; then
    ok "ICI_SQP=2 reached the trainer: $(grep -m1 -Eo 'mesh [^|]*' "$out")"
  else
    bad "the ICI_SQP=2 job's mesh line does not show seq=2"
    grep -E 'mesh' "$out" | sed 's/^/  | /'
  fi
  sqp_ref="$(step_losses "$ws/logs/sqp-reference")"
  loss_falls "ICI_SQP=2" "$ws/logs/sqp-reference"
  seq_env logs/sqp-preempted
  preempt_resume "ICI_SQP=2" "$steps" "$sqp_ref" "$ws/logs/sqp-preempted" \
    "$ws/output/output-%j-0-0.txt" "$dir/sqp-preempted.out" -N 2 "$SUB_DIR/example_fuji.sub"
fi

# --- the Pax script's NUM_STAGES=2 (tiny-gpt, tied embeddings: a stage per node, data 2 inside) --
pax_args="--device=cpu --set=train.eval_every=0 --set=train.checkpoint_every=0 --set=train.num_microbatches=4"
# Pax's form: both shapes five-number with ICI[0] x DCN[0] = NUM_STAGES (alone, NUM_STAGES would
# give auto:pp=2, FSDP inside the node).
pax_mesh=("ICI_MESH_SHAPE=[1,2,1,1,1]" "DCN_MESH_SHAPE=[2,1,1,1,1]" NUM_STAGES=2)
mapfile -t vars < <(sub_env "$dir" logs/pax-reference "MAX_STEPS=$steps" "${pax_mesh[@]}" \
  "AX_TRAIN_ARGS=$pax_args")
id="$(submit_sub "$dir/pax-reference.out" -N 2 "$SUB_DIR/example_pile.sub")"
end_job "$id" 120
out="$ws/output/output-$id-0-0.txt"
if job_completed "NUM_STAGES=2 (example_pile.sub), uninterrupted" "$id" "$dir/pax-reference.out" \
  "$out"; then
  if grep -q 'pipeline=2 data=2' "$out"; then
    ok "NUM_STAGES=2 reached the trainer: $(grep -m1 -Eo 'mesh [^|]*' "$out")"
  else
    bad "the Pax job's mesh line does not show pipeline=2"
    grep -E 'mesh' "$out" | sed 's/^/  | /'
  fi
  pax_ref="$(step_losses "$ws/logs/pax-reference")"
  loss_falls "NUM_STAGES=2" "$ws/logs/pax-reference"
  mapfile -t vars < <(sub_env "$dir" logs/pax-preempted "MAX_STEPS=$steps" "${pax_mesh[@]}" \
    "AX_TRAIN_ARGS=$pax_args")
  preempt_resume "NUM_STAGES=2" "$steps" "$pax_ref" "$ws/logs/pax-preempted" \
    "$ws/output/output-%j-0-0.txt" "$dir/pax-preempted.out" -N 2 "$SUB_DIR/example_pile.sub"
fi

# --- kill -9 of a middle stage --------------------------------------------------------------------
run="$ws/logs/kill"
vars=(AX_CPU_THREADS=1 "AX_BIN=$BUILD" "BASE_WORKSPACE_DIR=$ws"
  "BASE_TFDS_DATA_DIR=$dir/data/shards" "BASE_VOCAB_PATH=$dir/data/spm.model" CONFIG=tiny-llama
  GPUS_PER_NODE=2 ICI_PP=2 DCN_PP=2 GA=4 GBS=16 SEQ_LEN=32 MAX_STEPS=100000 TRAINER_DIR=logs/kill
  "AX_TRAIN_ARGS=--device=cpu --set=train.eval_every=0 --set=model.num_layers=4")
id="$(submit_sub "$dir/kill.out" -N 2 "$SUB_DIR/example_fuji.sub")"
out="$ws/output/output-$id-0-0.txt"
wait_step "$id" "$out" 5 || true
kill_rank "$run" 2 "$id" "$dir/kill.out" "$out"
took=$KILL_TOOK
if [[ "$JOB_STATE" == FAILED && "$JOB_EXIT" != 0:0 ]] && ((took <= 30)) &&
  grep -q 'mesh pipeline=4' "$out" && grep -q 'n2: task 2: Killed' "$dir/kill.out"; then
  ok "kill -9 of stage 2 of 4 (rank 2 on n2): job $id $JOB_STATE with exit $JOB_EXIT within $took s; the job's output names task 2"
else
  bad "kill -9 of stage 2: job $id $JOB_STATE, exit $JOB_EXIT, after $took s"
  grep -m1 'mesh' "$out" | sed 's/^/  | /'
  show_tail "$dir/kill.out"
fi
cause="rank 2 (host n2, pipeline stage 2) stopped answering first"
if grep -F 'the training step failed with status' "$dir/kill.out" | grep -qF ": $cause"; then
  ok "the job's last line names the killed rank and its stage: $(tail -n 1 "$dir/kill.out")"
else
  bad "the job's last line does not say '$cause': $(tail -n 1 "$dir/kill.out")"
  grep -h 'ax-train:' "$ws/output/output-$id-"*.txt | sed 's/^/  | /'
fi
left="$(rank_pids "$run" 0; rank_pids "$run" 1; rank_pids "$run" 3)"
if [[ -z "$left" ]]; then ok "no rank left running"; else bad "ranks still running: $left"; fi
finish
