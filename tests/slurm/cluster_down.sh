#!/usr/bin/env bash
# Fixture cleanup of the slurm suite (ctest FIXTURES_CLEANUP slurm_cluster): stops every daemon
# and checks that none is left and /etc/hosts is clean. Runs even when tests failed.
source "$(dirname "$0")/lib.sh" "$@"
trap - EXIT

why="$(slurm_unavailable_reason)"
[[ -z "$why" ]] || skip "slurm suite: $why"

pids="$(cat "$STATE"/run/slurm*.pid 2>/dev/null | tr '\n' ' ')"
if timeout -k 5 60 bash "$REPO/scripts/slurm-cluster.sh" down --state-dir "$STATE"; then
  alive=""
  for p in $pids; do [[ -d /proc/$p ]] && alive+="$p($(cat /proc/"$p"/comm 2>/dev/null)) "; done
  if [[ -n "$alive" ]]; then
    bad "daemons still running: $alive"
  elif grep -qF "ax-slurm:$STATE" /etc/hosts; then
    bad "/etc/hosts still has lines tagged ax-slurm:$STATE"
  else
    ok "down: daemons ${pids:-(none)}stopped, /etc/hosts clean"
  fi
else
  bad "scripts/slurm-cluster.sh down failed"
fi
finish
