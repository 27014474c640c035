#!/usr/bin/env bash
# `ax-train plan` as a user runs it (docs/plan.md): a ranked table and the best layout as job
# variables and an --ax-mesh spec; a config that fits nowhere named with the smallest cluster
# that fits (exit 1); bad input one line each, exit 2; --format=env (the job scripts' input);
# --topology FILE (an hwloc XML or ax-topo JSON of a node).
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
expect "ICI p,d,f,s,t"
expect "job script: CONFIG=GPT175B GPUS_PER_NODE=8 PERCORE_BATCH_SIZE=6 ICI_MESH_SHAPE=\["
expect "srun: --ax-mesh='ici="
expect "constants: H100-80GB 989.4 TFLOP/s"
expect "pipeline: backward = 2.0 forward passes"
grep -q "^[0-9]* *[0-9]*,[0-9]*,[0-9]*,[0-9]*,[0-9]* " "$out" ||
  { fail "GPT175B: no five-number row"; cat "$out" >&2; }
grep -q "^note: pipeline and seq axes are not planned" "$out" &&
  { fail "GPT175B: the old note"; cat "$out" >&2; }

# Pipeline stages and seq slices, given in five numbers: the job variables and --ax-mesh in the
# same form; the heaviest stage named; a seq rank's K/V gathers; what ax-train refuses, refused.
run 0 "GPT175B in 16 stages" --experiment GPT175B --nodes 16 --gpus-per-node 8 --gpu H100-80GB \
  --ici 1,1,1,1,8 --dcn 16,1,1,1,1
expect "over 1 pipeline x data x fsdp x seq x tensor layouts"
expect "ICI_MESH_SHAPE=\[1,1,1,1,8\] DCN_MESH_SHAPE=\[16,1,1,1,1\]"
expect "srun: --ax-mesh='ici=1,1,1,1,8;dcn=16,1,1,1,1'"
expect "heaviest stage: 0 of 16, "
expect ", bubble "
run 0 "tiny-llama in seq slices" --experiment tiny-llama --nodes 1 --gpus-per-node 8 --gpu H200 \
  --ici 1,2,1,4,1 --dcn 1,1,1,1,1
expect "best: data 2 fsdp 1 tensor 1 seq 4, "
expect ", K/V gathers "
expect "--ax-mesh='ici=1,2,1,4,1;dcn=1,1,1,1,1'"
run 0 "tiny-t5 in 2 stages" --experiment tiny-t5 --nodes 2 --gpus-per-node 4 --gpu H200 \
  --ici 1,4,1,1,1 --dcn 2,1,1,1,1
expect "best: data 4 fsdp 1 tensor 1 pipeline 2, "
expect "heaviest stage: [01] of 2, "
expect "--ax-mesh='ici=1,4,1,1,1;dcn=2,1,1,1,1'"
expect "^note: seq axes are not planned for t5"
grep -q "^note: pipeline and seq axes are not planned" "$out" &&
  { fail "tiny-t5: the old note"; cat "$out" >&2; }
run 0 "tiny-t5 on 2 x 4" --experiment tiny-t5 --nodes 2 --gpus-per-node 4 --gpu H200
expect "ICI p,d,f,s,t"
run 1 "seq for t5" --experiment tiny-t5 --nodes 1 --gpus-per-node 8 --gpu H200 \
  --ici 1,4,1,2,1 --dcn 1,1,1,1,1
expect "^note: seq=2: sequence sharding is built for the decoder-only families"
run 2 "four numbers" --experiment tiny-gpt --nodes 1 --gpus-per-node 8 --gpu H200 --ici 1,8,1,1
one_line "four numbers"
expect "expected three numbers data,fsdp,tensor or five pipeline,data,fsdp,seq,tensor"

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
run 2 "no GPU kind" --experiment tiny-gpt --nodes 1 --gpus-per-node 8
one_line "no GPU kind"
expect "--gpus-per-node and --gpu are required without --topology"

# The driver's GPU name (what the job scripts get from nvidia-smi) plans as the table's.
run 0 "the driver's name" --experiment tiny-gpt --nodes 1 --gpus-per-node 8 \
  --gpu "NVIDIA H100 80GB HBM3" --top 1
expect "plan: tiny-gpt on 1 x 8 H100-80GB"

# --format=env, what sbatch/lib/plan.sh reads: the layout, the options and one line.
run 0 "env format" --experiment fuji-7B-v2 --nodes 2 --gpus-per-node 8 --gpu H100-80GB --format env
[[ $(grep -c '^AX_PLAN_[A-Z_]*=' "$out") -eq 4 && $(wc -l <"$out") -eq 4 ]] ||
  { fail "env format: not the four AX_PLAN_ lines"; cat "$out" >&2; }
