# shellcheck shell=bash
# Part of sbatch/ax_job.sh (which sources it): running the step and ending the job. The
# preemption protocol (a stop request, USR1 or TERM, is forwarded to the step's ranks, which
# checkpoint and exit 75; after a preemption the job then requeues itself, after a cancel it
# ends: ax_should_requeue), the single-node scripts' run, the cause of a failed run from the
# ranks' outputs, and the job's first line (ax_job_header).

AX_EXIT_STOPPED=75 # ax-train (and ax-launch): stopped at a checkpoint, run again to resume

AX_STEP_PID=""
AX_STOP_SIGNAL=""
AX_FORWARD="${AX_FORWARD:-scancel}" # scancel: to every step of the job; kill: to our child only

# A stop request (USR1 from `--signal=B:USR1@s` or at preemption, TERM from scancel or the time
# limit): ask every rank to checkpoint at the next step boundary. The step's tasks get SIGUSR1
# through Slurm (ax-train and ax-launch treat USR1 and TERM alike); without Slurm the launcher is
# our child. Whether the job then requeues is ax_finish's to decide (ax_should_requeue).
ax_on_stop_signal() {
  if [[ -n "$AX_STOP_SIGNAL" ]]; then
    ax_log "caught SIG$1 again; the ranks are already stopping"
    return
  fi
  AX_STOP_SIGNAL="$1"
  # AX_STOP_WHAT: what the script's step does on a stop request (tokenize.sub sets its own).
  local after="the job then requeues itself (a preemption)"
  [[ "$1" != USR1 ]] && after="a cancel then ends the job; the time limit requeues it"
  ax_log "caught SIG$1 at $(date +%T):" \
    "${AX_STOP_WHAT:-every rank checkpoints at the next step boundary and exits}; $after"
  if [[ "$AX_FORWARD" == scancel && -n "${SLURM_JOB_ID-}" && -n "$AX_STEP_PID" ]] &&
    timeout 30 scancel --signal=USR1 "$SLURM_JOB_ID" 2>/dev/null; then
    return
  fi
  [[ -n "$AX_STEP_PID" ]] && kill -USR1 "$AX_STEP_PID" 2>/dev/null
}

# A stop request that arrives while the script still checks its variables is remembered (not
# fatal, as bash's default for USR1 and TERM would be); the step then does not start.
trap 'AX_STOP_SIGNAL="${AX_STOP_SIGNAL:-USR1}"' USR1
trap 'AX_STOP_SIGNAL="${AX_STOP_SIGNAL:-TERM}"' TERM

# ax_run_step CMD...: runs CMD in the background (so bash runs the traps while it waits) and
# returns its exit status; 75 without running it when a stop was requested before.
ax_run_step() {
  if [[ -n "$AX_STOP_SIGNAL" ]]; then
    ax_log "SIG$AX_STOP_SIGNAL arrived before the step started; not starting it"
    return "$AX_EXIT_STOPPED"
  fi
  trap 'ax_on_stop_signal USR1' USR1
  trap 'ax_on_stop_signal TERM' TERM
  trap 'ax_on_stop_signal INT' INT
  # Where srun's own messages ("srun: error: n2: task 2: Killed") go from here: this script's
  # output file, read from this offset on when the ranks' outputs name no cause (ax_srun_first_end).
  AX_STEP_ERR_FILE="$(readlink "/proc/$BASHPID/fd/2" 2>/dev/null || true)"
  if [[ -f "$AX_STEP_ERR_FILE" ]]; then
    AX_STEP_ERR_FROM="$(stat -c %s "$AX_STEP_ERR_FILE" 2>/dev/null || echo 0)"
  else
    AX_STEP_ERR_FILE=""
  fi
  "$@" &
  AX_STEP_PID=$!
  local rc=0
  while :; do
    rc=0
    wait "$AX_STEP_PID" || rc=$?
    # wait returns early (status > 128) when a trapped signal arrives; the step is still running.
    kill -0 "$AX_STEP_PID" 2>/dev/null || break
  done
  # Another signal now (a repeated USR1 while the script requeues the job) must not kill it.
  trap ':' USR1 TERM
  trap - INT
  return "$rc"
}

# ax_singlenode_run LOG RUN_DIR CMD...: the single-node scripts' run: CMD (ax-launch) with its
# output also in LOG, a last line that says how it ended, and ax-launch's exit status (0 done, 75
# stopped at a checkpoint, anything else failed).
ax_singlenode_run() {
  local log="$1" run_dir="$2" rc=0 cause
  shift 2
  ax_log "$(ax_quote "$@")"
  # tee -i: a Ctrl-C reaches ax-launch (which checkpoints and exits 75), not the log's writer.
  ax_run_step "$@" > >(tee -i "$log") 2>&1 || rc=$?
  case "$rc" in
    0) ax_log "Run succeeded! (outputs in $run_dir, log $log)" ;;
    75) ax_log "Run stopped at a checkpoint; run the same command again to resume" ;;
    *)
      cause="$(ax_failure_cause "$log")"
      ax_log "Run failed with status $rc${cause:+: $cause} (see $log, $run_dir/error.json)"
      ;;
  esac
  exit "$rc"
}

