#!/usr/bin/env bash
# shellcheck disable=SC2034  # `vars` is read by submit_sub (sbatch_lib.sh)
# sbatch/example_pile.sub as users submit it: `sbatch -N 2 example_pile.sub` with the Pax
# variables, tiny-gpt on real shards, GPUS_PER_NODE=2 (CPU ranks). In srun mode (one task per GPU,
# --ax-mesh) and in ax-launch mode (one launcher per node) the job completes with exit 0, the loss
# falls, checkpoints, metrics, TensorBoard and the per-task output files are where the variables
# say, PREC=bfloat16 runs the ranks in the bf16 plan, and both modes log the same losses;
# ax-launch mode also where srun loads no spank_ax.so (the job script's own job secret). With
# CONTAINER set, AX_DRY_RUN=1 shows the Pyxis command (the original's mounts, in-container paths)
# without running it.
#   sbatch_pile.sh BUILD_DIR REPO_DIR
source "$(dirname "$0")/lib.sh" "$@"
source "$(dirname "$0")/train_lib.sh"
source "$(dirname "$0")/sbatch_lib.sh"
require_cluster
dir="$(scratch)"
prepare_data "$dir/data"
# ax-data's layout: shards/train (+ shards/val); BASE_TFDS_DATA_DIR names shards/.
steps=12
ws="$dir/ws"

# The four jobs are submitted at once, each under its own name (--dependency=singleton holds back
# only jobs of one name): two run at a time on the 4 nodes; each is checked below once it ended.
# mode A: srun --ax-mesh, one ax-train per (fake) GPU.
mapfile -t vars < <(sub_env "$dir" logs/srun "MAX_STEPS=$steps")
id="$(SUB_NAME="$JOB-srun" submit_sub "$dir/srun.out" -N 2 "$SUB_DIR/example_pile.sub")"

# mode B: one ax-launch per node.
mapfile -t vars < <(sub_env "$dir" logs/launch "MAX_STEPS=$steps" AX_LAUNCH_MODE=ax-launch)
id2="$(SUB_NAME="$JOB-launch" submit_sub "$dir/launch.out" -N 2 "$SUB_DIR/example_pile.sub")"

# mode B on a cluster whose srun does not load spank_ax.so (an srun on PATH that reads a copy of
# slurm.conf with an empty plugstack): every node's ax-launch shares the job secret that the job
# script made, and the run trains the same losses.
mkdir -p "$dir/bin"
: >"$dir/no-plugins.conf"
sed "s|^PlugStackConfig=.*|PlugStackConfig=$dir/no-plugins.conf|" "$SLURM_CONF" \
  >"$dir/slurm-no-plugin.conf"
printf '#!/bin/bash\nSLURM_CONF=%q exec %q "$@"\n' "$dir/slurm-no-plugin.conf" \
  "$(command -v srun)" >"$dir/bin/srun"
chmod +x "$dir/bin/srun"
if t "$dir/bin/srun" --help 2>&1 | grep -q -- --ax-mesh; then
  bad "the srun without plugins still lists --ax-mesh"
fi
mapfile -t vars < <(sub_env "$dir" logs/launch-no-plugin "MAX_STEPS=$steps" \
  AX_LAUNCH_MODE=ax-launch "PATH=$dir/bin:$PATH")
id4="$(SUB_NAME="$JOB-no-plugin" submit_sub "$dir/launch-no-plugin.out" -N 2 \
  "$SUB_DIR/example_pile.sub")"

# CONTAINER: the Pyxis command, checked without Pyxis (AX_DRY_RUN=1).
mapfile -t vars < <(sub_env "$dir" logs/container "MAX_STEPS=$steps" AX_DRY_RUN=1 \
  "CONTAINER=ghcr.io#nvidia/ax:latest" AX_BIN=)
id3="$(SUB_NAME="$JOB-container" submit_sub "$dir/container.out" -N 2 "$SUB_DIR/example_pile.sub")"

end_job "$id" 90
job_completed "srun mode: sbatch -N 2 example_pile.sub" "$id" "$dir/srun.out" \
  "$ws/output/output-$id-0-0.txt"
