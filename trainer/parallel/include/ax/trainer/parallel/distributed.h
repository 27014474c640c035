// ax-train's place in the job (docs/architecture.md: JobContext → Store → Communicators → Mesh
// groups): the mesh this rank trains on, the TCP store hosted by rank 0 at the coordinator, and the
// communicators of its mesh groups. A single process gets the same struct with world 1 and no
// store, so the loop has one code path. Design: docs/sharding.md.
#pragma once

#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "ax/common/status.h"
#include "ax/job_context/job_context.h"
#include "ax/trainer/backend/backend.h"
#include "ax/trainer/checkpoint/checkpoint.h"
#include "ax/trainer/comm/activity.h"
#include "ax/trainer/comm/communicator.h"
#include "ax/trainer/config/config.h"
#include "ax/trainer/parallel/param_store.h"

namespace ax::train {

// The global mesh of a job: AX_ICI_MESH × AX_DCN_MESH when the launcher or plugin derived them,
// else the config's mesh.ici / mesh.dcn (auto: fsdp over the ranks of a node, data across
// nodes; one -1 per vector fills in the rest). Its size must equal the job's.
StatusOr<comm::MeshCoords> resolve_mesh(const job::JobContext& ctx, const MeshConfig& mesh);
// Pipeline stages (pipeline > 1) are built for gpt and llama with data, fsdp, seq and tensor
// parallelism inside a stage, and at least one layer per stage; anything else is refused in one
// line before any communicator is built (docs/sharding.md "Pipeline parallelism").
Status check_pipeline_layout(const Config& config, const comm::MeshCoords& coords);
// A seq axis (seq > 1) is built for gpt and llama (with every other axis, dropout and
// recomputation), with a train.seq_len it divides; anything else is refused in one line before
// any communicator is built (docs/sharding.md "Sequence parallelism").
Status check_seq_layout(const Config& config, const comm::MeshCoords& coords);

struct Distributed {
  job::JobContext ctx;
  comm::MeshCoords coords;
  std::shared_ptr<comm::TcpStore> store;  // null for a single process
  comm::MeshGroups groups;                // null communicators for a single process
  comm::Millis timeout{300000};
  bool fsdp_prefetch = true;  // train.fsdp_prefetch
  // A small backend buffer for reductions of a few values (host memory on CPU backends).
  Backend* backend = nullptr;
  void* scratch = nullptr;
  // Publishes what this rank is doing when one state lasts, and ends a rank held outside
  // collectives once the job has failed (activity.h; docs/reliability.md "Stuck ranks"). Several
  // ranks only; declared after the store and the groups, so it stops first.
  std::unique_ptr<comm::ActivityReporter> reporter;

  ~Distributed();
  bool multi() const { return ctx.world > 1; }
  int replicas() const { return coords.data * coords.fsdp; }
  int replica() const { return coords.d * coords.fsdp + coords.f; }
  ModelParallel model_parallel() const;
  // Sum (or max) of one value per rank over a group; the value itself without a group.
  double all_reduce(comm::Communicator* group, double value, comm::ReduceOp op) const;
  // The checkpoint group of the whole job (all-gather through the store). Its first round also
  // erases the keys of the previous checkpoint, which every rank has left behind by then.
  CheckpointGroup checkpoint_group(int64_t step) const;

 private:
  std::shared_ptr<int64_t> last_checkpoint_ = std::make_shared<int64_t>(-1);
};

// The job's TCP store, hosted by rank 0 at the coordinator and authenticated with the job's
// secret, for a job of several ranks (setup_distributed's, and `ax-train eval`'s, which needs no
// communicators). FailedPrecondition without a coordinator.
StatusOr<std::shared_ptr<comm::TcpStore>> connect_job_store(const job::JobContext& ctx,
                                                            comm::Millis timeout);

// Reads the job context, resolves the mesh, connects to the store and builds the groups (Gloo on
// CPU backends, NCCL on CUDA). Logs one line describing the rank's place.
StatusOr<std::unique_ptr<Distributed>> setup_distributed(const Config& config,
                                                         const job::JobContext& ctx,
                                                         Backend* backend, std::ostream& log);

}  // namespace ax::train