# ax_failure_cause FILE...: the cause the ranks agreed on after a collective failed, from the
# first of the output files that has it: "rank 3 (host n2) stopped answering first (peer closed
# the connection)" (docs/comm.md "Timeouts and failures"), or "the store host, rank 0, is gone";
# nothing when no file has one.
ax_failure_cause() {
  local f first='ranks? [0-9,]+( \(hosts? [^)]*\))? stopped answering first \([^)]*\)'
  for f in "$@"; do
    [[ -f "$f" ]] || continue
    grep -ohE -m 1 "$first|the store host, rank 0, is gone" "$f" && return 0
  done
  return 0
}

# ax_srun_first_end [OUTPUT_FILE...]: when the ranks could not say why the step failed, the task
# that srun saw end first, from srun's first "srun: error: HOST: task N: WHY" line since the step
# started (ax_run_step). `srun --kill-on-bad-exit` SIGKILLs the other ranks as soon as one ends, so
# a rank killed from outside (kill -9, the OOM killer) can take the others down before any of them
# agreed on a cause and printed it. In srun mode task N is rank N; its pipeline stage, when the
# mesh has stages, comes from the "mesh pipeline=P ..." line in the OUTPUT_FILEs (pipeline is the
# outermost axis: stage = rank / (ranks / P)). In ax-launch mode task N is node N's ax-launch.
# Nothing when there is no such line.
ax_srun_first_end() {
  [[ -n "${AX_STEP_ERR_FILE-}" && -f "$AX_STEP_ERR_FILE" ]] || return 0
  local line re='^srun: error: ([^:]+): tasks? ([0-9]+)[0-9,-]*: (.*)$'
  line="$(tail -c +"$((${AX_STEP_ERR_FROM:-0} + 1))" "$AX_STEP_ERR_FILE" 2>/dev/null |
    grep -m 1 -E "$re")" || return 0
  [[ "$line" =~ $re ]] || return 0
  local host="${BASH_REMATCH[1]}" task="${BASH_REMATCH[2]}" why="${BASH_REMATCH[3]}"
  if [[ "${AX_LAUNCH_MODE:-srun}" != srun ]]; then
    echo "the ax-launch of node $task (host $host) ended first (srun: $why)"
    return 0
  fi
  local where="host $host" mesh field world=1 stages=1
  mesh="$(grep -h -m 1 -oE 'mesh( [a-z]+=[0-9]+)+' "$@" 2>/dev/null | head -n 1)"
  for field in ${mesh#mesh}; do
    world=$((world * ${field#*=}))
    [[ "$field" == pipeline=* ]] && stages="${field#*=}"
  done
  ((stages > 1 && world % stages == 0)) &&
    where+=", pipeline stage $((task / (world / stages)))"
  echo "rank $task ($where) ended first (srun: $why), before the ranks agreed on a cause"
}

# ax_slurm_job_view: "STATE REASON RESTARTS" of this job as Slurm sees it now (`scontrol show
# job`: e.g. "RUNNING None 0", "COMPLETING TimeLimit 0"); empty when Slurm does not answer.
ax_slurm_job_view() {
  [[ -n "${SLURM_JOB_ID-}" ]] || return 0
  local line state="" reason="" restarts="" field
  line="$(timeout 20 scontrol show job -o "$SLURM_JOB_ID" 2>/dev/null | head -n 1)"
  for field in $line; do
    case "$field" in
      JobState=*) state="${field#*=}" ;;
      Reason=*) reason="${field#*=}" ;;
      Restarts=*) restarts="${field#*=}" ;;
    esac
  done
  [[ -n "$state" ]] && echo "$state ${reason:-None} ${restarts:-0}"
}

