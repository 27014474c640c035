#!/usr/bin/env bash
# shellcheck disable=SC2034  # `vars` is read by submit_sub (sbatch_lib.sh)
# A rank of an example_pile.sub job killed mid-run (kill -9 of rank 3, on the second node): the job
# fails promptly (srun --kill-on-bad-exit ends the step, the script passes the status on) with a
# non-zero exit code, its output names the rank, and no rank is left running. The surviving
# ranks name only rank 3, one of them as the cause ("rank 3 (host n2) stopped answering first"),
# and the job's last line repeats that cause (issue 11: they named live ranks too); when srun's
# kill ends them before any reported (a loaded machine), the line names the task srun saw end
# first (ax_srun_first_end), and no rank names a cause.
#   sbatch_kill.sh BUILD_DIR REPO_DIR
source "$(dirname "$0")/lib.sh" "$@"
source "$(dirname "$0")/train_lib.sh"
source "$(dirname "$0")/sbatch_lib.sh"
require_cluster
dir="$(scratch)"
prepare_data "$dir/data"
run="$dir/ws/logs/kill"

mapfile -t vars < <(sub_env "$dir" logs/kill MAX_STEPS=100000)
id="$(submit_sub "$dir/kill.out" -N 2 "$SUB_DIR/example_pile.sub")"
out="$dir/ws/output/output-$id-0-0.txt"
wait_step "$id" "$out" 5 || true
kill_rank "$run" 3 "$id" "$dir/kill.out"
took=$KILL_TOOK
if [[ "$JOB_STATE" == FAILED && "$JOB_EXIT" != 0:0 ]] && ((took <= 30)); then
  ok "kill -9 of rank 3: job $id $JOB_STATE with exit $JOB_EXIT within $took s"
else
  bad "kill -9 of rank 3: job $id $JOB_STATE, exit $JOB_EXIT, after $took s"
  daemon_log_lines "$id"
fi
if grep -q 'n2: task 3: Killed' "$dir/kill.out" &&
  grep -q 'the training step failed with status' "$dir/kill.out"; then
  ok "the job's output names the rank: $(grep -o 'n2: task 3: Killed' "$dir/kill.out")"
else
  bad "the job's output does not name task 3"
  show_tail "$dir/kill.out"
fi
cause="rank 3 (host n2) stopped answering first"
outs=("$dir/ws/output/output-$id-"*.txt)
causes="$(cat "${outs[@]}" | grep -c "$cause")"
srun_saw="rank 3 (host n2) ended first (srun: Killed), before the ranks agreed on a cause"
last="$(grep -F 'the training step failed with status' "$dir/kill.out" | tail -n 1)"
if [[ "$last" == *": $cause"* ]] && ((causes == 1)) && ! grep -q 'did not answer' "${outs[@]}"; then
  ok "one rank gives the cause and the job's last line repeats it: $last"
elif [[ "$last" == *": $srun_saw"* ]] && ((causes == 0)); then
  # srun's kill (SIGTERM, SIGKILL after KillWait) came before any rank reported: a loaded machine.
  ok "srun ended the ranks before they reported; the job's last line names its first ended task: $last"
else
  bad "the cause: $causes line(s) with '$cause' in the task outputs, job's last line: " \
    "$(tail -n 1 "$dir/kill.out")"
  grep -h 'ax-train:' "${outs[@]}" | sed 's/^/  | /'
fi
left="$(rank_pids "$run" 0; rank_pids "$run" 1; rank_pids "$run" 2)"
if [[ -z "$left" ]]; then ok "no rank left running"; else bad "ranks still running: $left"; fi
finish
