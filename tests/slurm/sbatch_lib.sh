# shellcheck shell=bash disable=SC2034,SC2154  # sourced; uses the caller's `vars`
# Sourced (after lib.sh and train_lib.sh) by the job-script tests of the slurm suite: submitting
# sbatch/*.sub with tiny CPU runs and checking what lands where.
#   sub_env DIR LOG [VAR=VALUE...]  -> the environment of a tiny example_pile.sub run
#   t5x_env DIR MODEL_DIR [VAR=...] -> the same for example_slurm_pretrain_pile.sub (tiny-t5)
#   submit_sub OUT ARGS... SCRIPT   -> sbatch -J $JOB -o OUT ... with the array `vars` exported
#                                      (-J $SUB_NAME when set: a job to run beside another)
#   end_job ID SECONDS              -> wait_job; the final state in JOB_STATE, ExitCode in JOB_EXIT
#   job_completed WHAT ID OUT OUT0  -> ok/bad: COMPLETED 0:0, else the outputs and daemon logs
#   step_losses RUN_DIR             -> "step loss" lines, as logged (exact text of the floats)
#   loss_falls WHAT RUN_DIR         -> ok/bad: the last logged loss is below the first
#   wait_step ID OUT STEP           -> until rank 0's output shows STEP (false: 60 s, or ended)
#   rank_pids RUN_DIR RANK          -> pids of the ax-train ranks RANK of the run in RUN_DIR
#   start_requeued ID [HOOK]        -> once job ID is requeued (or ended), runs HOOK and starts
#                                      it without the 2-minute hold; the state in REQUEUE_STATE
#   reference_start WHAT RUN OUT OUT0 ARGS... -> submits the uninterrupted job as $JOB-ref, to run
#                                      beside the test's next job
#   reference_wait                  -> job_completed for that job; its step_losses in REF
#   preempt_resume MODE ...         -> ok/bad: a job stopped by USR1 requeues, resumes and logs
#                                      the uninterrupted job's losses
#   losses_are_reference WHAT REF RUN STEPS -> ok/bad: RUN's losses are REF, each step once
#   run_dir_complete WHAT RUN STEPS -> ok/bad: TensorBoard events and one metrics line per step

SUB_DIR="$REPO/sbatch"

# One VAR=VALUE per line (read with mapfile, pass with env): tiny-gpt, 1 CPU thread per rank, no
# evaluation, GPUS_PER_NODE=2 x PERCORE_BATCH_SIZE=4; the extra VAR=VALUEs come last and win.
sub_env() {
  local dir="$1" log="$2"
  shift 2
  printf '%s\n' "AX_CPU_THREADS=1" "AX_BIN=$BUILD" "BASE_WORKSPACE_DIR=$dir/ws" \
    "BASE_TFDS_DATA_DIR=$dir/data/shards" "BASE_VOCAB_PATH=$dir/data/spm.model" \
    "LOG_DIR_LOCAL=$log" "OUTPUT_DIR=output" "PREC=bfloat16" "GPUS_PER_NODE=2" \
    "PERCORE_BATCH_SIZE=4" "CONFIG=tiny-gpt" \
    "AX_TRAIN_ARGS=--device=cpu --set=train.eval_every=0 --set=train.checkpoint_every=0" "$@"
}

# t5x_env DIR MODEL_DIR [VAR=VALUE...]: the environment of a tiny example_slurm_pretrain_pile.sub
# run on DIR/data (prepare_data DIR/data 100: a tokenizer with T5's sentinels): tiny-t5 (CONFIG;
# T5_SIZE=small names the output folder), ENC_SL 64, DEC_SL 16, BSIZE_PER_GPU=4, 1 CPU thread per
# rank, no evaluation; the extra VAR=VALUEs come last and win.
t5x_env() {
  local dir="$1" model_dir="$2"
  shift 2
  printf '%s\n' "AX_CPU_THREADS=1" "AX_BIN=$BUILD" "BASE_T5X_WORKSPACE_DIR=$dir/ws" \
    "BASE_T5X_OUTPUTS_DIR=$dir/outputs" "BASE_TFDS_DATA_DIR=$dir/data/shards" \
    "BASE_VOCAB_PATH=$dir/data/spm.model" "MODEL_DIR=$model_dir" "CONFIG=tiny-t5" "T5_SIZE=small" \
    "PREC=bfloat16" "BSIZE_PER_GPU=4" "ENC_SL=64" "DEC_SL=16" \
    "AX_TRAIN_ARGS=--device=cpu --set=train.eval_every=0 --set=train.checkpoint_every=0" "$@"
}

