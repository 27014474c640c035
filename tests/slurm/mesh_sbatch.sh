#!/usr/bin/env bash
# `#SBATCH --ax-mesh=auto:tp=2` reaches the srun steps inside the batch script (ICI 1,4,2 by
# docs/topology-and-mesh.md: auto:tp=N gives ici = (1, domain/N, N)), an inner
# `srun --ax-mesh=auto` overrides it for its step, and the batch script itself is not a rank.
source "$(dirname "$0")/lib.sh" "$@"
require_cluster
dir="$(scratch)"

cat >"$dir/job.sh" <<JOB
#!/bin/bash
#SBATCH -N 2
#SBATCH --ntasks-per-node=8
#SBATCH --ax-mesh=auto:tp=2
#SBATCH -o $dir/job.out
echo "batch script AX_RANK=\${AX_RANK-unset}"
srun bash -c '$TASK_PRINTER' >"$dir/inherited.out" || exit 11
srun --ax-mesh=auto bash -c '$TASK_PRINTER' >"$dir/override.out" || exit 12
JOB

id="$(t sbatch --parsable -J "$JOB" "$dir/job.sh" 2>&1)"
if ! [[ "$id" =~ ^[0-9]+$ ]]; then
  bad "sbatch failed: $id"
  finish
  exit
fi
state="$(wait_job "$id" 90)"
exit_code="$(job_field "$id" ExitCode)"
if [[ "$state" == COMPLETED && "$exit_code" == 0:0 ]]; then
  ok "job $id COMPLETED, ExitCode 0:0"
else
  bad "job $id: state $state, ExitCode $exit_code"
  sed 's/^/  | /' "$dir/job.out" 2>/dev/null | head -n 20
fi
check_tasks "#SBATCH --ax-mesh=auto:tp=2, inner srun" "$(cat "$dir/inherited.out" 2>/dev/null)" \
  2 8 1,4,2 2,1,1 local
check_tasks "inner srun --ax-mesh=auto overrides #SBATCH" "$(cat "$dir/override.out" 2>/dev/null)" \
  2 8 1,8,1 2,1,1 local
inherited_secret="$(secret_of "$(cat "$dir/inherited.out" 2>/dev/null)")"
override_secret="$(secret_of "$(cat "$dir/override.out" 2>/dev/null)")"
if [[ -n "$inherited_secret" && "$inherited_secret" != "$override_secret" ]]; then
  ok "each srun step of the job gets its own job secret"
else
  bad "the two steps' job secrets: '$inherited_secret' and '$override_secret'"
fi
if grep -qx "batch script AX_RANK=unset" "$dir/job.out" 2>/dev/null; then
  ok "the batch script itself gets no AX_RANK"
else
  bad "batch script: $(grep 'batch script' "$dir/job.out" 2>/dev/null)"
fi
finish