expect "^AX_PLAN_ICI=[0-9]*,[0-9]*,[0-9]*\(,[0-9]*,[0-9]*\)\?$"
expect "^AX_PLAN_TRAIN_ARGS=--set NUM_MICROBATCHES=[0-9]"
expect "^AX_PLAN_LINE=data [0-9]* fsdp [0-9]* tensor [0-9]* (ICI_MESH_SHAPE="
run 0 "env format, the job's micro-batches" --experiment fuji-7B-v2 --set NUM_MICROBATCHES=4 \
  --set train.recompute=layer --nodes 2 --gpus-per-node 8 --gpu H100-80GB --format env
expect "^AX_PLAN_TRAIN_ARGS=$"
expect "4 micro-batch(es) of 1, recompute layer"
run 1 "env format, a mesh that does not fit" --experiment fuji-7B-v2 --nodes 2 \
  --gpus-per-node 8 --gpu H100-80GB --ici 8,1,1 --dcn 2,1,1 --format env
one_line "env format, a mesh that does not fit"
expect "^AX_PLAN_LINE=ICI_MESH_SHAPE=\[8,1,1\] DCN_MESH_SHAPE=\[2,1,1\] does not fit on 2 x 8 H100-80GB"
expect "; the smallest change that fits: ICI_MESH_SHAPE=\["

# --cpu: CPU ranks of this machine with measured rates (bench/plan_cpu_bench.sh).
run 0 "CPU ranks" --experiment bench-a --set train.precision=float32 --nodes 1 --gpus-per-node 2 \
  --cpu gemm=100,attention=20,memory=10,link=1,latency=0 --ici 2,1,1 --dcn 1,1,1
expect "plan: bench-a on 1 x 2 CPU"
expect "best: data 2 fsdp 1 tensor 1, 1 micro-batch(es) of 8"
expect "constants: CPU ranks measured here (--cpu): GEMM 100.0 GFLOP/s, attention 20.0 GFLOP/s"
run 2 "CPU rates missing one" --experiment bench-a --nodes 1 --gpus-per-node 2 \
  --cpu gemm=100,attention=20,memory=10,link=1
one_line "CPU rates missing one"
run 2 "a CPU rate that is no number" --experiment bench-a --nodes 1 --gpus-per-node 2 \
  --cpu gemm=fast,attention=20,memory=10,link=1,latency=0
one_line "a CPU rate that is no number"
expect "expected gemm=GFLOP/s"

# --topology: a node's hwloc XML or ax-topo JSON gives the GPUs, NVLink and NICs.
fixtures="$(cd "$(dirname "$0")/../../../topology/fixtures" && pwd)"
run 0 "an hwloc XML" --experiment tiny-gpt --nodes 2 --topology "$fixtures/fake-4gpu.hwloc.xml" \
  --top 1
expect "^topology: 4 x NVIDIA H100 80GB HBM3 (H100-80GB), largest NVLink island 2: inside a node at PCIe's 32 GB/s"
expect "plan: tiny-gpt on 2 x 4 H100-80GB"
run 0 "ax-topo JSON of a DGX H100" --experiment tiny-gpt --nodes 1 \
  --topology "$fixtures/dgx-h100.json" --top 1
expect "^topology: 8 x NVIDIA H100 80GB HBM3 (H100-80GB), one NVLink domain, 8 NIC(s): network 50.0 GB/s per GPU"
run 0 "--gpu overrides the topology's kind" --experiment tiny-gpt --nodes 1 \
  --topology "$fixtures/dgx-a100.json" --gpu H200 --top 1
expect "plan: tiny-gpt on 1 x 8 H200"
bad_xml="$out.xml"
printf '<?xml version="1.0"?>\n<topology version="2.0"><object type="Machine"\n' >"$bad_xml"
run 2 "a topology file that does not parse" --experiment tiny-gpt --nodes 1 --topology "$bad_xml"
one_line "a topology file that does not parse"
expect "--topology $bad_xml: hwloc XML $bad_xml: not a well-formed hwloc XML topology"
run 2 "no topology file" --experiment tiny-gpt --nodes 1 --topology "$bad_xml.none"
one_line "no topology file"
rm -f "$bad_xml"
run 2 "a topology without GPUs" --experiment tiny-gpt --nodes 1 --topology "$fixtures/no-gpu.json"
one_line "a topology without GPUs"
expect "has no GPU"
run 2 "--gpus-per-node against the topology" --experiment tiny-gpt --nodes 1 --gpus-per-node 4 \
  --topology "$fixtures/dgx-h100.json"
expect "--gpus-per-node 4 but --topology"

if [[ $failures -gt 0 ]]; then
  echo "$failures failure(s)" >&2
  exit 1
fi
echo "ax-train plan: all checks passed"
