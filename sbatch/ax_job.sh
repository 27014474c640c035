# shellcheck shell=bash
# Sourced by every job script in sbatch/ (the Pax, AXLearn and T5x interfaces, tokenize.sub):
# variable checks, where the ax binaries are, the srun command of both launch modes (with or
# without a Pyxis container), and the preemption protocol (trap USR1/TERM, forward to the step,
# requeue on exit 75).
# docs/job-scripts.md describes the variables and the protocol.
#
# The code is in lib/ beside this file, found through this file's own path (so wherever a job
# script found ax_job.sh: AX_SBATCH_DIR, the submitted script's directory, the checkout):
#   lib/checks.sh      the error list and the variable checks (ax_error, ax_check_*, ...)
#   lib/lint.sh        warnings about variables a script does not read (ax_warn_unknown_vars)
#   lib/t5x.sh         T5x's knobs and fine-tuning recipe as ax-train options
#   lib/launch.sh      binaries, launch modes, the srun command and the training step
#   lib/plan.sh        the mesh from `ax-train plan`: chosen when no mesh variable is set, checked
#                      when one is
#   lib/preemption.sh  stop signals, running the step, the job's end (requeue on exit 75)

# shellcheck source-path=SCRIPTDIR source=lib/checks.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/checks.sh" || return
# shellcheck source-path=SCRIPTDIR source=lib/lint.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/lint.sh" || return
# shellcheck source-path=SCRIPTDIR source=lib/t5x.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/t5x.sh" || return
# shellcheck source-path=SCRIPTDIR source=lib/launch.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/launch.sh" || return
# shellcheck source-path=SCRIPTDIR source=lib/plan.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/plan.sh" || return
# shellcheck source-path=SCRIPTDIR source=lib/preemption.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/preemption.sh" || return