run="$ws/logs/srun"
expect_files "srun mode outputs" "$run/metrics.jsonl" "$run/config.json" \
  "$run/checkpoints/step_$(printf %08d "$steps")/COMMIT" \
  "$ws/output/output-$id-0-0.txt" "$ws/output/output-$id-0-1.txt" \
  "$ws/output/output-$id-1-2.txt" "$ws/output/output-$id-1-3.txt"
n_out="$(find "$ws/output" -name "output-$id-*" | wc -l)"
if ((n_out == 4)); then
  ok "srun mode: 4 per-task output files"
else
  bad "srun mode: $n_out output files"
fi
run_dir_complete "srun mode" "$run" "$steps"
loss_falls "srun mode" "$run"
if grep -q "mesh data=2 fsdp=2 tensor=1" "$ws/output/output-$id-0-0.txt"; then
  ok "srun mode: the plugin's auto mesh (data=2 fsdp=2)"
else
  bad "srun mode: mesh not data=2 fsdp=2"
fi
# PREC=bfloat16 reaches ax-train as train.precision: CPU ranks run the GPU's bf16 plan.
if grep -q "device: cpu-bf16$" "$ws/output/output-$id-0-0.txt"; then
  ok "srun mode: PREC=bfloat16 runs the CPU ranks in the bf16 plan (device: cpu-bf16)"
else
  bad "srun mode: PREC=bfloat16 but $(grep -o 'device: .*' "$ws/output/output-$id-0-0.txt")"
fi

end_job "$id2" 90
job_completed "ax-launch mode: sbatch -N 2 example_pile.sub" "$id2" "$dir/launch.out" \
  "$ws/output/output-$id2-0-0.txt"
run2="$ws/logs/launch"
expect_files "ax-launch mode outputs" "$run2/metrics.jsonl" \
  "$run2/checkpoints/step_$(printf %08d "$steps")/COMMIT" \
  "$ws/output/output-$id2-0-0.txt" "$ws/output/output-$id2-1-1.txt" \
  "$run2/launch/node0/logs/rank_0.log" "$run2/launch/node1/logs/rank_3.log"
if [[ -n "$(step_losses "$run")" && "$(step_losses "$run")" == "$(step_losses "$run2")" ]]; then
  ok "ax-launch mode: the same $steps losses as srun mode, bit for bit"
else
  bad "ax-launch mode: losses differ from srun mode"
  paste <(step_losses "$run") <(step_losses "$run2") | sed 's/^/  srun | ax-launch: /'
fi

end_job "$id4" 90
job_completed "ax-launch mode, srun without spank_ax.so: the job script's secret" "$id4" \
  "$dir/launch-no-plugin.out" "$ws/output/output-$id4-0-0.txt"
if [[ -n "$(step_losses "$run")" &&
  "$(step_losses "$run")" == "$(step_losses "$ws/logs/launch-no-plugin")" ]]; then
  ok "ax-launch mode without the plugin: the same $steps losses as srun mode"
else
  bad "ax-launch mode without the plugin: losses differ from srun mode"
fi

end_job "$id3" 60
state="$JOB_STATE"
cmd="$(grep '^ax-job: srun ' "$dir/container.out")"
mounts="$ws:/opt/paxml/workspace,$dir/data/spm.model:/mnt/vocab,$dir/data/shards:/mnt/datasets"
want=("--container-image=ghcr.io#nvidia/ax:latest"
  "--container-mounts=$mounts"
  "--export=ALL" " ax-train --experiment tiny-gpt --data /mnt/datasets/train --tokenizer /mnt/vocab"
  "--run-dir /opt/paxml/workspace/logs/container" "-o $ws/output/output-%j-%n-%t.txt")
missing=()
for w in "${want[@]}"; do [[ "$cmd" == *"$w"* ]] || missing+=("$w"); done
if [[ "$state" == COMPLETED && ${#missing[@]} == 0 && ! -e "$ws/logs/container" ]]; then
  ok "CONTAINER dry run: Pyxis image, the original mounts, in-container paths; nothing ran"
else
  bad "CONTAINER dry run: job $state, missing ${missing[*]:-nothing}"
  show_tail "$dir/container.out"
fi
finish
