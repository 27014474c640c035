#!/usr/bin/env bash
# The job scripts' variable checks without Slurm (AX_DRY_RUN=1 prints the srun command and exits
# 0; a bad variable exits 2 before it): MAX_STEPS and MAX_STEP are both accepted by every script
# (example_fuji.sub silently ignored MAX_STEPS), both set to different values is refused naming
# both, PREC/PRECISION bfloat16 and float32 (bf16, fp32) reach ax-train as train.precision and
# anything else is refused, and a variable that looks meant for the script but that it does not
# read is warned about (a name close to one it reads, another script's variable, an AX_* that
# nothing reads). The list of AX_* names in sbatch/ax_job.sh must cover every one the C++ sources
# read.
#   job_scripts_test.sh REPO_DIR
set -uo pipefail
REPO="${1:?usage: $0 REPO_DIR}"
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

# The job's last line names the rank that failed first, from the ranks' outputs.
printf '%s\n' "[r0] ax-train: x failed: Unavailable: all_reduce on gloo world (ranks 0,1,2,3) failed: stopping: rank 3 (host n2) stopped answering (rank 2 reports it)" >"$dir/out-0.txt"
printf '%s\n' "[r2] ax-train: x failed: Unavailable: all_reduce on gloo fsdp (ranks 2,3) failed: rank 3 (host n2) stopped answering first (peer closed the connection)" >"$dir/out-1.txt"
cause="$(source "$SUB/ax_job.sh" && ax_failure_cause "$dir/out-0.txt" "$dir/out-1.txt" "$dir/none")"
if [[ "$cause" == "rank 3 (host n2) stopped answering first (peer closed the connection)" ]]; then
  ok "ax_failure_cause finds the cause line among the outputs"
else
  bad "ax_failure_cause: '$cause'"
fi

# Every AX_* name the C++ sources read (a string literal that is exactly the name) is one
# ax_job.sh knows, so that it is never warned about as unread.
known="$(sed -n '/^AX_KNOWN_ENV=/,/"$/p' "$SUB/ax_job.sh")"
missing=()
while read -r name; do
  grep -qw -- "$name" <<<"$known" || missing+=("$name")
done < <(grep -rhE '"AX_[A-Z0-9_]+"' --include=*.cc --include=*.h \
  "$REPO"/{common,trainer,launcher,topology,datasets,spank_plugin} | grep -vE '^\s*//' |
  grep -oE '"AX_[A-Z0-9_]+"' | tr -d '"' | sort -u)
if ((${#missing[@]} == 0)) && [[ -n "$known" ]]; then
  ok "AX_KNOWN_ENV in ax_job.sh lists every AX_* the sources read"
else
  bad "AX_KNOWN_ENV in ax_job.sh lacks: ${missing[*]:-<no AX_KNOWN_ENV found>}"
fi

echo "job_scripts_test: $passed checks passed, $failed failed"
((failed == 0 && passed > 0))
