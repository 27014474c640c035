#!/usr/bin/env bash
# Sharded training launched by Slurm itself (mode A): `srun --ax-mesh=SPEC --mpi=pmix`, one
# ax-train task per fake GPU, the mesh and environment from spank_ax.so; ax-train runs on CPU
# ranks (no GPU answers) with Gloo. tiny-gpt and tiny-llama on data x fsdp (auto), data x tensor
# (auto:tp=2) and fsdp x tensor (fsdp across the nodes, tensor inside: forced by the explicit
# spec): the per-step losses must equal a one-process run's. The job secret (docs/threat-model.md):
# the plugin's without PMIx, PMIx's without the plugin's, and none at all fails at once.
#   train_srun.sh BUILD_DIR REPO_DIR
source "$(dirname "$0")/lib.sh" "$@"
source "$(dirname "$0")/train_lib.sh"
require_cluster
dir="$(scratch)"
prepare_data "$dir/data"
# The steps below run two at a time, each on 2 of the 4 nodes (in_background), and are checked
# once both have ended (step_result).
# in_background NAME CMD...: CMD in the background, its output in $dir/NAME.out and its exit
# status in $dir/NAME.rc.
in_background() {
  local name="$1"
  shift
  ("$@" >"$dir/$name.out" 2>&1; echo $? >"$dir/$name.rc") &
}
# step_result NAME: after `wait`, the output of in_background's NAME in `out`, its status in `rc`.
step_result() {
  out="$(cat "$dir/$1.out" 2>/dev/null)"
  rc="$(cat "$dir/$1.rc" 2>/dev/null || echo missing)"
}

# The one-process references, tiny-gpt's and tiny-llama's (GQA, SwiGLU, RoPE, untied head).
# shellcheck disable=SC2046 # word splitting of train_args is intended
in_background one "$AX_TRAIN" $(train_args "$dir/data" "$dir/one")
# shellcheck disable=SC2046
in_background one-llama "$AX_TRAIN" $(train_args "$dir/data" "$dir/one-llama" tiny-llama)
wait
step_result one
[[ "$rc" == 0 ]] || bad "one-process run (exit $rc)"
ref="$(losses "$dir/one")"
step_result one-llama
[[ "$rc" == 0 ]] || bad "one-process tiny-llama run (exit $rc)"
ref_llama="$(losses "$dir/one-llama")"

# 2 nodes x 2 fake GPUs each (Slurm narrows CUDA_VISIBLE_DEVICES to the 2 GPUs it gives a node).
runs=()
for experiment in tiny-gpt tiny-llama; do
  for spec in auto "auto:tp=2" "ici=1,1,2;dcn=1,2,1"; do runs+=("$experiment $spec"); done
