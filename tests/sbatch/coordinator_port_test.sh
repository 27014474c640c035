#!/usr/bin/env bash
# The job scripts derive the ax-launch coordinator port in bash (ax_coordinator in
# sbatch/lib/launch.sh: they run where the ax binaries may exist only inside a container image);
# the rule must be the C++ one (job::coordinator_port, which spank_ax.so also uses) for step
# slot 63. Compares
# both over job ids that exercise the modulo and the 32-bit range.
#   coordinator_port_test.sh REPO_DIR AX_LAUNCH
set -uo pipefail
REPO="${1:?usage: $0 REPO_DIR AX_LAUNCH}"
AX_LAUNCH="${2:?usage: $0 REPO_DIR AX_LAUNCH}"
# shellcheck source=../../sbatch/ax_job.sh
source "$REPO/sbatch/ax_job.sh"
failed=0
checked=0
for job in 0 1 2 187 188 12345 999999 2147483647 4294967295; do
  unset AX_COORDINATOR_PORT
  SLURM_JOB_ID=$job ax_coordinator
  want=$("$AX_LAUNCH" --coordinator-port "$job" 63) || { echo "FAIL: ax-launch --coordinator-port $job 63"; exit 1; }
  if [[ "$AX_COORDINATOR_PORT" != "$want" ]]; then
    echo "FAIL: job $job: ax_job.sh gives port $AX_COORDINATOR_PORT, ax-launch $want"
    failed=$((failed + 1))
  fi
  checked=$((checked + 1))
done
((${#AX_ERRORS[@]} == 0)) || { echo "FAIL: ax_coordinator recorded errors: ${AX_ERRORS[*]}"; exit 1; }
((failed == 0)) || exit 1
echo "PASS: $checked job ids, the bash and C++ coordinator ports agree"