# submit_sub OUT [sbatch args...] SCRIPT: sbatch with the caller's array `vars` (VAR=VALUE) in
# the environment it exports to the job; prints the job id. The job is named $JOB, or SUB_NAME
# when set (a $JOB-SOMETHING that lets the job run beside the test's others: the job scripts'
# --dependency=singleton holds back only jobs of one name).
submit_sub() {
  local out="$1"
  shift
  env "${vars[@]}" timeout -k 5 "$CLIENT_TIMEOUT" sbatch --parsable -J "${SUB_NAME:-$JOB}" \
    -o "$out" "$@" 2>&1
}

# reference_start WHAT RUN_DIR BATCH_OUT RANK0_PATTERN [sbatch args...] SCRIPT: submits the
# uninterrupted job of a preemption test (the caller's `vars`; its run directory RUN_DIR, rank 0's
# output RANK0_PATTERN with %j the job id) under the name $JOB-ref: the job scripts'
# --dependency=singleton holds back only jobs of one name, so it runs on two other nodes beside
# the preempted job that the test submits next, through that job's waits (the signal, the
# requeue, the restart) instead of before them. reference_wait collects it.
reference_start() {
  REF_WHAT="$1" REF_RUN="$2" REF_OUT="$3" REF_PATTERN="$4" REF="" REF_OK=""
  shift 4
  REF_ID="$(SUB_NAME="$JOB-ref" submit_sub "$REF_OUT" "$@")"
}

# reference_wait: once, waits for the job reference_start submitted and checks that it COMPLETED
# 0:0 (job_completed, as WHAT); then REF holds its step_losses. False when it did not complete.
reference_wait() {
  if [[ -z "$REF_OK" ]]; then
    end_job "$REF_ID" 180
    if job_completed "$REF_WHAT" "$REF_ID" "$REF_OUT" "${REF_PATTERN//%j/$REF_ID}"; then
      REF_OK=yes
      REF="$(step_losses "$REF_RUN")"
    else
      REF_OK=no
    fi
  fi
  [[ "$REF_OK" == yes ]]
}

end_job() {
  JOB_STATE="$(wait_job "$1" "$2")"
  JOB_EXIT="$(job_field "$1" ExitCode)"
}

step_losses() {
  python3 -c '
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "loss" in r:
        print(r["step"], repr(r["loss"]))
' "$1/metrics.jsonl" 2>/dev/null
}

loss_falls() {
  local what="$1" run="$2" first last
  first="$(step_losses "$run" | head -n 1 | cut -d' ' -f2)"
  last="$(step_losses "$run" | tail -n 1 | cut -d' ' -f2)"
  if [[ -n "$first" && -n "$last" ]] &&
    awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }'; then
    ok "$what: loss falls from $first to $last"
  else
    bad "$what: loss '$first' -> '$last' (did not fall)"
  fi
}

