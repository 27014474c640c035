#!/usr/bin/env bash
# Sharded training in mode B: `sbatch -N 2` whose script runs `srun --ntasks-per-node=1 ax-launch
# --nproc 2 -- ax-train ...` (node rank, node count and coordinator from SLURM_*, docs/launch.md).
# The job must succeed and its per-step losses equal a one-process run's.
#   train_launch.sh BUILD_DIR REPO_DIR
source "$(dirname "$0")/lib.sh" "$@"
source "$(dirname "$0")/train_lib.sh"
require_cluster
dir="$(scratch)"
prepare_data "$dir/data"
# shellcheck disable=SC2046
"$AX_TRAIN" $(train_args "$dir/data" "$dir/one") >"$dir/one.log" 2>&1 || bad "one-process run"
ref="$(losses "$dir/one")"

run="$dir/run"
cat >"$dir/job.sh" <<JOB
#!/bin/bash
#SBATCH -N 2
#SBATCH -o $dir/job.out
coordinator="\$(timeout 20 scontrol show hostnames "\$SLURM_JOB_NODELIST" | head -n 1):29510"
srun --ntasks-per-node=1 --kill-on-bad-exit=1 bash -c '
  exec "$AX_LAUNCH" --nproc 2 --nnodes "\$SLURM_NNODES" --node-rank "\$SLURM_NODEID" \
    --coordinator '"\$coordinator"' --run-dir "$dir/launch-\$SLURM_NODEID" \
    -- "$AX_TRAIN" $(train_args "$dir/data" "$run" | tr '\n' ' ')'
JOB
id="$(t sbatch --parsable -J "$JOB" "$dir/job.sh" 2>&1)"
if ! [[ "$id" =~ ^[0-9]+$ ]]; then
  bad "sbatch failed: $id"
  finish
  exit
fi
state="$(wait_job "$id" 100)"
if [[ "$state" == COMPLETED ]]; then
  ok "sbatch -N 2 with ax-launch --nproc 2 per node: job $id COMPLETED"
  same_losses "sbatch -N 2 + ax-launch (4 CPU ranks)" "$ref" "$(losses "$run")"
else
  bad "job $id ended $state (exit $(job_field "$id" ExitCode))"
  sed 's/^/  | /' "$dir/job.out" | tail -n 30
fi
finish
