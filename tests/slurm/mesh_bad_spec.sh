#!/usr/bin/env bash
# A bad --ax-mesh fails before any task starts, non-zero, with the plugin's "ax:" message:
#   malformed (`bogus`) in srun, sbatch and `#SBATCH`: rejected by the client, no job is created;
#   well-formed but not fitting the node (ICI 1,4,1 on 8-GPU nodes): rejected by srun itself
#   (the plugin knows the nodes from its topology= file), one line, no task starts;
#   a step whose GPUs Slurm picks on the node (auto:tp=4 with --gres=gpu:2, issue 11): rejected
#   in slurmstepd before exec, one line per node that says what to use instead (it was 18
#   lines, "node 0" on every node), and the task program never runs.
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
want='srun: error: ax: --ax-mesh=ici=1,4,1;dcn=-1,1,1: ici=1,4,1 covers 4 GPUs but there are 8'
want+=' in one NVLink domain (this node has 8): make the product 8 or let a -1 fill it in'
if ((rc != 0 && ran == 0)) && grep -qxF "$want" <<<"$out" && (($(grep -c 'ax:' <<<"$out") == 1)) &&
  ! grep -q slurmstepd <<<"$out"; then
  ok "ici=1,4,1 on 8-GPU nodes: exit $rc, refused by srun in one line, no task ran"
else
  bad "ici=1,4,1 on 8-GPU nodes: exit $rc, $ran of 16 tasks ran (want 0), output:"
  sed 's/^/  | /' <<<"$out" | head -n 12
fi

out="$(t srun -J "$JOB" --ax-mesh=auto:tp=4 -N3 --ntasks-per-node=2 --gres=gpu:2 \
  bash -c "$marker" 2>&1)"
rc=$?
ran="$(ls "$dir" | wc -l)"
want='ax: --ax-mesh=auto:tp=4: tensor parallelism of 4 needs 4 GPUs in one NVLink domain, this'
want+=' node has 2: use auto:tp=2 or auto:tp=1'
nodes="$(grep -F "$want" <<<"$out" | grep -oE '^slurmstepd-n[0-9]+' | sort | tr '\n' ' ')"
if ((rc != 0 && ran == 0)) && [[ "$nodes" == "slurmstepd-n1 slurmstepd-n2 slurmstepd-n3 " ]] &&
  (($(grep -c 'ax:' <<<"$out") == 3 && $(wc -l <<<"$out") <= 6)) &&
  ! grep -qE 'node 0|CPU ranks|spank plugin stack|task_init\(\) failed' <<<"$out"; then
  ok "auto:tp=4 on 3 nodes x 2 GPUs: exit $rc, no task ran, one line per node: $want"
else
  bad "auto:tp=4 on 3 nodes x 2 GPUs: exit $rc, $ran of 6 tasks ran (want 0), output:"
  sed 's/^/  | /' <<<"$out" | head -n 24
fi
finish