# expect_files WHAT FILE...: every FILE exists.
expect_files() {
  local what="$1" f missing=()
  shift
  for f in "$@"; do [[ -e "$f" ]] || missing+=("$f"); done
  if ((${#missing[@]} == 0)); then
    ok "$what: $# files where the variables say"
  else
    bad "$what: missing ${missing[*]}"
  fi
}

# job_completed WHAT ID BATCH_OUT RANK0_OUT: after end_job, ok when the job ended COMPLETED 0:0;
# otherwise bad, with the tails of the batch script's and rank 0's output and the daemons' log
# lines for the job, and status 1.
job_completed() {
  local what="$1" id="$2"
  if [[ "$JOB_STATE" == COMPLETED && "$JOB_EXIT" == 0:0 ]]; then
    ok "$what: job $id COMPLETED 0:0"
    return 0
  fi
  bad "$what: job $id ended $JOB_STATE, exit $JOB_EXIT"
  show_tail "$3"
  show_tail "$4"
  daemon_log_lines "$id"
  return 1
}

show_tail() { sed 's/^/  | /' "$1" 2>/dev/null | tail -n "${2:-25}"; }

# wait_step ID OUT STEP: until rank 0's output OUT shows STEP (ax-launch prefixes its lines with
# [r0]); false after 60 s or when job ID ended first (its state asked once a second).
wait_step() {
  local id="$1" out="$2" step="$3" start=$SECONDS i=0
  until grep -Eq "^(\[r0\] )?step +$step/" "$out" 2>/dev/null; do
    if ((i++ % 10 == 9)); then
      case "$(job_field "$id" JobState)" in
        COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL) return 1 ;;
      esac
    fi
    ((SECONDS - start > 60)) && return 1
    sleep 0.1
  done
}

# rank_pids RUN_DIR RANK: the pids of the ax-train processes with AX_RANK=RANK whose command line
# names RUN_DIR (a test's own run directory).
rank_pids() {
  local f p
  while read -r f; do
    p="${f%/cmdline}"
    tr '\0' '\n' 2>/dev/null <"$p/environ" | grep -qx "AX_RANK=$2" && echo "${p#/proc/}"
  done < <(grep -lF -- "$1" /proc/[0-9]*/cmdline 2>/dev/null)
}

# kill_rank RUN_DIR RANK ID [OUT...]: kill -9 the ax-train process of rank RANK in RUN_DIR, wait
# (60 s at most) until job ID has ended, and set KILL_TOOK to the seconds that took. Without such a
# process the test fails there: it shows the tails of the OUT files and ends.
kill_rank() {
  local run="$1" rank="$2" id="$3" victim f killed_at
  shift 3
  victim="$(rank_pids "$run" "$rank" | head -n 1)"
  if [[ -z "$victim" ]]; then
    bad "no ax-train process with AX_RANK=$rank (job $id $(job_field "$id" JobState))"
    for f in "$@"; do show_tail "$f"; done
    finish
    exit
  fi
  kill -9 "$victim"
  killed_at=$SECONDS
  end_job "$id" 60
  KILL_TOOK=$((SECONDS - killed_at))
}

# start_requeued ID [HOOK]: after a stop request to a job that requeues itself, waits (60 s at
# most) until it is PENDING with Restarts=1, or has ended without a requeue (the signal came too
# late, or was lost; REQUEUE_STATE then says how, "" when the job is gone), runs the command HOOK
# (if given) while the requeued job waits, and lifts Slurm's 2-minute hold on it.
start_requeued() {
  local id="$1" hook="${2:-}" deadline=$((SECONDS + 60)) seen line
  while ((SECONDS < deadline)); do
    line="$(job_line "$id")"
    REQUEUE_STATE="$(line_field "$line" JobState)"
    [[ "$(line_field "$line" Restarts)" == 1 && "$REQUEUE_STATE" == PENDING ]] && break
    [[ "$REQUEUE_STATE" == COMPLETED || "$REQUEUE_STATE" == FAILED || -z "$REQUEUE_STATE" ]] &&
      return 0
    sleep 0.1
  done
  seen=$EPOCHSECONDS
  [[ -z "$hook" ]] || "$hook"
  # Not in the same second: the nodes revoked the job's credentials when it was requeued (at the
  # controller's time of the requeue request), and a node refuses a credential created in the
  # same second as that revocation ("already killed, do not launch batch job"; the job then ends
  # FAILED 1:0 without running). Slurm's 2-minute hold exists for this. PENDING (no longer
  # COMPLETING) means every node has ended the old run and revoked; the credential of the start
  # below is made after this update, so a clock second past the one that showed PENDING is
  # enough (a fixed 3 s before; `StartTime=now+1` would leave the start to the scheduler's next
  # periodic pass, up to a minute later).
  while ((EPOCHSECONDS <= seen)); do sleep 0.05; done
  t scontrol update JobId="$id" StartTime=now 2>/dev/null
}

# preempt_resume MODE STEPS REF RUN_DIR OUT_PATTERN BATCH_OUT SBATCH_ARGS...: submits the job (with
# the caller's `vars`), sends USR1 to its batch script once rank 0's output (OUT_PATTERN, %j the
# job id) shows step 8, and checks that the job requeued once and COMPLETED 0:0, that the ranks
# stopped at a step with a checkpoint that restart 1 resumed from, that the batch script logged
# the signal, the requeue and the restart, and that RUN_DIR's losses are REF (the uninterrupted
# job's step_losses), exactly. REF `-`: the losses of the job reference_start submitted, waited
# for at the end (reference_wait; when that job failed, its failure is the verdict).
preempt_resume() {
  local mode="$1" steps="$2" ref="$3" run="$4" pattern="$5" batch_out="$6" id out start stopped
  shift 6
  id="$(submit_sub "$batch_out" "$@")"
  out="${pattern//%j/$id}"
  start=$SECONDS
  wait_step "$id" "$out" 8 || true
  t scancel --batch --signal=USR1 "$id"
  # The script requeues the job; Slurm would hold it back for 2 minutes.
  start_requeued "$id"
  if [[ -z "$REQUEUE_STATE" ]]; then
    bad "$mode mode: job $id is gone (it ended without a requeue more than MinJobAge ago)"
    show_tail "$batch_out"
    return
  fi
  end_job "$id" 90
  local restarts
  restarts="$(job_field "$id" Restarts)"
  if [[ "$JOB_STATE" == COMPLETED && "$JOB_EXIT" == 0:0 && "$restarts" == 1 ]]; then
    ok "$mode mode: USR1 -> requeued once -> job $id COMPLETED 0:0 ($((SECONDS - start)) s)"
  else
    bad "$mode mode: job $id ended $JOB_STATE, exit $JOB_EXIT, restarts '$restarts'"
    show_tail "$batch_out"
    show_tail "$out"
    daemon_log_lines "$id"
    return
  fi
  stopped="$(grep -Eo 'stopped after step [0-9]+ on signal 10' "$out" | grep -Eo '[0-9]+' |
    head -n 1)"
  if [[ -n "$stopped" ]] && ((stopped < steps)) &&
    grep -q "resumed from step $stopped " "$out" &&
    grep -q "restart 1 of Slurm job $id (SLURM_RESTART_COUNT)" "$out"; then
    ok "$mode mode: stopped at step $stopped with a checkpoint; restart 1 resumed from it"
  else
    bad "$mode mode: no stop/resume at the same step (stopped '${stopped}')"
    grep -E 'stopped|resumed|restart' "$out" | sed 's/^/  | /'
  fi
  if grep -q 'caught SIGUSR1' "$batch_out" && grep -q "requeueing job $id" "$batch_out" &&
    grep -q 'restart 1 (SLURM_RESTART_COUNT)' "$batch_out"; then
    ok "$mode mode: the batch script caught USR1, forwarded it, requeued, and logged restart 1"
  else
    bad "$mode mode: the batch output lacks the signal/requeue/restart lines"
    show_tail "$batch_out"
  fi
  if [[ "$ref" == - ]]; then
    reference_wait || return
    ref="$REF"
  fi
  losses_are_reference "$mode mode" "$ref" "$run" "$steps"
}

# losses_are_reference WHAT REF RUN_DIR STEPS: ok/bad: RUN_DIR's step_losses are REF (the
# uninterrupted job's), each of steps 1..STEPS once.
losses_are_reference() {
  local what="$1" ref="$2" run="$3" steps="$4" got
  got="$(step_losses "$run")"
  if [[ -n "$ref" && "$got" == "$ref" ]]; then
    ok "$what: steps 1..$steps logged once each, losses identical to the uninterrupted job"
  else
    bad "$what: the losses differ from the uninterrupted job's"
    diff <(echo "$ref") <(echo "$got") | head -n 10 | sed 's/^/  | /'
  fi
}

# run_dir_complete WHAT RUN_DIR STEPS: RUN_DIR has TensorBoard events and one metrics.jsonl loss
# line per step.
run_dir_complete() {
  local what="$1" run="$2" steps="$3" n_steps
  if compgen -G "$run/tensorboard/events.out.tfevents.*" >/dev/null; then
    ok "$what: TensorBoard events in the run directory"
  else
    bad "$what: no TensorBoard events in $run"
  fi
  n_steps="$(step_losses "$run" | wc -l)"
  if ((n_steps == steps)); then
    ok "$what: metrics.jsonl has one line per step ($steps)"
  else
    bad "$what: metrics.jsonl has $n_steps loss lines, want $steps"
  fi
}
