#!/usr/bin/env bash
# sbatch/run_pile_singlenode.sh on one node of the cluster (srun -N 1), Pax's positional
# arguments <DATA_DIR> <VOCAB_PATH> <PRECISION> <NUM_GPUS> <PERCORE_BATCH_SIZE> <LOGDIR>: ax-launch
# runs 2 CPU ranks in float32 with the original's pure data-parallel mesh, the run succeeds and
# lands in LOGDIR; a failing run and bad arguments give a non-zero exit status (the original
# always exited 0).
#   singlenode_pile.sh BUILD_DIR REPO_DIR
source "$(dirname "$0")/lib.sh" "$@"
source "$(dirname "$0")/train_lib.sh"
source "$(dirname "$0")/sbatch_lib.sh"
require_cluster
dir="$(scratch)"
prepare_data "$dir/data"
script="$SUB_DIR/run_pile_singlenode.sh"
export AX_CPU_THREADS=1 AX_BIN="$BUILD" CONFIG=tiny-gpt MAX_STEPS=10
export AX_TRAIN_ARGS="--device=cpu --set=train.eval_every=0 --set=train.checkpoint_every=0"
run="$dir/logdir"

t srun -J "$JOB" -N 1 bash "$script" "$dir/data/shards" "$dir/data/spm.model" float32 2 4 \
  "$run" >"$dir/ok.out" 2>&1
rc=$?
if ((rc == 0)) && grep -q 'Run succeeded!' "$dir/ok.out" &&
  grep -q 'done: step 10' "$run/pile_output.log"; then
  ok "run_pile_singlenode.sh DATA VOCAB float32 2 4 LOGDIR: exit 0, pile_output.log in LOGDIR"
else
  bad "run_pile_singlenode.sh exited $rc"
  show_tail "$dir/ok.out"
fi
expect_files "LOGDIR contents" "$run/metrics.jsonl" "$run/checkpoints/step_00000010/COMMIT" \
  "$run/logs/rank_0.log" "$run/logs/rank_1.log" "$run/config.json"
if grep -q 'mesh data=2 fsdp=1 tensor=1' "$run/pile_output.log"; then
  ok "pure data parallelism over NUM_GPUS=2 ranks, as the original"
else
  bad "mesh is not data=2: $(grep -o 'mesh data=[^(]*' "$run/pile_output.log" | head -n 1)"
fi
# PRECISION float32 (refused before issue 11) reaches ax-train: the run's config says so, and
# rank 0 (the one that prints it) names the f32 CPU backend.
if grep -q '"precision": "float32"' "$run/config.json" &&
  grep -q 'device: cpu$' "$run/logs/rank_0.log"; then
  ok "PRECISION float32: train.precision float32, rank 0 computes in f32 (device: cpu)"
else
  bad "PRECISION float32 but: $(grep -o '"precision": [^,]*' "$run/config.json")," \
    "$(grep -o 'device: .*' "$run/logs/rank_0.log")"
fi
loss_falls "single node" "$run"

# An experiment ax-train does not know: ax-train exits 1, ax-launch with it, and so does the script.
CONFIG=no-such-experiment t srun -J "$JOB" -N 1 bash "$script" "$dir/data/shards" \
  "$dir/data/spm.model" bfloat16 2 4 "$dir/logdir-bad" >"$dir/bad.out" 2>&1
rc=$?
if ((rc == 1)) && grep -q 'Run failed with status 1' "$dir/bad.out"; then
  ok "a failing run: ax-train's exit status 1 propagated"
else
  bad "a failing run exited $rc"
  show_tail "$dir/bad.out"
fi

bash "$script" "$dir/data/shards" "$dir/nope.model" >"$dir/args.out" 2>&1
rc=$?
if ((rc == 2)) &&
  grep -q "VOCAB_PATH (\$2)='$dir/nope.model': no such readable file" "$dir/args.out"; then
  ok "a missing vocabulary: exit 2 naming VOCAB_PATH, nothing started"
else
  bad "a missing VOCAB_PATH exited $rc"
  show_tail "$dir/args.out"
fi
finish
