#!/usr/bin/env bash
# shellcheck disable=SC2034  # `vars` is read by submit_sub (sbatch_lib.sh)
# Preemption of example_pile.sub: SIGUSR1 to the batch script mid-run (what `#SBATCH
# --signal=B:USR1@300` delivers before the time limit) → the script forwards it to the step →
# every rank checkpoints at the same step and exits 75 → the script requeues the job → the
# requeued run (SLURM_RESTART_COUNT=1) resumes from that checkpoint and finishes with exactly the
# losses of an uninterrupted job (CPU ranks are bit-exact). In both launch modes. Then the newest
# checkpoint corrupted between the preemption and the requeue (issue 27): the restart moves it
# aside, resumes from the one before and still logs the uninterrupted job's losses; with
# train.resume_on_corrupt=refuse a start on a corrupt newest checkpoint fails naming it.
#   sbatch_preempt.sh BUILD_DIR REPO_DIR
source "$(dirname "$0")/lib.sh" "$@"
source "$(dirname "$0")/train_lib.sh"
source "$(dirname "$0")/sbatch_lib.sh"
require_cluster
dir="$(scratch)"
prepare_data "$dir/data"
# Long enough that the signal, sent at step 8, reaches the ranks well before the last step also
# on a loaded machine (a step takes 25-50 ms here).
steps=200
ws="$dir/ws"

# The uninterrupted job runs beside the preempted one in srun mode (reference_start), the
# preempted one in ax-launch mode beside the corrupted checkpoint's below (part_start): two jobs
# at a time, on two nodes each.
mapfile -t vars < <(sub_env "$dir" logs/reference "MAX_STEPS=$steps")
reference_start "the uninterrupted job" "$ws/logs/reference" "$dir/reference.out" \
  "$ws/output/output-%j-0-0.txt" -N 2 "$SUB_DIR/example_pile.sub"
mapfile -t vars < <(sub_env "$dir" logs/preempted-srun "MAX_STEPS=$steps" AX_LAUNCH_MODE=srun)
preempt_resume srun "$steps" - "$ws/logs/preempted-srun" "$ws/output/output-%j-0-0.txt" \
  "$dir/srun.out" -N 2 "$SUB_DIR/example_pile.sub"
if ! reference_wait; then
  finish
  exit
fi
ref="$REF"
mapfile -t vars < <(sub_env "$dir" logs/preempted-ax-launch "MAX_STEPS=$steps" \
  AX_LAUNCH_MODE=ax-launch)
part_start ax-launch preempt_resume ax-launch "$steps" "$ref" "$ws/logs/preempted-ax-launch" \
  "$ws/output/output-%j-0-0.txt" "$dir/ax-launch.out" -N 2 "$SUB_DIR/example_pile.sub"

# --- the newest checkpoint corrupted while the requeued job waits ---------------------------------
log="logs/corrupt"
run="$ws/$log"
args="--device=cpu --set=train.eval_every=0 --set=train.checkpoint_every=4"
mapfile -t vars < <(sub_env "$dir" "$log" "MAX_STEPS=$steps" "AX_TRAIN_ARGS=$args")
# corrupt_newest: one byte of the largest file of RUN's newest checkpoint flipped; the directory
# in CORRUPTED, the one before it in PREVIOUS.
corrupt_newest() {
  local dirs file
  mapfile -t dirs < <(find "$run/checkpoints" -mindepth 1 -maxdepth 1 -type d -name 'step_*' \
    ! -name '*.corrupt-*' | sort)
  CORRUPTED="${dirs[-1]:-}" PREVIOUS="${dirs[-2]:-}"
  [[ -n "$CORRUPTED" ]] || return 0
  file="$(find "$CORRUPTED" -type f -printf '%s %p\n' | sort -n | tail -n 1 | cut -d' ' -f2-)"
  python3 -c 'import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(f.seek(0, 2) // 2)
    b = f.read(1)
    f.seek(-1, 1)
    f.write(bytes([b[0] ^ 0xFF]))' "$file"
  echo "  corrupted $file"
}
id="$(submit_sub "$dir/corrupt.out" -N 2 "$SUB_DIR/example_pile.sub")"
out="$ws/output/output-$id-0-0.txt"
wait_step "$id" "$out" 10 || true
t scancel --batch --signal=USR1 "$id"
CORRUPTED="" PREVIOUS=""
start_requeued "$id" corrupt_newest
end_job "$id" 90
stopped="$(grep -Eo 'stopped after step [0-9]+ on signal 10' "$out" | grep -Eo '[0-9]+' | head -n 1)"
prev_step=x
if [[ -n "$PREVIOUS" ]]; then
  prev_step="$(basename "$PREVIOUS")"
  prev_step="$((10#${prev_step#step_}))"
fi
if [[ "$JOB_STATE" == COMPLETED && "$JOB_EXIT" == 0:0 && -n "$stopped" && -n "$PREVIOUS" &&
  "$(basename "$CORRUPTED")" == "$(printf 'step_%08d' "$stopped")" ]] &&
  grep -q "resumed from step $prev_step " "$out" &&
  grep -q "moved aside (failed verification, see the warning above): .*$(basename "$CORRUPTED").corrupt-" "$out" &&
  compgen -G "$CORRUPTED.corrupt-*/CORRUPT" >/dev/null; then
  ok "corrupt: step $stopped's checkpoint corrupted during the requeue was moved aside; restart 1 resumed from step $prev_step and COMPLETED 0:0"
else
  bad "corrupt: job $id ended $JOB_STATE $JOB_EXIT; stopped '$stopped', corrupted '$CORRUPTED', previous '$PREVIOUS'"
  grep -E 'stopped|resumed|moved aside|failed verification' "$out" | sed 's/^/  | /'
  find "$run/checkpoints" -maxdepth 1 | sed 's/^/  | /'
  show_tail "$dir/corrupt.out"
fi
losses_are_reference corrupt "$ref" "$run" "$steps"
# The strict key: the finished run's newest checkpoint corrupted, a longer run refuses to start.
corrupt_newest
mapfile -t vars < <(sub_env "$dir" "$log" "MAX_STEPS=$((steps + 8))" \
  "AX_TRAIN_ARGS=$args --set=train.resume_on_corrupt=refuse")
id="$(submit_sub "$dir/strict.out" -N 2 "$SUB_DIR/example_pile.sub")"
end_job "$id" 90
out="$ws/output/output-$id-0-0.txt"
if [[ "$JOB_STATE" == FAILED ]] &&
  grep -h "train.resume_on_corrupt=refuse" "$out" "$dir/strict.out" 2>/dev/null |
  grep -q "$(basename "$CORRUPTED")" &&
  [[ -d "$CORRUPTED" ]]; then
  ok "corrupt, train.resume_on_corrupt=refuse: job $id FAILED naming $(basename "$CORRUPTED"), nothing moved"
else
  bad "corrupt, refuse: job $id ended $JOB_STATE $JOB_EXIT (want FAILED naming $CORRUPTED)"
  show_tail "$out"
  show_tail "$dir/strict.out"
fi
part_end ax-launch
finish
