#!/usr/bin/env bash
# The plugin next to Slurm's own GPU binding, and without the option:
#   --gres=gpu:8         CUDA_VISIBLE_DEVICES=0..7 in every task: AX_DEVICE = local rank
#   --gpus-per-task=1    each task sees only its GPU: AX_DEVICE=0, NCCL_IB_HCA still that GPU's NIC
#   no --ax-mesh         (and no default= in plugstack.conf): no AX_* variable at all
source "$(dirname "$0")/lib.sh" "$@"
require_cluster

out="$(t srun -J "$JOB" --ax-mesh=auto -N2 --ntasks-per-node=8 --gres=gpu:8 \
  bash -c "$TASK_PRINTER" 2>&1)"
rc=$?
if ((rc == 0)); then
  check_tasks "--gres=gpu:8" "$out" 2 8 1,8,1 2,1,1 local
else
  bad "srun --gres=gpu:8 exited $rc"; sed 's/^/  | /' <<<"$out" | head -n 20
fi

# shellcheck disable=SC2016 # expanded by the task's shell
out="$(t srun -J "$JOB" --ax-mesh=auto -N2 --ntasks-per-node=8 --gpus-per-task=1 \
  bash -c "$TASK_PRINTER"' "CVD=$CUDA_VISIBLE_DEVICES"' 2>&1)"
rc=$?
if ((rc == 0)); then
  check_tasks "--gpus-per-task=1" "$out" 2 8 1,8,1 2,1,1 0
  # Slurm gives local task i the GPU i here; the plugin must have used that GPU's NIC (above).
  cvd="$(awk '$1 == "TASK" && $NF != "CVD="$3 {print}' <<<"$out")"
  if [[ -z "$cvd" ]]; then ok "--gpus-per-task=1: CUDA_VISIBLE_DEVICES = local rank in every task"
  else bad "--gpus-per-task=1: unexpected CUDA_VISIBLE_DEVICES: $cvd"; fi
else
  bad "srun --gpus-per-task=1 exited $rc"; sed 's/^/  | /' <<<"$out" | head -n 20
fi

# The contract's names (AX_SLURM_* of this harness are not part of it).
contract='^(AX_(RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|NODE_RANK|NNODES|ICI_MESH|DCN_MESH'
contract+='|DEVICE|COORDINATOR))='
out="$(t srun -J "$JOB" -N2 --ntasks-per-node=2 \
  bash -c "env | grep -E '$contract' || echo 'no AX_'" 2>&1)"
rc=$?
if ((rc == 0)) && [[ "$(sort -u <<<"$out")" == "no AX_" ]]; then
  ok "without --ax-mesh no task gets an AX_* variable"
else
  bad "without --ax-mesh (rc=$rc): $out"
fi
finish
