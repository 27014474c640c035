#!/usr/bin/env bash
# The job scripts' variable checks without Slurm (AX_DRY_RUN=1 prints the srun command and exits
# 0; a bad variable exits 2 before it): MAX_STEPS and MAX_STEP are both accepted by every script
# (example_fuji.sub silently ignored MAX_STEPS), both set to different values is refused naming
# both, PREC/PRECISION bfloat16 and float32 (bf16, fp32) reach ax-train as train.precision and
# anything else is refused, and a variable that looks meant for the script but that it does not
# read is warned about (a name close to one it reads, another script's variable, an AX_* that
# nothing reads). T5x's fine-tuning scripts and Pax's Lambada script (issue 14) build their
# commands from their variables and refuse bad ones. The list of AX_* names in sbatch/ax_job.sh
# (sbatch/lib/lint.sh) must cover every one the C++ sources read.
#   job_scripts_test.sh REPO_DIR AX_TRAIN
set -uo pipefail
REPO="${1:?usage: $0 REPO_DIR AX_TRAIN}"
AXTRAIN="${2-}" # the real one, for the plan's cases
SUB="$REPO/sbatch"
dir="$(mktemp -d /tmp/ax-job-scripts.XXXXXX)"
trap 'rm -rf "$dir"' EXIT
cd "$dir" || exit 1  # run_pile_singlenode.sh makes its LOGDIR in the current directory
passed=0 failed=0
ok() { echo "PASS: $*"; passed=$((passed + 1)); }
bad() { echo "FAIL: $*"; failed=$((failed + 1)); }

# Stand-ins for the binaries (the dry run only checks that they exist) and the data.
mkdir -p "$dir/bin" "$dir/shards" "$dir/ws"
for b in ax-train ax-launch ax-data; do printf '#!/bin/sh\nexit 0\n' >"$dir/bin/$b" && chmod +x "$dir/bin/$b"; done
# ax-train's --help lists its subcommands (run_lambada_singlenode.sh looks for eval).
# shellcheck disable=SC2016 # the stub's own $1
printf '#!/bin/sh\n[ "$1" = --help ] && echo "  eval                        Evaluates"\nexit 0\n' \
  >"$dir/bin/ax-train"
echo '{}' >"$dir/shards/index.json"
: >"$dir/spm.model"
common=(-i "PATH=$PATH" "HOME=$dir" AX_DRY_RUN=1 "AX_BIN=$dir/bin" "BASE_WORKSPACE_DIR=$dir/ws"
  "BASE_TFDS_DATA_DIR=$dir/shards" "BASE_VOCAB_PATH=$dir/spm.model")
pile=("${common[@]}" LOG_DIR_LOCAL=logs/x PREC=bfloat16 GPUS_PER_NODE=2 PERCORE_BATCH_SIZE=4)

