#!/usr/bin/env bash
# A bad --ax-mesh fails before any task starts, non-zero, with the plugin's "ax:" message:
#   malformed (`bogus`) in srun, sbatch and `#SBATCH`: rejected by the client, no job is created;
#   well-formed but not fitting the node (ICI 1,4,1 on 8-GPU nodes): rejected in slurmstepd
#   before exec, so the task program never runs.
source "$(dirname "$0")/lib.sh" "$@"
require_cluster
dir="$(scratch)"

# jobs_named NAME: how many jobs slurmctld knows by that name (finished ones stay MinJobAge=30 s).
jobs_named() { t scontrol show job -o 2>/dev/null | grep -c " JobName=$1 "; }

# shellcheck disable=SC2016 # expanded by the task's shell
marker='touch '"$dir"'/ran.$SLURM_PROCID'

out="$(t srun -J "$JOB-srun" --ax-mesh=bogus -N1 -n1 bash -c "$marker" 2>&1)"
rc=$?
if ((rc != 0)) && grep -q 'ax: --ax-mesh: mesh spec "bogus": unknown token' <<<"$out" &&
  [[ -z "$(ls "$dir")" ]] && (($(jobs_named "$JOB-srun") == 0)); then
  ok "srun --ax-mesh=bogus: exit $rc, no job, message: $(grep -m1 'ax:' <<<"$out")"
else
  bad "srun --ax-mesh=bogus: exit $rc, tasks ran: $(ls "$dir" | tr '\n' ' '), output: $out"
fi

out="$(t sbatch -J "$JOB-sbatch" --ax-mesh=bogus --wrap "$marker" 2>&1)"
rc=$?
if ((rc != 0)) && grep -q 'ax: --ax-mesh: mesh spec "bogus"' <<<"$out" &&
  (($(jobs_named "$JOB-sbatch") == 0)); then
  ok "sbatch --ax-mesh=bogus: exit $rc, no job"
else
  bad "sbatch --ax-mesh=bogus: exit $rc, output: $out"
fi

printf '#!/bin/bash\n#SBATCH --ax-mesh=auto:tp=x\n%s\n' "$marker" >"$dir/job.sh"
out="$(t sbatch -J "$JOB-script" "$dir/job.sh" 2>&1)"
rc=$?
if ((rc != 0)) && grep -q 'ax: --ax-mesh: ' <<<"$out" && (($(jobs_named "$JOB-script") == 0)); then
  ok "#SBATCH --ax-mesh=auto:tp=x: exit $rc, no job, message: $(grep -m1 'ax:' <<<"$out")"
else
  bad "#SBATCH --ax-mesh=auto:tp=x: exit $rc, output: $out"
fi
rm -f "$dir/job.sh"

out="$(t srun -J "$JOB" --ax-mesh='ici=1,4,1;dcn=-1,1,1' -N2 --ntasks-per-node=8 \
  bash -c "$marker" 2>&1)"
rc=$?
ran="$(ls "$dir" | wc -l)"
want='ax: task_init: ici=1,4,1 has 4 devices but an ICI domain here has 8 GPUs'
if ((rc != 0 && ran == 0)) && grep -qF "$want" <<<"$out"; then
  ok "ici=1,4,1 on 8-GPU nodes: exit $rc, no task ran, message: $want"
else
  bad "ici=1,4,1 on 8-GPU nodes: exit $rc, $ran of 16 tasks ran (want 0), plugin message" \
    "$(grep -qF "$want" <<<"$out" && echo present || echo missing)"
  sort -u <<<"$out" | sed 's/^/  | /' | head -n 8
fi
finish