done
for ((i = 0; i < ${#runs[@]}; i++)); do
  read -r experiment spec <<<"${runs[i]}"
  run="$dir/run-$experiment-${spec//[:=;,]/-}"
  # shellcheck disable=SC2046
  in_background "${run##*/}" t srun -J "$JOB" --mpi=pmix --ax-mesh="$spec" -N 2 --ntasks-per-node=2 \
    --gres=gpu:2 --kill-on-bad-exit=1 "$AX_TRAIN" $(train_args "$dir/data" "$run" "$experiment")
  ((i % 2 == 0)) || wait
done
wait
for experiment in tiny-gpt tiny-llama; do
  want="$ref"
  [[ "$experiment" == tiny-gpt ]] || want="$ref_llama"
  for spec in auto "auto:tp=2" "ici=1,1,2;dcn=1,2,1"; do
    run="$dir/run-$experiment-${spec//[:=;,]/-}"
    step_result "${run##*/}"
    if [[ "$rc" != 0 ]]; then
      bad "$experiment: srun --ax-mesh=$spec exited $rc"
      sed 's/^/  | /' <<<"$out" | tail -n 30
      continue
    fi
    mesh="$(grep -o 'mesh data=[0-9]* fsdp=[0-9]* tensor=[0-9]*' <<<"$out" | head -n 1)"
    same_losses "$experiment: srun --mpi=pmix --ax-mesh='$spec' -N2 x 2 tasks ($mesh)" "$want" \
      "$(losses "$run")"
  done
done
# --ax-mesh without PMIx: the store's secret is the one spank_ax.so made in srun for the step.
# Planned as if on H100s (AX_PLAN_GPU, docs/plan.md): ax-train replaces the plugin's split of the
# auto mesh (fsdp 2 inside a node, data 2 across) with the plan's, and says so.
# This step and the next (without --ax-mesh) run at the same time.
run="$dir/run-mesh-no-pmix"
# shellcheck disable=SC2046
in_background run-mesh-no-pmix env AX_PLAN_GPU=H100-80GB timeout -k 5 "$CLIENT_TIMEOUT" srun \
  -J "$JOB" --ax-mesh=auto -N 2 --ntasks-per-node=2 --gres=gpu:2 --kill-on-bad-exit=1 \
  "$AX_TRAIN" $(train_args "$dir/data" "$run")
# shellcheck disable=SC2046
in_background run-pmix t srun -J "$JOB" --mpi=pmix -N 2 --ntasks-per-node=2 --kill-on-bad-exit=1 \
  env -u AX_JOB_SECRET "$AX_TRAIN" $(train_args "$dir/data" "$dir/run-pmix")
wait
step_result run-mesh-no-pmix
if [[ "$rc" != 0 ]]; then
  bad "srun --ax-mesh=auto without PMIx exited $rc"
  sed 's/^/  | /' <<<"$out" | tail -n 30
else
  same_losses "srun --ax-mesh=auto -N2 x 2 tasks, the plugin's job secret" "$ref" "$(losses "$run")"
  planned="$(grep -o 'mesh auto: planned data [0-9]* fsdp [0-9]* tensor [0-9]*' <<<"$out" | head -n 1)"
  mesh="$(grep -o 'mesh data=[0-9]* fsdp=[0-9]* tensor=[0-9]*' <<<"$out" | head -n 1)"
  want="$(sed 's/^mesh auto: planned data \([0-9]*\) fsdp \([0-9]*\) tensor \([0-9]*\)$/mesh data=\1 fsdp=\2 tensor=\3/' <<<"$planned")"
  if [[ -n "$planned" && "$mesh" == "$want" && "$mesh" != "mesh data=2 fsdp=2 tensor=1" ]]; then
    ok "srun --ax-mesh=auto with AX_PLAN_GPU=H100-80GB: '$planned', trained on $mesh"
  else
    bad "srun --ax-mesh=auto with AX_PLAN_GPU=H100-80GB: plan line '$planned', mesh '$mesh'"
    grep 'mesh' <<<"$out" | head -n 5 | sed 's/^/  | /'
  fi
fi
# Without --ax-mesh the plugin sets no AX_*: ax-train takes its place from PMIx and its mesh from
# the config (mesh.ici/mesh.dcn auto: fsdp over a node's ranks, data across nodes). Its job secret
# is removed too: under PMIx rank 0 makes one and hands it out through PMIx.
run="$dir/run-pmix"
step_result run-pmix
if [[ "$rc" != 0 ]]; then
  bad "srun --mpi=pmix without --ax-mesh and without a job secret exited $rc"
  sed 's/^/  | /' <<<"$out" | tail -n 30
else
  mesh="$(grep -o 'mesh data=[0-9]* fsdp=[0-9]* tensor=[0-9]*' <<<"$out" | head -n 1)"
  source_line="$(grep -o 'from [a-z]*, coordinator' <<<"$out" | head -n 1)"
  if [[ "$source_line" == "from pmix, coordinator" && "$mesh" == "mesh data=2 fsdp=2 tensor=1" ]]; then
    ok "srun --mpi=pmix, no --ax-mesh, no AX_JOB_SECRET: job context from PMIx, $mesh"
  else
    bad "srun --mpi=pmix without --ax-mesh: context '$source_line', '$mesh'"
  fi
  same_losses "srun --mpi=pmix -N2 x 2 tasks, secret through PMIx" "$ref" "$(losses "$run")"
fi
# Neither PMIx nor a secret (a launch outside ax's launch path): every rank fails at once, saying so.
start=$SECONDS
# shellcheck disable=SC2046
out="$(t srun -J "$JOB" -N 2 --ntasks-per-node=2 --kill-on-bad-exit=1 \
  env -u AX_JOB_SECRET "$AX_TRAIN" $(train_args "$dir/data" "$dir/run-no-secret") 2>&1)"
rc=$?
if ((rc != 0)) && grep -q "has no job secret (AX_JOB_SECRET is not set)" <<<"$out" &&
  ((SECONDS - start < 25)); then
  ok "srun without PMIx and without a job secret: exit $rc after $((SECONDS - start)) s, saying why"
else
  bad "srun without a job secret: exit $rc after $((SECONDS - start)) s"
  sed 's/^/  | /' <<<"$out" | tail -n 10
fi
finish
