#!/usr/bin/env bash
# `srun --ax-mesh=auto -N NODES --ntasks-per-node=8`: every task's AX_* environment, as set by
# spank_ax.so in slurmstepd from the dgx-h100 fixture, is checked value by value.
#   mesh_srun.sh BUILD_DIR REPO_DIR NODES
source "$(dirname "$0")/lib.sh" "$@"
nodes="${3:?usage: $0 BUILD_DIR REPO_DIR NODES}"
JOB="$JOB-$nodes"
require_cluster

out="$(t srun -J "$JOB" --ax-mesh=auto -N "$nodes" --ntasks-per-node=8 \
  bash -c "$TASK_PRINTER" 2>&1)"
rc=$?
if ((rc == 0)); then
  check_tasks "srun --ax-mesh=auto -N$nodes --ntasks-per-node=8" "$out" "$nodes" 8 \
    1,8,1 "$nodes,1,1" local
else
  bad "srun --ax-mesh=auto -N$nodes exited $rc"
  sed 's/^/  | /' <<<"$out" | head -n 20
fi
finish
