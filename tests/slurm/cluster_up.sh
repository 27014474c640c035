#!/usr/bin/env bash
# Fixture setup of the slurm suite (ctest FIXTURES_SETUP slurm_cluster): a fresh 4-node cluster,
# 8 fake GPUs per node, spank_ax.so `required` in plugstack.conf with the dgx-h100 topology fixture.
# Tears down whatever an earlier (crashed) run left in the same state dir first.
source "$(dirname "$0")/lib.sh" "$@"
trap - EXIT  # no jobs of our own to cancel

why="$(slurm_unavailable_reason)"
[[ -z "$why" ]] || skip "slurm suite: $why"

plugin="$BUILD/spank_plugin/spank_ax.so"
for f in "$plugin" "$BUILD/launcher/ax-launch" "$BUILD/tests/launcher/fake_rank" "$FIXTURE"; do
  if [[ ! -e "$f" ]]; then
    echo "FAIL: $f is missing (build the targets spank_ax ax-launch fake_rank)"
    exit 1
  fi
done

# Ports of their own, so a cluster started by hand (scripts/slurm-cluster.sh defaults) can coexist.
export AX_SLURM_CTLD_PORT="${AX_SLURM_CTLD_PORT:-6827}"
export AX_SLURM_PORT_BASE="${AX_SLURM_PORT_BASE:-17100}"
cluster="$REPO/scripts/slurm-cluster.sh"
start=$SECONDS

# A crashed run may have left daemons, pid files, /etc/hosts lines or jobs behind.
timeout -k 5 60 bash "$cluster" down --state-dir "$STATE" || true
rm -rf "${STATE:?}/work"
mkdir -p "$STATE/work"
echo "required $plugin topology=$FIXTURE" >"$STATE/plugstack-ax.conf"

if ! timeout -k 5 90 bash "$cluster" up --nodes 4 --gpus-per-node 8 --state-dir "$STATE" \
  --plugstack "$STATE/plugstack-ax.conf"; then
  echo "FAIL: scripts/slurm-cluster.sh up failed (logs in $STATE/log)"
  exit 1
fi
idle="$(t sinfo -h -N -t idle -o %N | sort -u | tr '\n' ' ')"
if [[ "$idle" == "n1 n2 n3 n4 " ]]; then
  ok "4 nodes idle: $idle"
else
  bad "idle nodes '$idle', want n1..n4"
fi
gres="$(t sinfo -h -N -o '%N %G' | sort -u | tr '\n' ';')"
if [[ "$gres" == "n1 gpu:8;n2 gpu:8;n3 gpu:8;n4 gpu:8;" ]]; then
  ok "gpu:8 on every node"
else
  bad "GRES '$gres'"
fi
# The plugin is loaded (required) by every client: its option is listed.
if t srun --help 2>&1 | grep -q -- '--ax-mesh'; then
  ok "srun --help lists --ax-mesh"
else
  bad "srun --help does not list --ax-mesh"
fi
echo "cluster up in $((SECONDS - start)) s"
finish
