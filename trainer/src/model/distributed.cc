#include "distributed.h"

#include <chrono>
#include <cmath>
#include <optional>

#include "ax/common/strings.h"
#include "layers.h"

namespace ax::train {
namespace {

// "d,f,t" with at most one -1 (filled so that the product is `size`); size 0 = no fill.
StatusOr<std::array<int, 3>> parse_shape(const std::string& text, int size, const char* what) {
  std::vector<std::string> parts = str_split(text, ',');
  std::array<int, 3> shape{};
  if (parts.size() != 3) return InvalidArgument(what, " '", text, "' is not data,fsdp,tensor");
  int fill = -1, product = 1;
  for (int k = 0; k < 3; ++k) {
    std::optional<int64_t> v = parse_int64(str_trim(parts[static_cast<size_t>(k)]));
    if (!v || (*v < 1 && *v != -1) || *v > 1 << 20) {
      return InvalidArgument(what, " '", text, "': axis ", k, " is not a positive integer or -1");
    }
    if (*v == -1) {
      if (fill >= 0) return InvalidArgument(what, " '", text, "' has more than one -1");
      fill = k;
    } else {
      shape[static_cast<size_t>(k)] = static_cast<int>(*v);
      product *= static_cast<int>(*v);
    }
  }
  if (fill >= 0) {
    if (size <= 0 || size % product != 0) {
      return InvalidArgument(what, " '", text, "': the -1 cannot fill ", size, " ranks");
    }
    shape[static_cast<size_t>(fill)] = size / product;
  }
  return shape;
}

}  // namespace

StatusOr<comm::MeshCoords> resolve_mesh(const launcher::JobContext& ctx, const MeshConfig& mesh) {
  std::array<int, 3> ici{}, dcn{};
  std::string source;
  if (!ctx.ici_mesh.empty() && !ctx.dcn_mesh.empty()) {
    AX_ASSIGN_OR_RETURN(ici, parse_shape(ctx.ici_mesh, 0, "AX_ICI_MESH"));
    AX_ASSIGN_OR_RETURN(dcn, parse_shape(ctx.dcn_mesh, 0, "AX_DCN_MESH"));
    source = "AX_ICI_MESH/AX_DCN_MESH";
  } else {
    const int nodes = std::max(1, ctx.num_nodes);
    if (ctx.world % nodes != 0) {
      return InvalidArgument("the job has ", ctx.world, " ranks on ", nodes,
                             " nodes: not the same number on each");
    }
    const int per_node = ctx.world / nodes;
    if (mesh.ici == "auto") {
      ici = {1, per_node, 1};
    } else {
      AX_ASSIGN_OR_RETURN(ici, parse_shape(mesh.ici, per_node, "mesh.ici (ICI_MESH_SHAPE)"));
    }
    if (mesh.dcn == "auto") {
      dcn = {nodes, 1, 1};
    } else {
      AX_ASSIGN_OR_RETURN(dcn, parse_shape(mesh.dcn, nodes, "mesh.dcn (DCN_MESH_SHAPE)"));
    }
    source = "mesh.ici/mesh.dcn";
  }
  const int data = ici[0] * dcn[0], fsdp = ici[1] * dcn[1], tensor = ici[2] * dcn[2];
  if (data * fsdp * tensor != ctx.world) {
    return InvalidArgument("the mesh from ", source, " (ici ", ici[0], ",", ici[1], ",", ici[2],
                           " x dcn ", dcn[0], ",", dcn[1], ",", dcn[2], " = ", data * fsdp * tensor,
                           " ranks) does not match the job's ", ctx.world, " ranks");
  }
  return comm::MeshCoords::of(ctx.rank, data, fsdp, tensor);
}

Distributed::~Distributed() {
  if (scratch != nullptr) backend->free(scratch);
}

ModelParallel Distributed::model_parallel() const {
  ModelParallel p;
  p.tensor_rank = coords.t;
  p.tensor_size = coords.tensor;
  p.fsdp_rank = coords.f;
  p.fsdp_size = coords.fsdp;
  p.tensor = groups.tensor.get();
  p.fsdp = groups.fsdp.get();
  p.data = groups.data.get();
  p.fsdp_prefetch = fsdp_prefetch ? groups.fsdp_prefetch.get() : nullptr;
  return p;
}

double Distributed::all_reduce(comm::Communicator* group, double value, comm::ReduceOp op) const {
  if (group == nullptr || group->size() == 1) return value;
  Tensor t(scratch, DType::kF32, {1});
  const float v = static_cast<float>(value);
  backend->copy_from_host(t, &v);
  layers::collective_or_die(group->all_reduce(t, op), "a reduction of the train loop");
  float out = 0;
  backend->copy_to_host(&out, t);
  return out;
}

CheckpointGroup Distributed::checkpoint_group(int64_t step) const {
  CheckpointGroup g;
  g.rank = ctx.rank;
  g.world = ctx.world;
  if (!multi()) return g;
  auto round = std::make_shared<int>(0);
  g.all_gather = [this, step, round](const std::string& value) {
    return comm::store_all_gather(*store, str_cat("ckpt/", step, "/", (*round)++), ctx.rank,
                                  ctx.world, value, timeout);
  };
  return g;
}

StatusOr<std::unique_ptr<Distributed>> setup_distributed(const Config& config,
                                                         const launcher::JobContext& ctx,
                                                         Backend* backend, std::ostream& log) {
  auto d = std::make_unique<Distributed>();
  d->ctx = ctx;
  d->backend = backend;
  d->timeout = comm::Millis(static_cast<int64_t>(std::ceil(config.train.comm_timeout_s * 1000)));
  d->fsdp_prefetch = config.train.fsdp_prefetch;
  AX_ASSIGN_OR_RETURN(d->coords, resolve_mesh(ctx, config.mesh));
  AX_ASSIGN_OR_RETURN(d->scratch, backend->alloc(64));
  if (!d->multi()) return d;
  if (ctx.coordinator.empty()) {
    return FailedPrecondition("rank ", ctx.rank, " of ", ctx.world,
                              ": no coordinator for the TCP store (set AX_COORDINATOR=host:port, "
                              "or start the ranks with ax-launch or srun --ax-mesh)");
  }
  comm::TcpStoreOptions so;
  so.host_port = ctx.coordinator;
  so.is_server = ctx.rank == 0;
  so.rank = ctx.rank;
  so.world = ctx.world;
  so.connect_timeout = d->timeout;
  StatusOr<std::shared_ptr<comm::TcpStore>> store = comm::make_tcp_store(so);
  if (!store.ok()) return store.status().with_context("connecting to the job's store");
  d->store = *store;
  // A collective that fails ends every process; rank 0 hosts the store through which the
  // others learn which rank went missing (a round of a few seconds, docs/comm.md), so it waits
  // for them before it exits.
  if (ctx.rank == 0) layers::set_failure_linger(8000);
  comm::CommOptions co;
  co.timeout = d->timeout;
  co.coordinator = ctx.coordinator;
  co.cuda_stream = backend->native_stream();
  co.cuda_device = backend->device_ordinal();
  const bool cuda = backend->compute_dtype() != DType::kF32;
  StatusOr<comm::MeshGroups> groups = comm::make_mesh_groups(
      d->store, d->coords, cuda ? comm::CommBackend::kNccl : comm::CommBackend::kGloo, co);
  if (!groups.ok()) return groups.status().with_context("building the mesh groups");
  d->groups = std::move(*groups);
  log << "job: " << launcher::describe(ctx) << "; mesh data=" << d->coords.data
      << " fsdp=" << d->coords.fsdp << " tensor=" << d->coords.tensor << " (this rank d"
      << d->coords.d << " f" << d->coords.f << " t" << d->coords.t << ")\n";
  return d;
}

}  // namespace ax::train
