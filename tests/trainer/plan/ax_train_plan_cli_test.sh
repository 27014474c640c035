#!/usr/bin/env bash
# `ax-train plan` as a user runs it (docs/plan.md): a ranked table and the best layout as job
# variables and an --ax-mesh spec; a config that fits nowhere named with the smallest cluster
# that fits (exit 1); bad input one line each, exit 2.
#   ax_train_plan_cli_test.sh AX_TRAIN
set -uo pipefail
axtrain=$1
out=$(mktemp "${TMPDIR:-/tmp}/ax-train-plan.XXXXXX")
trap 'rm -f "$out"' EXIT
failures=0

fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# run WANT_STATUS DESCRIPTION ARGS...: ax-train plan ARGS, output in $out.
run() {
  local want=$1 what=$2
  shift 2
  "$axtrain" plan "$@" >"$out" 2>&1
  local got=$?
  [[ $got -eq $want ]] || { fail "$what: exit $got, want $want"; cat "$out" >&2; }
}

expect() {
  grep -q -- "$1" "$out" || { fail "output lacks '$1'"; cat "$out" >&2; }
}

one_line() {
  [[ $(wc -l <"$out") -eq 1 ]] || { fail "$1: not one line"; cat "$out" >&2; }
}

run 0 "GPT175B on 16 x 8 H100" --experiment GPT175B --nodes 16 --gpus-per-node 8 --gpu H100-80GB
expect "plan: GPT175B on 16 x 8 H100-80GB"
expect "ICI d,f,t"
expect "job script: CONFIG=GPT175B GPUS_PER_NODE=8 PERCORE_BATCH_SIZE=6 ICI_MESH_SHAPE=\["
expect "srun: --ax-mesh='ici="
expect "constants: H100-80GB 989.4 TFLOP/s"
expect "pipeline and seq axes are not planned"

run 0 "tiny-gpt with an override" --experiment tiny-gpt --set NUM_MICROBATCHES=2 --nodes 1 \
  --gpus-per-node 4 --gpu A100-80GB --top 3
expect "plan: tiny-gpt on 1 x 4 A100-80GB"
[[ $(grep -c '^[0-9]' "$out") -eq 3 ]] || { fail "--top 3 printed another number of rows"; cat "$out" >&2; }

run 1 "GPT175B on one node" --experiment GPT175B --set train.global_batch=256 --nodes 1 \
  --gpus-per-node 8 --gpu H100-80GB
expect "fits nowhere on 1 x 8 H100-80GB: the smallest cluster that fits is [0-9]* x 8 H100-80GB"

# An explicit mesh: its rows only; one that does not fit gets its least memory and the smallest
# change that fits (the same tensor size first).
run 0 "GPT175B on Pax's mesh" --experiment GPT175B --nodes 16 --gpus-per-node 8 --gpu H100-80GB \
  --ici '[1,8,1]' --dcn 1,-1,1
expect "over 1 data x fsdp x tensor layouts"
expect "ICI_MESH_SHAPE=\[1,8,1\] DCN_MESH_SHAPE=\[1,16,1\]"
run 1 "GPT175B data parallel" --experiment GPT175B --nodes 16 --gpus-per-node 8 --gpu H100-80GB \
  --ici 8,1,1 --dcn 16,1,1
expect "ICI_MESH_SHAPE=\[8,1,1\] DCN_MESH_SHAPE=\[16,1,1\] does not fit on 16 x 8 H100-80GB: it needs"
expect "the smallest change that fits:"
expect "job script: CONFIG=GPT175B GPUS_PER_NODE=8 PERCORE_BATCH_SIZE=6 ICI_MESH_SHAPE=\[[0-9,]*1\]"
run 2 "an ICI shape that does not cover a node" --experiment tiny-gpt --nodes 1 --gpus-per-node 8 \
  --gpu H200 --ici 1,4,1
one_line "ICI product"
expect "ICI_MESH_SHAPE=1,4,1 covers 4 GPUs but a node has 8"
run 2 "tensor across nodes" --experiment tiny-gpt --nodes 2 --gpus-per-node 8 --gpu H200 \
  --ici 1,8,1 --dcn 1,1,2
one_line "tensor across nodes"

run 2 "unknown GPU" --experiment tiny-gpt --nodes 1 --gpus-per-node 8 --gpu V100
one_line "unknown GPU"
expect "unknown GPU 'V100'"
run 2 "zero nodes" --experiment tiny-gpt --nodes 0 --gpus-per-node 8 --gpu H200
one_line "zero nodes"
expect "nodes"
run 2 "zero GPUs per node" --experiment tiny-gpt --nodes 1 --gpus-per-node 0 --gpu H200
one_line "zero GPUs per node"
run 2 "unknown experiment" --experiment GPT9000 --nodes 1 --gpus-per-node 8 --gpu H200
one_line "unknown experiment"
run 2 "bad override" --experiment tiny-gpt --set model.no_such_key=1 --nodes 1 --gpus-per-node 8 \
  --gpu H200
one_line "bad override"

if [[ $failures -gt 0 ]]; then
  echo "$failures failure(s)" >&2
  exit 1
fi
echo "ax-train plan: all checks passed"
