#!/usr/bin/env bash
# shellcheck disable=SC2034  # `vars` is read by submit_sub (sbatch_lib.sh)
# A missing or malformed variable stops the job scripts before srun: the job FAILS with exit
# status 2, its output names every bad variable and what it expects, and no step ran (no output
# files, no "ax-job: srun" line).
#   sbatch_validate.sh BUILD_DIR REPO_DIR
source "$(dirname "$0")/lib.sh" "$@"
source "$(dirname "$0")/train_lib.sh"
source "$(dirname "$0")/sbatch_lib.sh"
require_cluster
dir="$(scratch)"
mkdir -p "$dir/data/shards" "$dir/empty"
: >"$dir/data/spm.model"
echo '{}' >"$dir/data/shards/index.json" # enough for the script; ax-train never runs

# Every case is submitted at once (as $JOB-N, so that --dependency=singleton does not hold them
# one after another) and checked once all have ended: none may have run a step.
case_no=0
cases=()
# check_rejected WHAT SCRIPT EXPECTED_LINE... (the job's environment in `vars`): submits the case.
check_rejected() {
  local what="$1" script="$2" id
  shift 2
  case_no=$((case_no + 1))
  id="$(SUB_NAME="$JOB-$case_no" submit_sub "$dir/case$case_no.out" -N 1 "$SUB_DIR/$script")"
  printf '%s\n' "$what" "$@" >"$dir/case$case_no.expected"
  cases+=("$id")
}

# check_cases: once every case's job has ended, each FAILED 2:0, its output names every
# EXPECTED_LINE, and no case ran a step (no srun line, no task output files at all).
check_cases() {
  local i id out what lines line missing states=()
  for id in "${cases[@]}"; do
    end_job "$id" 30
    states+=("$JOB_STATE $JOB_EXIT")
  done
  for ((i = 1; i <= case_no; i++)); do
    id="${cases[i - 1]}" out="$dir/case$i.out"
    mapfile -t lines <"$dir/case$i.expected"
    what="${lines[0]}" missing=()
    read -r JOB_STATE JOB_EXIT <<<"${states[i - 1]}"
    for line in "${lines[@]:1}"; do grep -qF -- "$line" "$out" || missing+=("$line"); done
    if [[ "$JOB_STATE" == FAILED && "$JOB_EXIT" == 2:0 && ${#missing[@]} == 0 ]] &&
      ! grep -q '^ax-job: srun' "$out" && [[ -z "$(ls -A "$dir/ws/output" 2>/dev/null)" ]]; then
      ok "$what: job $id FAILED 2:0 before srun, naming it"
    else
      bad "$what: job $id $JOB_STATE $JOB_EXIT; lines missing: ${missing[*]:-none}"
      show_tail "$out" 15
      ls "$dir/ws/output" 2>/dev/null | sed 's/^/  task output: /'
    fi
  done
}

mapfile -t vars < <(sub_env "$dir" logs/x PREC= GPUS_PER_NODE=two "ICI_MESH_SHAPE=[1,x,1]")
check_rejected "PREC missing, GPUS_PER_NODE and ICI_MESH_SHAPE malformed" example_pile.sub \
  "ax-job: error: PREC is not set: expected bfloat16" \
  "ax-job: error: GPUS_PER_NODE='two': expected a whole number >= 1" \
  "ax-job: error: ICI_MESH_SHAPE='[1,x,1]': expected three numbers data,fsdp,tensor" \
  "3 problem(s) with the job's variables; nothing was launched"

mapfile -t vars < <(sub_env "$dir" logs/x "BASE_VOCAB_PATH=$dir/missing.model" \
  "BASE_TFDS_DATA_DIR=$dir/empty" PERCORE_BATCH_SIZE=0 LOG_DIR_LOCAL=/abs ENABLE_FP8=1 PREC=fp16)
check_rejected "missing vocabulary, no shards, bad batch, absolute log dir, FP8, PREC=fp16" \
  example_pile.sub \
  "BASE_VOCAB_PATH='$dir/missing.model': no such readable file" \
  "BASE_TFDS_DATA_DIR='$dir/empty': expected ax-data shards" \
  "PERCORE_BATCH_SIZE='0': expected a number > 0" \
  "LOG_DIR_LOCAL='/abs': expected a path relative to BASE_WORKSPACE_DIR" \
  "ENABLE_FP8=1: FP8 training is not implemented in ax" \
  "PREC='fp16': expected bfloat16 (or bf16: bf16 activations over fp32 master weights) or float32"

mapfile -t vars < <(sub_env "$dir" logs/x BASE_WORKSPACE_DIR= AX_LAUNCH_MODE=mpirun)
check_rejected "BASE_WORKSPACE_DIR missing, AX_LAUNCH_MODE unknown" example_pile.sub \
  "BASE_WORKSPACE_DIR is not set: expected an absolute directory" \
  "AX_LAUNCH_MODE='mpirun': expected one of srun|ax-launch"

# Both names of the step count, set to different values (issue 11: the fuji script read only
# MAX_STEP and silently ran the experiment's step count); the pile variables sub_env sets and a
# typo are warned about, not refused.
mapfile -t vars < <(sub_env "$dir" logs/x CONFIG=tiny-llama MAX_STEP=5 MAX_STEPS=6 SEQ_LENGTH=64)
check_rejected "example_fuji.sub: MAX_STEP and MAX_STEPS differ" example_fuji.sub \
  "ax-job: error: MAX_STEPS='6' and MAX_STEP='5' are both set, to different step counts" \
  "ax-job: warning: PERCORE_BATCH_SIZE is a variable of example_pile.sub; example_fuji.sub does not read it" \
  "ax-job: warning: SEQ_LENGTH is set but example_fuji.sub does not read it; did you mean SEQ_LEN?" \
  "1 problem(s) with the job's variables; nothing was launched"

mapfile -t vars < <(sub_env "$dir" logs/x CONFIG=tiny-llama GA=0 ICI_PP=2 ICI_DP=-1 ICI_FSDP=-1)
check_rejected "example_fuji.sub: GA=0, two -1 in the five-axis ICI vector" example_fuji.sub \
  "GA='0': expected a whole number >= 1" \
  "mesh ICI_PP,ICI_DP,ICI_FSDP,ICI_SQP,ICI_TP=2,-1,-1,1,1 / DCN_PP,DCN_DP,DCN_FSDP,DCN_SQP,DCN_TP=1,-1,1,1,1: at most one -1 per vector"
check_cases
finish