# ax_should_requeue: after the ranks stopped at a checkpoint, whether the job requeues itself (0)
# or ends (1, with the reason in AX_NO_REQUEUE_WHY and what comes next in AX_NO_REQUEUE_NEXT). Preemption and the time limit requeue, a
# cancel does not (docs/job-scripts.md "Preemption, time limits and cancels"):
#   - requeue: USR1 to this script (the scripts' --signal=B:USR1 before the time limit, Slurm's
#     preempt_send_user_signal, `scancel --batch --signal=USR1`); a stop that reached the steps
#     only (GraceTime preemption sends its first SIGTERM to the tasks, not to this script;
#     `scancel --signal=TERM JOB`); the time limit (Slurm's reason TimeLimit).
#   - end: `scancel JOB`, which ends the job in Slurm at once (COMPLETING, reason None: the ranks
#     have KillWait to write their checkpoint) and sends SIGTERM to this script; any SIGTERM or
#     SIGINT to this script without a USR1 before it.
#   - nothing to do: Slurm requeued the job itself (PreemptMode=REQUEUE: its restart count is
#     past this run's SLURM_RESTART_COUNT).
ax_should_requeue() {
  local view state reason restarts
  view="$(ax_slurm_job_view)"
  read -r state reason restarts <<<"$view"
  AX_NO_REQUEUE_NEXT="submit the same job again to go on from where it stopped"
  if [[ "$restarts" =~ ^[0-9]+$ ]] && ((restarts > ${SLURM_RESTART_COUNT:-0})); then
    AX_NO_REQUEUE_WHY="Slurm has requeued it already (a preemption: restart $restarts)"
    AX_NO_REQUEUE_NEXT="its restart goes on from where it stopped"
    return 1
  fi
  [[ "$reason" == TimeLimit ]] && return 0
  if [[ -n "$state" && "$state" != RUNNING && "$state" != SUSPENDED ]]; then
    AX_NO_REQUEUE_WHY="it was cancelled (Slurm shows it $state, reason $reason: scancel)"
    return 1
  fi
  if [[ "$AX_STOP_SIGNAL" == TERM || "$AX_STOP_SIGNAL" == INT ]]; then
    AX_NO_REQUEUE_WHY="SIG$AX_STOP_SIGNAL reached this script with no USR1 before it: a cancel"
    return 1
  fi
  return 0
}

# ax_finish STATUS WHERE [OUTPUT_FILE...]: ends the job. 0: done. 75: the ranks stopped at a
# checkpoint; after a preemption (ax_should_requeue), unless AX_REQUEUE=0, the job requeues itself
# (same job id; the next run resumes from that checkpoint and SLURM_RESTART_COUNT counts the
# restarts); after a cancel it ends with 75. Anything else: the job fails with that status, and
# its last line names the rank that failed first when the ranks' outputs (OUTPUT_FILEs) do, else
# the task srun saw end first (ax_srun_first_end).
ax_finish() {
  local rc="$1" where="$2"
  shift 2
  if ((rc == 0)); then
    ax_log "finished: the run reached its last step (outputs: $where)"
    exit 0
  fi
  # After a stop request every rank checkpoints, waits for the others, and exits 75; the first
  # exit makes srun (--kill-on-bad-exit) SIGKILL the ranks still exiting, so the step's status
  # can be 137 instead. The checkpoint was committed before any rank left: still a stop.
  if [[ -n "$AX_STOP_SIGNAL" ]] && ((rc != AX_EXIT_STOPPED)); then
    ax_log "the step ended with status $rc after SIG$AX_STOP_SIGNAL (ranks ended by srun once" \
      "the first one stopped): treated as stopped at its checkpoint"
    rc=$AX_EXIT_STOPPED
  fi
  if ((rc == AX_EXIT_STOPPED)); then
    if [[ -n "${SLURM_JOB_ID-}" ]] && ! ax_should_requeue; then
      ax_log "the ranks stopped at a checkpoint (exit $rc); not requeueing job $SLURM_JOB_ID:" \
        "$AX_NO_REQUEUE_WHY; $AX_NO_REQUEUE_NEXT (its checkpoint)"
      exit "$rc"
    fi
    if [[ -n "${SLURM_JOB_ID-}" && "${AX_REQUEUE:-1}" == 1 ]]; then
      ax_log "the ranks stopped at a checkpoint (exit $rc); requeueing job $SLURM_JOB_ID" \
        "(restart $((${SLURM_RESTART_COUNT:-0} + 1))), which resumes from it"
      if timeout 60 scontrol requeue "$SLURM_JOB_ID"; then
        # Slurm ends this script now; the requeued job starts from the top.
        exit 0
      fi
      ax_log "error: scontrol requeue $SLURM_JOB_ID failed (the job needs --requeue and the" \
        "cluster JobRequeue=1); submit the same job again to resume"
    else
      ax_log "the ranks stopped at a checkpoint (exit $rc); run the same job again to resume"
    fi
    exit "$rc"
  fi
  local cause
  cause="$(ax_failure_cause "$@")"
  [[ -n "$cause" ]] || cause="$(ax_srun_first_end "$@")"
  ax_log "error: the training step failed with status $rc${cause:+: $cause}; see $where"
  exit "$rc"
}

# ax_job_header NAME: one line about the job and its restarts.
ax_job_header() {
  local restarts="${SLURM_RESTART_COUNT:-0}"
  ax_log "$1: job ${SLURM_JOB_ID:-none} on ${SLURM_JOB_NUM_NODES:-1} node(s)" \
    "(${SLURM_JOB_NODELIST:-$(hostname)}), restart $restarts (SLURM_RESTART_COUNT)"
}
