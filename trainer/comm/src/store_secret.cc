// Which secret a rank's TCP store proves (docs/threat-model.md "How the secret reaches the ranks").
#include "ax/common/strings.h"
#include "ax/trainer/comm/store.h"

namespace ax::train::comm {

StatusOr<std::string> job_store_secret(const job::JobContext& ctx, Millis timeout) {
  if (!ctx.secret.empty()) return ctx.secret;
  if (ctx.world == 1) return job::new_job_secret();  // nobody else connects
  if (ctx.pmix) {
    // PMIx shows a rank's values only to the processes of its own job (Slurm authenticates
    // them), so rank 0's fresh secret reaches exactly this job's ranks. A "/<rank>" key is
    // fetched from its owner on demand, before any fence.
    AX_ASSIGN_OR_RETURN(std::shared_ptr<Store> pmix, make_pmix_store());
    const std::string key = "ax.job-secret/0";
    if (ctx.rank != 0) return pmix->get(key, timeout);
    AX_ASSIGN_OR_RETURN(std::string secret, job::new_job_secret());
    AX_RETURN_IF_ERROR(pmix->set(key, secret));
    return secret;
  }
  return FailedPrecondition(
      "rank ", ctx.rank, " of ", ctx.world, " has no job secret (", job::kJobSecretVar,
      " is not set), so the job's store would not admit it. The likeliest cause is a launch "
      "outside ax's launch path: start the ranks with ax-launch, srun with spank_ax.so in "
      "plugstack.conf (on the host that runs srun), the sbatch/ job scripts, or srun "
      "--mpi=pmix (docs/threat-model.md)");
}

}  // namespace ax::train::comm
