#!/usr/bin/env bash
# Mode B under Slurm: `sbatch -N 2` runs `srun --ntasks-per-node=1 ax-launch --nproc 4 ... --
# fake_rank` (node rank, node count and coordinator from SLURM_* in the job script, as
# docs/launch.md asks). Once all 8 ranks are running, rank 5 (node 2) gets `kill -9` from outside;
# the job must end non-zero within 30 s of the kill, naming the rank, and leave no rank behind.
source "$(dirname "$0")/lib.sh" "$@"
require_cluster
dir="$(scratch)"
launch="$BUILD/launcher/ax-launch"
fake="$BUILD/tests/launcher/fake_rank"
victim=5
tag="axtag-$$-$RANDOM" # an argument fake_rank ignores, to find this test's ranks in /proc

cat >"$dir/node.sh" <<NODE
#!/bin/bash
exec "$launch" --nproc 4 --nnodes "\$SLURM_NNODES" --node-rank "\$SLURM_NODEID" \\
  --coordinator "\$COORDINATOR" --run-dir "$dir/node\$SLURM_NODEID" --grace-seconds 2 \\
  -- "$fake" '*=wait-term:0' "$tag=0"
NODE
cat >"$dir/job.sh" <<JOB
#!/bin/bash
#SBATCH -N 2
#SBATCH -o $dir/job.out
export COORDINATOR="\$(timeout 20 scontrol show hostnames "\$SLURM_JOB_NODELIST" | head -n 1):29500"
srun --ntasks-per-node=1 --kill-on-bad-exit=1 bash "$dir/node.sh"
rc=\$?
echo "srun exited \$rc"
exit \$rc
JOB

# pids_of_ranks [RANK]: pids of this test's fake_rank processes (all, or the one with AX_RANK).
pids_of_ranks() {
  local p
  for p in /proc/[0-9]*; do
    [[ "$(cat "$p/comm" 2>/dev/null)" == fake_rank ]] || continue
    tr '\0' '\n' 2>/dev/null <"$p/cmdline" | grep -qx "$tag=0" || continue
    if [[ -n "${1:-}" ]]; then
      tr '\0' '\n' 2>/dev/null <"$p/environ" | grep -qx "AX_RANK=$1" || continue
    fi
    echo "${p#/proc/}"
  done
}

id="$(t sbatch --parsable -J "$JOB" "$dir/job.sh" 2>&1)"
if ! [[ "$id" =~ ^[0-9]+$ ]]; then
  bad "sbatch failed: $id"
  finish
  exit
fi

ready=0
deadline=$((SECONDS + 30))
while ((SECONDS < deadline)); do
  ready="$(grep -cE '^\[r[0-9]+\] ready$' "$dir/job.out" 2>/dev/null)"
  ((ready >= 8)) && break
  sleep 0.2
done
pid="$(pids_of_ranks "$victim")"
if ((ready < 8)) || ! [[ "$pid" =~ ^[0-9]+$ ]]; then
  bad "job $id: $ready of 8 ranks ready (30 s allowed), rank $victim pid '${pid}'"
  sed 's/^/  | /' "$dir/job.out" 2>/dev/null | head -n 30
  finish
  exit
fi
ok "job $id: 8 ranks on 2 nodes running; rank $victim is pid $pid"

kill -9 "$pid"
killed_at=$(date +%s%N)
state="$(wait_job "$id" 60)"
elapsed_ms=$((($(date +%s%N) - killed_at) / 1000000))
exit_code="$(job_field "$id" ExitCode)"
if [[ "$state" == FAILED && "$exit_code" != 0:0 ]] && ((elapsed_ms <= 30000)); then
  ok "job ended $state (ExitCode $exit_code) ${elapsed_ms} ms after the kill"
else
  bad "after the kill: state $state, ExitCode $exit_code, ${elapsed_ms} ms" \
    "(want FAILED, non-zero, <= 30000 ms)"
fi

want="rank $victim on host n2 was killed by signal 9 (SIGKILL)"
if grep -qF "$want" "$dir/job.out"; then
  ok "job output names the rank: $want"
else
  bad "job output does not contain '$want'"
  sed 's/^/  | /' "$dir/job.out" | tail -n 20
fi
if grep -q "\"rank\": *$victim," "$dir/node1/error.json" 2>/dev/null &&
  grep -q '"signal": *9' "$dir/node1/error.json"; then
  ok "node 2's error.json: rank $victim, signal 9"
else
  bad "node 2's error.json: $(tr -d '\n' <"$dir/node1/error.json" 2>/dev/null || echo missing)"
fi
left="$(pids_of_ranks | tr '\n' ' ')"
if [[ -z "$left" ]]; then ok "no rank left running"; else bad "ranks still running: $left"; fi
finish