# run NAME SCRIPT ENV... [-- ARGS...]: runs SCRIPT ARGS with only ENV in its environment; output
# in $dir/NAME.out, exit status in $rc.
run() {
  local name="$1" script="$2" envs=()
  shift 2
  while (($# > 0)) && [[ "$1" != -- ]]; do envs+=("$1") && shift; done
  (($# > 0)) && shift
  env "${envs[@]}" bash "$SUB/$script" "$@" >"$dir/$name.out" 2>&1
  rc=$?
}
# expect WHAT RC LINE... / refute WHAT LINE...: the last run's status and lines (fixed strings).
expect() {
  local what="$1" want_rc="$2" line missing=()
  shift 2
  for line in "$@"; do grep -qF -- "$line" "$dir/$name_of_last.out" || missing+=("$line"); done
  if [[ "$rc" == "$want_rc" && ${#missing[@]} == 0 ]]; then
    ok "$what"
  else
    bad "$what: exit $rc (want $want_rc); missing: ${missing[*]:-none}"
    sed 's/^/  | /' "$dir/$name_of_last.out" | tail -n 15
  fi
}
refute() {
  local what="$1" line
  shift
  for line in "$@"; do
    if grep -qF -- "$line" "$dir/$name_of_last.out"; then
      bad "$what: unexpected '$line'"
      return
    fi
  done
  ok "$what"
}
last() { name_of_last="$1"; run "$@"; }

last fuji_steps example_fuji.sub "${common[@]}" MAX_STEPS=7
expect "example_fuji.sub: MAX_STEPS (Pax's name) reaches ax-train" 0 "--max-steps 7"
refute "example_fuji.sub: MAX_STEPS is no longer a warning" "warning"

last fuji_step example_fuji.sub "${common[@]}" MAX_STEP=9
expect "example_fuji.sub: MAX_STEP (AXLearn's name) reaches ax-train" 0 "--max-steps 9"

last fuji_both example_fuji.sub "${common[@]}" MAX_STEP=9 MAX_STEPS=7
expect "example_fuji.sub: MAX_STEP and MAX_STEPS that differ are refused, naming both" 2 \
  "ax-job: error: MAX_STEPS='7' and MAX_STEP='9' are both set, to different step counts"
refute "example_fuji.sub: nothing launched" "--max-steps"

last fuji_same example_fuji.sub "${common[@]}" MAX_STEP=9 MAX_STEPS=9
expect "example_fuji.sub: MAX_STEP and MAX_STEPS that agree are fine" 0 "--max-steps 9"

last pile_step example_pile.sub "${pile[@]}" MAX_STEP=5
expect "example_pile.sub: MAX_STEP (AXLearn's name) reaches ax-train" 0 "--max-steps 5"

last pile_typos example_pile.sub "${pile[@]}" PERCORE_BATCH=8 GPUS_PER_NODES=4 AX_LAUNCH_MOD=srun \
  TRAINER_DIR=logs/y AX_CPU_THREADS=1 AX_JOB_SECRET=5ec2e7005ec2e7005ec2e7005ec2e700
expect "example_pile.sub: unknown recipe-looking variables are warned about, the job still runs" 0 \
  "ax-job: warning: PERCORE_BATCH is set but example_pile.sub does not read it; did you mean PERCORE_BATCH_SIZE?" \
  "ax-job: warning: GPUS_PER_NODES is set but example_pile.sub does not read it; did you mean GPUS_PER_NODE?" \
  "ax-job: warning: AX_LAUNCH_MOD is set but nothing in ax reads it; did you mean AX_LAUNCH_MODE?" \
  "ax-job: warning: TRAINER_DIR is a variable of example_fuji.sub; example_pile.sub does not read it"
refute "example_pile.sub: variables it reads, AX_* that ax-train reads and the rest of the environment are not warned about" \
  "warning: AX_CPU_THREADS" "warning: AX_JOB_SECRET" "warning: PATH" "warning: HOME" \
  "warning: PERCORE_BATCH_SIZE"

last fuji_typos example_fuji.sub "${common[@]}" PERCORE_BATCH_SIZE=4 AX_NOTHING=1 SEQ_LENGTH=64
expect "example_fuji.sub: another script's variable, an unknown AX_* and a near miss" 0 \
  "ax-job: warning: PERCORE_BATCH_SIZE is a variable of example_pile.sub; example_fuji.sub does not read it" \
  "ax-job: warning: AX_NOTHING is set but nothing in ax reads it" \
  "ax-job: warning: SEQ_LENGTH is set but example_fuji.sub does not read it; did you mean SEQ_LEN?"

# Issues 25/26: the pipeline and seq axes, AXLearn's order pipeline,data,fsdp,seq,tensor. Without a
# PP or SQP variable the spec keeps the three-number form; ax-train itself refuses pipeline/seq > 1.
last fuji_pp example_fuji.sub "${common[@]}" DCN_PP=2 ICI_TP=4
expect "example_fuji.sub: DCN_PP and ICI_TP reach the mesh in AXLearn's order" 0 \
  "'--ax-mesh=ici=1,1,-1,1,4;dcn=2,-1,1,1,1'"
refute "example_fuji.sub: DCN_PP is neither refused nor warned about" "error" "warning"
last fuji_sqp example_fuji.sub "${common[@]}" ICI_SQP=2 ICI_PP=1 DCN_SQP=1 DCN_DP=2
expect "example_fuji.sub: ICI_SQP/ICI_PP/DCN_SQP reach the mesh" 0 \
  "'--ax-mesh=ici=1,1,-1,2,1;dcn=1,2,1,1,1'"
last fuji_three example_fuji.sub "${common[@]}" ICI_TP=2
expect "example_fuji.sub: without PP/SQP the three-number spec is unchanged" 0 \
  "'--ax-mesh=ici=1,-1,2;dcn=-1,1,1'"
last fuji_pp_bad example_fuji.sub "${common[@]}" ICI_PP=two DCN_PP=-1
expect "example_fuji.sub: a bad ICI_PP and a second -1 in DCN are refused, naming them" 2 \
  "ax-job: error: ICI_PP='two': expected a whole number >= 1, or -1" \
  "DCN_PP,DCN_DP,DCN_FSDP,DCN_SQP,DCN_TP=-1,-1,1,1,1: at most one -1 per vector"
refute "example_fuji.sub: nothing launched with a bad PP" "--ax-mesh"

last pile_stages example_pile.sub "${pile[@]}" NUM_STAGES=2
expect "example_pile.sub: NUM_STAGES alone asks auto for pipeline stages across nodes" 0 \
  "--ax-mesh=auto:pp=2 "
refute "example_pile.sub: NUM_STAGES is not warned about" "warning"
last pile_five example_pile.sub "${pile[@]}" "ICI_MESH_SHAPE=[1,1,2,1,1]" \
  "DCN_MESH_SHAPE=[2,1,1,1,1]" NUM_STAGES=2
expect "example_pile.sub: five-number shapes whose pipeline sizes multiply to NUM_STAGES" 0 \
  "'--ax-mesh=ici=1,1,2,1,1;dcn=2,1,1,1,1'"
last pile_seq example_pile.sub "${pile[@]}" "ICI_MESH_SHAPE=(1, 1, -1, 2, 1)"
expect "example_pile.sub: a five-number ICI_MESH_SHAPE with a seq axis" 0 \
  "'--ax-mesh=ici=1,1,-1,2,1;dcn=-1,1,1'"
last pile_stages_bad example_pile.sub "${pile[@]}" "ICI_MESH_SHAPE=[1,1,2,1,1]" \
  "DCN_MESH_SHAPE=[2,1,1,1,1]" NUM_STAGES=4
expect "example_pile.sub: NUM_STAGES that the shapes do not multiply to is refused" 2 \
  "ax-job: error: NUM_STAGES=4 with ICI_MESH_SHAPE='[1,1,2,1,1]' DCN_MESH_SHAPE='[2,1,1,1,1]': set both in the five-number form pipeline,data,fsdp,seq,tensor with ICI[0] x DCN[0] = 4"
last pile_four example_pile.sub "${pile[@]}" "ICI_MESH_SHAPE=[1,2,1,1]"
expect "example_pile.sub: four numbers are neither form" 2 \
  "ax-job: error: ICI_MESH_SHAPE='[1,2,1,1]': expected three numbers data,fsdp,tensor such as [8,1,1], or five pipeline,data,fsdp,seq,tensor"

# tokenize.sub (issue 17) warns too; its AX_DATA_ARGS is read, so no script warns about it.
mkdir -p "$dir/corpus" "$dir/data" && : >"$dir/corpus/a.jsonl"
last tok_typos tokenize.sub -i "PATH=$PATH" "HOME=$dir" AX_DRY_RUN=1 "AX_BIN=$dir/bin" \
  "INPUT_GLOB=$dir/corpus/*.jsonl" "BASE_VOCAB_PATH=$dir/spm.model" "SHARDS_DIR=$dir/data/out" \
  "INPUT_GLOBS=$dir/corpus/*.zst" AX_DATA_ARGS=--skip-bad AX_DATA_ARG=x
expect "tokenize.sub: a near miss and an unknown AX_* are warned about, the job still runs" 0 \
  "ax-job: warning: INPUT_GLOBS is set but tokenize.sub does not read it; did you mean INPUT_GLOB?" \
  "ax-job: warning: AX_DATA_ARG is set but nothing in ax reads it; did you mean AX_DATA_ARGS?" \
  "--skip-bad"
refute "tokenize.sub: AX_DATA_ARGS is not warned about" "warning: AX_DATA_ARGS"
last pile_data_args example_pile.sub "${pile[@]}" AX_DATA_ARGS=--skip-bad
refute "example_pile.sub: AX_DATA_ARGS (tokenize.sub's) is not called unread by ax" \
  "warning: AX_DATA_ARGS is set but nothing in ax reads it"

last single_both run_pile_singlenode.sh -i "PATH=$PATH" "HOME=$dir" "AX_BIN=$dir/bin" MAX_STEP=3 \
  MAX_STEPS=4 ICI_MESH=8,1,1 -- "$dir/shards" "$dir/spm.model"
expect "run_pile_singlenode.sh: MAX_STEP/MAX_STEPS conflict refused, near miss warned about" 2 \
  "MAX_STEPS='4' and MAX_STEP='3' are both set, to different step counts" \
  "ax-job: warning: ICI_MESH is set but run_pile_singlenode.sh does not read it; did you mean ICI_MESH_SHAPE?"

# PREC (Pax's FPROP_DTYPE) reaches ax-train as train.precision: bfloat16 and float32, each also
# by its short name; anything else is refused before srun (issue 11: float32 was refused).
for prec in bfloat16:bfloat16 bf16:bfloat16 float32:float32 fp32:float32; do
  last "pile_prec_${prec%%:*}" example_pile.sub "${pile[@]}" "PREC=${prec%%:*}"
  expect "example_pile.sub: PREC=${prec%%:*} reaches ax-train as train.precision=${prec#*:}" 0 \
    "--set train.precision=${prec#*:}"
done
last pile_prec_bad example_pile.sub "${pile[@]}" PREC=float16
expect "example_pile.sub: PREC=float16 is refused before srun, naming what it accepts" 2 \
  "ax-job: error: PREC='float16': expected bfloat16 (or bf16: bf16 activations over fp32 master weights) or float32 (or fp32: fp32 throughout)" \
  "1 problem(s) with the job's variables; nothing was launched"
refute "example_pile.sub: PREC=float16: nothing launched" "ax-job: srun" "--experiment"

last single_fp32 run_pile_singlenode.sh -i "PATH=$PATH" "HOME=$dir" "AX_BIN=$dir/bin" -- \
  "$dir/shards" "$dir/spm.model" fp32 2 4 "$dir/logdir-fp32"
expect "run_pile_singlenode.sh: PRECISION fp32 reaches ax-train as train.precision=float32" 0 \
  "--set train.precision=float32"
last single_default run_pile_singlenode.sh -i "PATH=$PATH" "HOME=$dir" "AX_BIN=$dir/bin" -- \
  "$dir/shards" "$dir/spm.model"
expect "run_pile_singlenode.sh: PRECISION defaults to bfloat16, as the original" 0 \
  "--set train.precision=bfloat16"
last single_prec_bad run_pile_singlenode.sh -i "PATH=$PATH" "HOME=$dir" "AX_BIN=$dir/bin" -- \
  "$dir/shards" "$dir/spm.model" half 2 4 "$dir/logdir-half"
expect "run_pile_singlenode.sh: PRECISION half is refused, naming the argument" 2 \
  "ax-job: error: PRECISION (\$3)='half': expected bfloat16 (or bf16"
refute "run_pile_singlenode.sh: PRECISION half: nothing launched" "--experiment"

# example_slurm_pretrain_pile.sub (T5x's interface, issue 13): T5x's defaults, the output folder
# as T5x names it, global batch BSIZE_PER_GPU x GPUs / TP_SIZE, the TP mesh, the data variables,
# the container mounts, and every refusal before srun.
t5x=(-i "PATH=$PATH" "HOME=$dir" AX_DRY_RUN=1 "AX_BIN=$dir/bin" "BASE_T5X_WORKSPACE_DIR=$dir/ws"
  "BASE_T5X_OUTPUTS_DIR=$dir/t5x-out" "BASE_TFDS_DATA_DIR=$dir/shards"
  "BASE_VOCAB_PATH=$dir/spm.model" MODEL_DIR=t5/run)
T5X=example_slurm_pretrain_pile.sub
last t5x_defaults "$T5X" "${t5x[@]}"
expect "$T5X: T5x's defaults (8 GPUs, large, bfloat16, 32 per GPU, 500 steps, 512/128, FP8 0)" 0 \
  "-o $dir/t5x-out/multinode/PRETRAIN-large-bfloat16-N1-n8-Step500-BS32-MBS1-SL512_128-TP1-FP80/output-%j-%t.txt" \
  "--ntasks-per-node=8 '--ax-mesh=ici=-1,1,1;dcn=-1,1,1'" \
  "--experiment t5-large --data $dir/shards --tokenizer $dir/spm.model --run-dir $dir/ws/t5/run" \
  "--set train.precision=bfloat16 --set NUM_MICROBATCHES=1 --set train.encoder_seq_len=512 --set train.seq_len=128 --max-steps 500 --set train.global_batch=256"
refute "$T5X: no warnings for its own variables" "warning"

last t5x_tp "$T5X" "${t5x[@]}" SLURM_JOB_NUM_NODES=2 T5_SIZE=xl PREC=fp32 BSIZE_PER_GPU=3 \
  TP_SIZE=2 NUM_MICROBATCHES=3 TRAIN_STEPS=7 ENC_SL=1024 DEC_SL=256 -- 4
expect "$T5X: \$1=4 on 2 nodes, TP_SIZE=2: global batch 3 x 8 / 2, mesh tensor 2, folder N2-n8" 0 \
  "PRETRAIN-xl-fp32-N2-n8-Step7-BS3-MBS3-SL1024_256-TP2-FP80/output-%j-%t.txt" \
  "-N 2 -n 8 --ntasks-per-node=4 '--ax-mesh=ici=-1,1,2;dcn=-1,1,1'" \
  "--experiment t5-xl" "--set train.precision=float32 --set NUM_MICROBATCHES=3" \
  "--set train.encoder_seq_len=1024 --set train.seq_len=256 --max-steps 7 --set train.global_batch=12"

last t5x_pack "$T5X" "${t5x[@]}" PACK=1 NUM_MICROBATCHES=0 CHECKPOINT_DISABLE=1 CONFIG=tiny-t5 -- 2
expect "$T5X: CONFIG wins over T5_SIZE, MBS 0 is 1, CHECKPOINT_DISABLE=1 turns periodic checkpoints off" 0 \
  "--experiment tiny-t5" "--set NUM_MICROBATCHES=1" "--set train.checkpoint_every=0"
refute "$T5X: PACK=1 (T5x's packing of full-length examples) keeps one example per row" \
  "pack_examples"
last t5x_pack2 "$T5X" "${t5x[@]}" PACK=4
expect "$T5X: PACK=4 packs 4 examples per row" 0 "--set train.pack_examples=4"

mkdir -p "$dir/pile-shards/train" && echo '{}' >"$dir/pile-shards/train/index.json"
t5x_map=("${t5x[@]/BASE_TFDS_DATA_DIR=*/DATASET_MAP=$dir/pile-shards:the_pile}")
last t5x_map "$T5X" "${t5x_map[@]}"
expect "$T5X: DATASET_MAP's one dir:name entry is the data (its train/ shards)" 0 \
  "--data $dir/pile-shards/train --tokenizer"
last t5x_map_container "$T5X" "${t5x_map[@]}" "CONTAINER=ghcr.io#nvidia/ax:latest" AX_BIN=
expect "$T5X: CONTAINER: T5x's mounts, the map entry at /t5x_home/datasets/<name>, in-container paths" 0 \
  "--container-image=ghcr.io#nvidia/ax:latest --container-mounts=$dir/ws:/t5x_home/workspace,$dir/spm.model:/t5x_home/vocab.model,$dir/pile-shards:/t5x_home/datasets/the_pile --export=ALL" \
  " ax-train --experiment t5-large --data /t5x_home/datasets/the_pile/train --tokenizer /t5x_home/vocab.model --run-dir /t5x_home/workspace/t5/run"
last t5x_container "$T5X" "${t5x[@]}" "CONTAINER=ghcr.io#nvidia/ax:latest" AX_BIN=
expect "$T5X: CONTAINER with BASE_TFDS_DATA_DIR: mounted at /t5x_home/datasets" 0 \
  ",$dir/shards:/t5x_home/datasets --export=ALL" "--data /t5x_home/datasets --tokenizer"

last t5x_bad "$T5X" "${t5x_map[@]}" "BASE_TFDS_DATA_DIR=$dir/shards" ENABLE_FP8=1 PREC=half \
  T5_SIZE=tiny TP_SIZE=3 BSIZE_PER_GPU=0 PACK=x ENC_SL=0 ADDITIONAL_CLI_ARGS=--gin.x=1 \
  GPUS_PER_NODE=2 MODEL_DIR=/abs -- 4 run.sh
expect "$T5X: every bad variable named at once, exit 2, nothing launched" 2 \
  "error: GPUS_PER_NODE: \$1='4' and GPUS_PER_NODE='2' differ" \
  "error: \$2='run.sh': T5x's BASE_SCRIPT; ax runs ax-train directly" \
  "error: MODEL_DIR='/abs': expected a path relative to BASE_T5X_WORKSPACE_DIR" \
  "error: BASE_TFDS_DATA_DIR and DATASET_MAP are both set: they are mutually exclusive" \
  "error: BSIZE_PER_GPU='0': expected a whole number >= 1" \
  "error: T5_SIZE='tiny': expected one of small|base|large|xl|xxl" \
  "error: PREC='half': expected bfloat16" \
  "error: ENABLE_FP8=1: FP8 training is not implemented in ax; expected 0" \
  "error: PACK='x': expected a whole number >= 0" "error: ENC_SL='0': expected a whole number >= 1" \
  "error: TP_SIZE='3': expected a divisor of GPUS_PER_NODE (4)" \
  "error: ADDITIONAL_CLI_ARGS='--gin.x=1': T5x's gin flags" \
  "12 problem(s) with the job's variables; nothing was launched"
refute "$T5X: bad variables: nothing launched" "ax-job: srun" "--experiment"

last t5x_none "$T5X" -i "PATH=$PATH" "HOME=$dir" AX_DRY_RUN=1 "AX_BIN=$dir/bin" \
  "DATASET_MAP=$dir/a:x,$dir/b:y" TP_SIZE=1 BSIZE_PER_GPU=1 -- 1
expect "$T5X: required variables and a two-entry DATASET_MAP named" 2 \
  "error: BASE_T5X_WORKSPACE_DIR is not set" "error: BASE_T5X_OUTPUTS_DIR is not set" \
  "error: MODEL_DIR is not set" "error: BASE_VOCAB_PATH is not set" \
  "error: DATASET_MAP='$dir/a:x,$dir/b:y': expected one entry /abs/shards_dir:name"
last t5x_nodata "$T5X" "${t5x_map[@]/DATASET_MAP=*/T5_SIZE=small}"
expect "$T5X: neither data variable is set" 2 \
  "error: neither BASE_TFDS_DATA_DIR nor DATASET_MAP is set"

last t5x_typos "$T5X" "${t5x[@]}" BSIZE_PER_GPUS=4 PERCORE_BATCH_SIZE=4 T5_SIZ=xl BASE_SCRIPT=x.sh
expect "$T5X: near misses and other scripts' variables are warned about" 0 \
  "warning: BASE_SCRIPT is a variable of example_pile.sub; $T5X does not read it" \
  "warning: BSIZE_PER_GPUS is set but $T5X does not read it; did you mean BSIZE_PER_GPU?" \
  "warning: T5_SIZ is set but $T5X does not read it; did you mean T5_SIZE?" \
  "warning: PERCORE_BATCH_SIZE is a variable of example_pile.sub; $T5X does not read it"

# singlenode_pretrain_pile.sh: T5x's eleven positional arguments, data and vocabulary from
# TFDS_DATA_DIR and VOCAB_PATH, the log named as T5x names it.
single_t5=(-i "PATH=$PATH" "HOME=$dir" "AX_BIN=$dir/bin" "TFDS_DATA_DIR=$dir/shards"
  "VOCAB_PATH=$dir/spm.model")
last t5_single singlenode_pretrain_pile.sh "${single_t5[@]}" -- base float32 2 6 "$dir/t5logs"
expect "singlenode_pretrain_pile.sh: T5x's positional arguments and defaults" 0 \
  "--nproc 2 --mesh 'ici=-1,1,1;dcn=1,1,1' --run-dir $dir/model_dir --" \
  "--experiment t5-base --data $dir/shards --tokenizer $dir/spm.model --run-dir $dir/model_dir --set train.global_batch=12 --set train.precision=float32 --set NUM_MICROBATCHES=1" \
  "Run succeeded! (outputs in $dir/model_dir, log $dir/t5logs/base_gpu_2_float32_gbs_12_fp8_0_fuseqkv_1_transbs_1.log)"
refute "singlenode_pretrain_pile.sh: the experiment's lengths and steps unless set" \
  "encoder_seq_len" "--max-steps"
last t5_single_env singlenode_pretrain_pile.sh "${single_t5[@]}" CONFIG=tiny-t5 TRAIN_STEPS=9 \
  ENC_SL=64 DEC_SL=16 -- small bf16 1 4 "$dir/t5logs" runs/m 2 0 0 0 2
expect "singlenode_pretrain_pile.sh: all eleven arguments, CONFIG, TRAIN_STEPS, ENC_SL, DEC_SL" 0 \
  "--run-dir $dir/runs/m" "--experiment tiny-t5" "--set NUM_MICROBATCHES=2" \
  "--set train.pack_examples=2 --set train.encoder_seq_len=64 --set train.seq_len=16 --max-steps 9" \
  "log $dir/t5logs/small_gpu_1_bf16_gbs_4_fp8_0_fuseqkv_0_transbs_0.log"
last t5_single_bad singlenode_pretrain_pile.sh -i "PATH=$PATH" "HOME=$dir" "AX_BIN=$dir/bin" \
  "TFDS_DATA_DIR=$dir/nope" -- tiny half 0 4 "$dir/t5logs" m x 1
expect "singlenode_pretrain_pile.sh: bad arguments named by position, missing VOCAB_PATH, exit 2" 2 \
  "error: TFDS_DATA_DIR='$dir/nope': no such directory" "error: VOCAB_PATH is not set" \
  "error: NUM_GPUS (\$3)='0'" "error: T5_SIZE (\$1)='tiny'" "error: PREC (\$2)='half'" \
  "error: NUM_MICROBATCHES (\$7)='x'" "error: ENABLE_FP8 (\$8)=1: FP8 training is not implemented"
refute "singlenode_pretrain_pile.sh: bad arguments: nothing launched" "--experiment"
last t5_single_usage singlenode_pretrain_pile.sh "${single_t5[@]}" -- small bf16 2 4
expect "singlenode_pretrain_pile.sh: fewer than five arguments: usage, exit 2" 2 \
  "usage: $SUB/singlenode_pretrain_pile.sh <T5_SIZE> <PREC> <NUM_GPUS> <BSIZE_PER_GPU> <LOG_DIR>"

# example_slurm_ft_frompile.sub (T5x's fine-tuning, issue 14): FT_TASK's directory of seq2seq
# shards, the weights of BASE_CHECKPOINTS_DIR, T5x's recipe and the task's lengths, the task metric
# when validation.jsonl is there, the folder as T5x names it, the container mounts, the refusals.
mkdir -p "$dir/ft/mnli2/train" "$dir/ft/squad1/train" "$dir/ft/lm/train" "$dir/pre/checkpoints" \
  "$dir/ws/pre"
for t in mnli2 squad1; do printf '{\n  "kind": "seq2seq"\n}\n' >"$dir/ft/$t/train/index.json"; done
printf '{\n  "kind": "lm"\n}\n' >"$dir/ft/lm/train/index.json"
: >"$dir/ft/squad1/validation.jsonl"
: >"$dir/ws/pre/config.json"
ft=(-i "PATH=$PATH" "HOME=$dir" AX_DRY_RUN=1 "AX_BIN=$dir/bin" "BASE_T5X_WORKSPACE_DIR=$dir/ws"
  "BASE_T5X_OUTPUTS_DIR=$dir/t5x-out" "BASE_TFDS_DATA_DIR=$dir/ft" "BASE_VOCAB_PATH=$dir/spm.model"
  "BASE_CHECKPOINTS_DIR=$dir/pre")
FT=example_slurm_ft_frompile.sub
recipe="--init-from $dir/pre --set model.dropout=0.1 --set optim.lr=0.001 --set optim.warmup_steps=0 --set optim.schedule=linear --set optim.min_lr_ratio=0.01"
last ft_defaults "$FT" "${ft[@]}"
expect "$FT: T5x's defaults (mnli2, large, 8 GPUs, 32 per GPU, MNLI's 512/16, 15000 steps)" 0 \
  "-o $dir/t5x-out/multinode/mnli2-large-bfloat16-N1-n8-BS32-MBS1-SL512_16-TP1-FP80/output-%j-%t.txt" \
  "--experiment t5-large --data $dir/ft/mnli2/train --tokenizer $dir/spm.model --run-dir $dir/ws/model_dir" \
  "--set train.encoder_seq_len=512 --set train.seq_len=16 --max-steps 15000 $recipe --set optim.decay_steps=60281 --set train.eval_every=1000 --set train.eval_batches=20 --set train.checkpoint_every=5000 --set train.pack_seq2seq=false --set train.global_batch=256" \
  "mnli2: no $dir/ft/mnli2/validation.jsonl: validation loss only (no task metric)"
refute "$FT: no warnings for its own variables, no task metric without validation.jsonl" \
  "warning" "eval_task"
last ft_squad "$FT" "${ft[@]}" FT_TASK=squad1 MODEL_DIR=ft/squad TRAIN_STEPS=9 PACK=1 \
  CONFIG=tiny-t5 BSIZE_PER_GPU=2 -- 2
expect "$FT: squad1: SQuAD's 956/256 and decay, packing, the metric on validation.jsonl" 0 \
  "multinode/squad1-large-bfloat16-N1-n2-BS2-MBS1-SL956_256-TP1-FP80/output-%j-%t.txt" \
  "--experiment tiny-t5 --data $dir/ft/squad1/train" "--run-dir $dir/ws/ft/squad" \
  "--set train.encoder_seq_len=956 --set train.seq_len=256 --max-steps 9 $recipe --set optim.decay_steps=27400" \
  "--set train.pack_seq2seq=true --set train.eval_task=squad --set train.eval_task_data=$dir/ft/squad1/validation.jsonl --set train.global_batch=4"
last ft_tp "$FT" "${ft[@]}" FT_TASK=squad1 TP_SIZE=2 ENC_SL=64 DEC_SL=8 -- 2
expect "$FT: TP_SIZE=2: no task metric during training (it needs whole models), said so" 0 \
  "SL64_8-TP2" "'--ax-mesh=ici=-1,1,2;dcn=-1,1,1'" \
  "warning: TP_SIZE=2: no squad metric during training"
refute "$FT: TP_SIZE=2: no eval_task" "eval_task"
ft_map=("${ft[@]/BASE_TFDS_DATA_DIR=*/DATASET_MAP=$dir/ft/squad1:squad1,$dir/ft/mnli2:mnli2}")
last ft_container "$FT" "${ft_map[@]}" "CONTAINER=ghcr.io#nvidia/ax:latest" AX_BIN=
expect "$FT: CONTAINER: DATASET_MAP's FT_TASK entry and the checkpoints mounted as T5x mounts them" 0 \
  "--container-mounts=$dir/ws:/t5x_home/workspace,$dir/spm.model:/t5x_home/vocab.model,$dir/pre:/t5x_home/workspace/checkpoints,$dir/ft/mnli2:/t5x_home/datasets/mnli2 --export=ALL" \
  " ax-train --experiment t5-large --data /t5x_home/datasets/mnli2/train --tokenizer /t5x_home/vocab.model --run-dir /t5x_home/workspace/model_dir" \
  "--init-from /t5x_home/workspace/checkpoints"
last ft_bad "$FT" "${ft[@]}" FT_TASK=mnli BASE_CHECKPOINTS_DIR="$dir/shards" PACK=2 MODEL_DIR=/x
expect "$FT: bad variables named, exit 2" 2 \
  "error: FT_TASK='mnli': expected one of mnli2|squad1" \
  "error: BASE_CHECKPOINTS_DIR='$dir/shards': expected the pretrained model" \
  "error: PACK='2': expected one of 0|1" "error: MODEL_DIR='/x': expected a path relative"
refute "$FT: bad variables: nothing launched" "--experiment"
last ft_bad_data "$FT" "${ft[@]/BASE_TFDS_DATA_DIR=*/BASE_TFDS_DATA_DIR=$dir}" \
  "BASE_CHECKPOINTS_DIR=$dir/ws/pre" MODEL_DIR=pre
expect "$FT: no FT_TASK directory; fine-tuning into the checkpoint's own directory" 2 \
  "error: BASE_TFDS_DATA_DIR='$dir': no mnli2/ in it" \
  "error: MODEL_DIR='pre' is BASE_CHECKPOINTS_DIR"
last ft_lm "$FT" "${ft_map[@]/DATASET_MAP=*/DATASET_MAP=$dir/ft/lm:mnli2}"
expect "$FT: text shards are refused (span corruption is not fine-tuning)" 2 \
  "error: mnli2's directory='$dir/ft/lm': train/ holds text shards, not seq2seq"
last ft_nomap "$FT" "${ft_map[@]/DATASET_MAP=*/DATASET_MAP=$dir/ft/squad1:squad1}"
expect "$FT: DATASET_MAP without FT_TASK's entry" 2 \
  "error: DATASET_MAP='$dir/ft/squad1:squad1': no entry named mnli2 (FT_TASK)"
last ft_warn "$T5X" "${t5x[@]}" FT_TASK=squad1 BASE_CHECKPOINTS_DIR="$dir/pre"
expect "$T5X: the fine-tuning variables are warned about in pretraining" 0 \
  "warning: FT_TASK is a variable of example_slurm_ft_frompile.sub; $T5X does not read it" \
  "warning: BASE_CHECKPOINTS_DIR is a variable of example_slurm_ft_frompile.sub"

# singlenode_ft_frompile.sh: T5x's thirteen positional arguments; the weights of MODEL_DIR_LOCAL,
# fine-tuned in <MODEL_DIR_LOCAL>_<FT_TASK> (MAKE_FT_DIR=false) or ft_<MODEL_DIR_LOCAL>_<date>.
single_ft=(-i "PATH=$PATH" "HOME=$dir" "AX_BIN=$dir/bin" "TFDS_DATA_DIR=$dir/ft"
  "VOCAB_PATH=$dir/spm.model")
last ft_single singlenode_ft_frompile.sh "${single_ft[@]}" -- mnli2 small bf16 2 4 "$dir/ftlogs" pre
expect "singlenode_ft_frompile.sh: T5x's positional arguments and defaults" 0 \
  "--nproc 2 --mesh 'ici=-1,1,1;dcn=1,1,1' --run-dir $dir/pre_mnli2 --" \
  "--experiment t5-small --data $dir/ft/mnli2/train --tokenizer $dir/spm.model --run-dir $dir/pre_mnli2 --set train.global_batch=8 --set train.precision=bfloat16 --set NUM_MICROBATCHES=1 --set train.encoder_seq_len=512 --set train.seq_len=16 --max-steps 15000 $recipe" \
  "log $dir/ftlogs/ft_small_gpu_2_bf16_gbs_8_fp8_0_fuseqkv_1_transbs_1.log"
last ft_single_all singlenode_ft_frompile.sh "${single_ft[@]}" CONFIG=tiny-t5 TRAIN_STEPS=5 \
  -- squad1 base fp32 1 3 "$dir/ftlogs" pre 2 true 0 0 0 1
expect "singlenode_ft_frompile.sh: all thirteen arguments, MAKE_FT_DIR=true, the squad metric" 0 \
  "--run-dir $dir/ft_pre_20" "--experiment tiny-t5" "--set NUM_MICROBATCHES=2" \
  "--max-steps 5" "--set train.pack_seq2seq=true --set train.eval_task=squad" \
  "log $dir/ftlogs/ft_base_gpu_1_fp32_gbs_3_fp8_0_fuseqkv_0_transbs_0.log"
last ft_single_bad singlenode_ft_frompile.sh "${single_ft[@]}" -- mnli small half 1 4 \
  "$dir/ftlogs" pre/checkpoints/x 0 yes 1 0 0 2
expect "singlenode_ft_frompile.sh: bad arguments named by position, exit 2" 2 \
  "error: FT_TASK (\$1)='mnli'" "error: PREC (\$3)='half'" \
  "error: MODEL_DIR_LOCAL (\$7)='pre/checkpoints/x': no such directory" \
  "error: MAKE_FT_DIR (\$9)='yes'" "error: ENABLE_FP8 (\$10)=1" "error: PACK (\$13)='2'"
refute "singlenode_ft_frompile.sh: bad arguments: nothing launched" "--experiment"
last ft_single_usage singlenode_ft_frompile.sh "${single_ft[@]}" -- mnli2 small bf16 2 4
expect "singlenode_ft_frompile.sh: fewer than six arguments: usage, exit 2" 2 \
  "usage: $SUB/singlenode_ft_frompile.sh <FT_TASK> <T5_SIZE> <PREC> <NUM_GPUS> <BSIZE_PER_GPU> <LOG_DIR>"

# run_lambada_singlenode.sh: Pax's six positional arguments, LOGDIR the run to evaluate with
# `ax-train eval --task lambada`; refused before anything starts when ax-train has no eval.
mkdir -p "$dir/lambada" && : >"$dir/lambada/lambada.jsonl"
last lambada run_lambada_singlenode.sh -i "PATH=$PATH" "HOME=$dir" "AX_BIN=$dir/bin" -- \
  "$dir/lambada" "$dir/spm.model" bfloat16 2 4 "$dir/pre"
expect "run_lambada_singlenode.sh: ax-train eval --task lambada on LOGDIR's run, 2 ranks" 0 \
  "--nproc 2 --mesh 'ici=-1,1,1;dcn=1,1,1' --run-dir $dir/pre/lambada -- $dir/bin/ax-train eval --run-dir $dir/pre --task lambada --data $dir/lambada/lambada.jsonl --batch 4" \
  "log $dir/pre/lambada_output.log"
mkdir -p "$dir/noeval" && cp "$dir/bin/ax-launch" "$dir/noeval/" && cp "$dir/bin/ax-launch" "$dir/noeval/ax-train"
last lambada_noeval run_lambada_singlenode.sh -i "PATH=$PATH" "HOME=$dir" "AX_BIN=$dir/noeval" -- \
  "$dir/lambada/lambada.jsonl" "$dir/spm.model" fp32 1 1 "$dir/pre"
expect "run_lambada_singlenode.sh: an ax-train without eval is named, exit 2" 2 \
  "error: $dir/noeval/ax-train has no 'eval' subcommand: Lambada needs 'ax-train eval --task lambada'"
last lambada_bad run_lambada_singlenode.sh -i "PATH=$PATH" "HOME=$dir" "AX_BIN=$dir/bin" \
  CONFIG=Lambada126M -- "$dir/nope" "$dir/spm" half 0 0.5 "$dir/ws"
expect "run_lambada_singlenode.sh: bad arguments named by position, exit 2" 2 \
  "warning: CONFIG is a variable of" "error: DATA_DIR (\$1)='$dir/nope': no lambada.jsonl" \
  "error: VOCAB_PATH (\$2)='$dir/spm'" "error: PRECISION (\$3)='half'" \
  "error: NUM_GPUS (\$4)='0'" "error: PERCORE_BATCH_SIZE (\$5)='0.5'" \
  "error: LOGDIR (\$6)='$dir/ws': no checkpoints/"
last lambada_usage run_lambada_singlenode.sh "${single_ft[@]}" -- "$dir/lambada" "$dir/spm.model"
expect "run_lambada_singlenode.sh: LOGDIR is required: usage, exit 2" 2 \
  "usage: $SUB/run_lambada_singlenode.sh <DATA_DIR> <VOCAB_PATH> <PRECISION> <NUM_GPUS> <PERCORE_BATCH_SIZE> <LOGDIR>"

# The job's last line names the rank that failed first, from the ranks' outputs.
printf '%s\n' "[r0] ax-train: x failed: Unavailable: all_reduce on gloo world (ranks 0,1,2,3) failed: stopping: rank 3 (host n2) stopped answering (rank 2 reports it)" >"$dir/out-0.txt"
printf '%s\n' "[r2] ax-train: x failed: Unavailable: all_reduce on gloo fsdp (ranks 2,3) failed: rank 3 (host n2) stopped answering first (peer closed the connection)" >"$dir/out-1.txt"
cause="$(source "$SUB/ax_job.sh" && ax_failure_cause "$dir/out-0.txt" "$dir/out-1.txt" "$dir/none")"
if [[ "$cause" == "rank 3 (host n2) stopped answering first (peer closed the connection)" ]]; then
  ok "ax_failure_cause finds the cause line among the outputs"
else
  bad "ax_failure_cause: '$cause'"
fi
# When srun killed the ranks before they agreed, the task srun saw end first (its messages since
# the step started, in the script's own output), with its stage from rank 0's mesh line.
printf '%s\n' "srun: error: n1: task 0: Killed" "ax-job: restart 1" >"$dir/batch.out"
from="$(stat -c %s "$dir/batch.out")"
printf '%s\n' "srun: launch/slurm: _step_signal: Terminating StepId=7.0" \
  "srun: error: n2: task 6: Killed" "srun: error: n1: tasks 0-1: Killed" >>"$dir/batch.out"
printf '%s\n' "job: rank 0/8 (local 0/4, node 0/2); mesh pipeline=4 data=1 fsdp=2 tensor=1 (this rank p0 d0 f0 t0)" >"$dir/out-m.txt"
first_end() {
  (source "$SUB/ax_job.sh" && AX_STEP_ERR_FILE="$dir/batch.out" AX_STEP_ERR_FROM="$from" \
    AX_LAUNCH_MODE="$1" ax_srun_first_end "${@:2}")
}
cause="$(first_end srun "$dir/out-0.txt" "$dir/out-m.txt")"
want="rank 6 (host n2, pipeline stage 3) ended first (srun: Killed), before the ranks agreed on a cause"
if [[ "$cause" == "$want" ]]; then
  ok "ax_srun_first_end names srun's first ended task since the step started, with its stage"
else
  bad "ax_srun_first_end: '$cause', not '$want'"
fi
cause="$(first_end srun "$dir/out-0.txt")"
if [[ "$cause" == "rank 6 (host n2) ended first (srun: Killed), before the ranks agreed on a cause" ]]; then
  ok "ax_srun_first_end without a mesh line: rank and host"
else
  bad "ax_srun_first_end without a mesh line: '$cause'"
fi
# Through the script's own functions: the step's srun messages land in the script's output file
# (here a file as under sbatch -o), and the last line names the first ended task.
printf '%s\n' "srun: error: n3: task 1: Killed" >"$dir/job.out"
(source "$SUB/ax_job.sh" && rc=0 && ax_run_step bash -c \
  'echo "srun: error: n2: task 6: Killed" >&2; echo "srun: error: n1: task 0: Killed" >&2; exit 9' ||
  rc=$? && ax_finish "$rc" "the outputs" "$dir/out-m.txt") >>"$dir/job.out" 2>&1
want="ax-job: error: the training step failed with status 9: rank 6 (host n2, pipeline stage 3) ended first (srun: Killed), before the ranks agreed on a cause; see the outputs"
if [[ "$(tail -n 1 "$dir/job.out")" == "$want" ]]; then
  ok "ax_run_step + ax_finish: the last line names srun's first ended task of this step"
else
  bad "ax_run_step + ax_finish: '$(tail -n 1 "$dir/job.out")', not '$want'"
fi
cause="$(first_end ax-launch)"
if [[ "$cause" == "the ax-launch of node 6 (host n2) ended first (srun: Killed)" ]]; then
  ok "ax_srun_first_end in ax-launch mode names the node's ax-launch"
else
  bad "ax_srun_first_end in ax-launch mode: '$cause'"
fi

# After the ranks stopped at a checkpoint: a preemption or the time limit requeues, a cancel
# does not (ax_should_requeue, sbatch/lib/preemption.sh). A stand-in scontrol says what Slurm
# would ("STATE REASON RESTARTS" as `show job -o` fields, nothing when Slurm does not answer);
# AX_STOP_SIGNAL is the first signal the batch script caught ("": the stop reached the steps only).
mkdir -p "$dir/scontrol-bin"
# shellcheck disable=SC2016 # the stub's own variables
printf '#!/bin/sh
set -- $FAKE_VIEW
[ -n "$1" ] && echo "JobId=7 JobName=x JobState=$1 Reason=$2 Dependency=(null) Requeue=1 Restarts=$3 BatchFlag=1"
exit 0
' \
  >"$dir/scontrol-bin/scontrol"
chmod +x "$dir/scontrol-bin/scontrol"
decisions=(
  "requeue|RUNNING None 0|USR1|the --signal=B:USR1 warning before the time limit, or USR1 at preemption"
  "requeue|RUNNING None 0||a stop sent to the steps only (GraceTime preemption's SIGTERM to the tasks)"
  "requeue|COMPLETING TimeLimit 0|TERM|the time limit's SIGTERM"
  "requeue|COMPLETING TimeLimit 0|USR1|the time limit after the USR1 warning"
  "requeue||USR1|USR1 while Slurm does not answer"
  "end|COMPLETING None 0|TERM|scancel JOB (Slurm ends the job at once, SIGTERM to the script)"
  "end|COMPLETING None 0|USR1|scancel during a stop that USR1 began"
  "end|RUNNING None 0|TERM|SIGTERM to the batch script alone, no USR1 before it"
  "end||TERM|SIGTERM while Slurm does not answer"
  "end|COMPLETING None 1|TERM|a job Slurm requeued itself (PreemptMode=REQUEUE)"
)
wrong=()
for d in "${decisions[@]}"; do
  IFS='|' read -r want view signal why <<<"$d"
  # shellcheck disable=SC2016 # expanded by the inner shell
  got="$(PATH="$dir/scontrol-bin:$PATH" FAKE_VIEW="$view" SLURM_JOB_ID=7 \
    bash -c 'source "$1/ax_job.sh" && AX_STOP_SIGNAL="$2" &&
      if ax_should_requeue; then echo requeue; else echo "end: $AX_NO_REQUEUE_WHY"; fi' _ \
    "$SUB" "$signal")"
  [[ "${got%%:*}" == "$want" ]] || wrong+=("$why: $got")
done
if ((${#wrong[@]} == 0)); then
  ok "ax_should_requeue: ${#decisions[@]} cases, a preemption or the time limit requeues, a cancel ends the job"
else
  bad "ax_should_requeue: ${wrong[*]}"
fi

# The mesh from the plan (sbatch/lib/plan.sh, docs/plan.md "The job scripts"), with the real
# ax-train: no mesh variable -> the plan's layout and micro-batches reach srun, named in one line;
# a mesh that fits is kept; one that fits nowhere is refused before srun with the smallest change
# that fits; AX_PLAN=0 and a GPU the table lacks leave the mesh as it was.
if [[ -x "$AXTRAIN" ]]; then
  mkdir -p "$dir/plan-bin"
  ln -sf "$AXTRAIN" "$dir/plan-bin/ax-train"
  cp "$dir/bin/ax-launch" "$dir/plan-bin/ax-launch"
  planned=("${common[@]}" "AX_BIN=$dir/plan-bin" SLURM_JOB_NUM_NODES=2 AX_PLAN_GPU=H100-80GB
    CONFIG=fuji-7B-v2)
  last plan_pick example_fuji.sub "${planned[@]}"
  mesh="$(grep -o 'mesh ici=[0-9,]*;dcn=[0-9,]* from the plan' "$dir/plan_pick.out" |
    cut -d' ' -f2)"
  expect "example_fuji.sub without a mesh variable: the plan's layout, in one line" 0 \
    "from the plan (no mesh variable set): data " "(the fastest that fits, of " \
    "--ax-mesh=${mesh:-none}" "--set NUM_MICROBATCHES="
  refute "example_fuji.sub: the plan replaced auto" "--ax-mesh=auto"
  [[ "$(grep -c 'from the plan' "$dir/plan_pick.out")" == 1 ]] ||
    bad "example_fuji.sub: the plan's choice is not one line"

  last plan_refuse example_fuji.sub "${planned[@]}" ICI_DP=8 ICI_FSDP=1 DCN_DP=2
  expect "example_fuji.sub: pure data parallelism of a 7B model on 80 GB is refused before srun" 2 \
    "ax-job: error: ICI_MESH_SHAPE=[8,1,1] DCN_MESH_SHAPE=[2,1,1] does not fit on 2 x 8 H100-80GB: it needs" \
    "; the smallest change that fits: ICI_MESH_SHAPE=[" "nothing was launched"
  refute "example_fuji.sub: no srun for a mesh that does not fit" "ax-job: srun"

  last plan_fits example_pile.sub "${planned[@]}" LOG_DIR_LOCAL=logs/x PREC=bfloat16 \
    GPUS_PER_NODE=8 PERCORE_BATCH_SIZE=2 'ICI_MESH_SHAPE=[1,8,1]'
  expect "example_pile.sub: a mesh that fits is kept, the plan's line says so" 0 \
    "mesh ici=1,8,1;dcn=-1,1,1 fits the plan: data 2 fsdp 8 tensor 1" \
    "--ax-mesh=ici=1,8,1;dcn=-1,1,1"

  # A five-number mesh (pipeline stages across the nodes) is planned too: its stages fit.
  last plan_five example_fuji.sub "${planned[@]}" DCN_PP=2 DCN_DP=1
  expect "example_fuji.sub: a pipelined mesh is checked by the plan and kept" 0 \
    "mesh ici=1,1,-1,1,1;dcn=2,1,1,1,1 fits the plan: data 1 fsdp 8 tensor 1 pipeline 2" \
    "--ax-mesh=ici=1,1,-1,1,1;dcn=2,1,1,1,1"

  last plan_off example_fuji.sub "${planned[@]}" AX_PLAN=0
  expect "AX_PLAN=0: not planned, the plugin's auto mesh" 0 "mesh auto: not planned (AX_PLAN=0)" \
    "--ax-mesh=auto"
  last plan_unknown example_fuji.sub "${planned[@]}" "AX_PLAN_GPU=NVIDIA V100"
  expect "a GPU the plan's table lacks: not planned, said in one line" 0 \
    "mesh auto: not planned (ax-train plan gave no layout, status 2:" "--ax-mesh=auto"
else
  bad "no ax-train to plan with (the second argument)"
fi

# Every AX_* name the C++ sources read (a string literal that is exactly the name) is one
# the job scripts know (AX_KNOWN_ENV, sbatch/lib/lint.sh), so that it is never warned about as
# unread.
known="$(sed -n '/^AX_KNOWN_ENV=/,/"$/p' "$SUB/lib/lint.sh")"
missing=()
while read -r name; do
  grep -qw -- "$name" <<<"$known" || missing+=("$name")
done < <(grep -rhE '"AX_[A-Z0-9_]+"' --include=*.cc --include=*.h \
  "$REPO"/{common,trainer,launcher,topology,job_context,datasets,spank_plugin} | grep -vE '^\s*//' |
  grep -oE '"AX_[A-Z0-9_]+"' | tr -d '"' | sort -u)
if ((${#missing[@]} == 0)) && [[ -n "$known" ]]; then
  ok "AX_KNOWN_ENV (lib/lint.sh) lists every AX_* the sources read"
else
  bad "AX_KNOWN_ENV (lib/lint.sh) lacks: ${missing[*]:-<no AX_KNOWN_ENV found>}"
fi

echo "job_scripts_test: $passed checks passed, $failed failed"
((failed == 0 && passed > 0))
