#include "ax/trainer/parallel/distributed.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "ax/common/strings.h"
#include "ax/topology/mesh.h"
#include "ax/trainer/comm/communicator.h"

namespace ax::train {
StatusOr<comm::MeshCoords> resolve_mesh(const job::JobContext& ctx, const MeshConfig& mesh) {
  topo::MeshShape global;
  if (!ctx.ici_mesh.empty() && !ctx.dcn_mesh.empty()) {
    // Shapes the launcher or plugin already derived (and checked: `force` only lets a tensor
    // axis across DCN through, which they refused unless asked).
    StatusOr<topo::MeshSpec> spec =
        topo::parse_mesh_spec(str_cat("ici=", ctx.ici_mesh, ";dcn=", ctx.dcn_mesh, ";force"));
    if (!spec.ok()) return spec.status().with_context("AX_ICI_MESH/AX_DCN_MESH");
    const topo::MeshShape& i = spec->ici;
    const topo::MeshShape& d = spec->dcn;
    if (std::min({i.pipeline, i.data, i.fsdp, i.seq, i.tensor, d.pipeline, d.data, d.fsdp, d.seq,
                  d.tensor}) < 1) {
      return InvalidArgument("AX_ICI_MESH=", ctx.ici_mesh, " AX_DCN_MESH=", ctx.dcn_mesh,
                             ": expected resolved shapes (no -1)");
    }
    topo::Mesh resolved;
    resolved.ici = i;
    resolved.dcn = d;
    global = resolved.global();
    if (global.size() != ctx.world) {
      return InvalidArgument("AX_ICI_MESH=", ctx.ici_mesh, " x AX_DCN_MESH=", ctx.dcn_mesh, " is ",
                             global.size(), " ranks, the job has ", ctx.world);
    }
  } else {
    // The config's mesh, derived as for CPU ranks: each node is one ICI domain (auto: fsdp over
    // a node's ranks, data across nodes; an explicit vector's -1 is filled in).
    const int nodes = std::max(1, ctx.num_nodes);
    if (ctx.world % nodes != 0) {
      return InvalidArgument("the job has ", ctx.world, " ranks on ", nodes,
                             " nodes: not the same number on each");
    }
    const std::string text = mesh.ici == "auto" && mesh.dcn == "auto"
                                 ? std::string("auto")
                                 : str_cat("ici=", mesh.ici == "auto" ? "1,-1,1" : mesh.ici,
                                           ";dcn=", mesh.dcn == "auto" ? "-1,1,1" : mesh.dcn);
    StatusOr<topo::MeshSpec> spec = topo::parse_mesh_spec(text);
    if (!spec.ok()) return spec.status().with_context("mesh.ici/mesh.dcn");
    StatusOr<topo::Mesh> derived =
        topo::derive_mesh({topo::Topology{}}, nodes, ctx.world / nodes, *spec);
    if (!derived.ok()) return derived.status().with_context("mesh.ici/mesh.dcn");
    global = derived->global();
  }
  return comm::MeshCoords::of(ctx.rank, global.data, global.fsdp, global.tensor, global.pipeline,
                              global.seq);
}

Status check_pipeline_layout(const Config& config, const comm::MeshCoords& coords) {
  const int P = coords.pipeline;
  // Like the schedule, the chunks mean nothing without a pipeline: a one-process resume of an
  // interleaved run keeps its config.
  const int64_t V = config.train.pipeline_virtual_stages;
  if (V > 1 && config.train.pipeline_schedule != "interleaved") {
    return InvalidArgument("train.pipeline_virtual_stages=", V, " is for the interleaved ",
                           "schedule, and train.pipeline_schedule=", config.train.pipeline_schedule,
                           ": set train.pipeline_schedule=interleaved, or the virtual stages to 1");
  }
  if (P == 1) return Status::Ok();
  const ModelConfig& m = config.model;
  // T5's stages cut the encoder's and the decoder's layers as one sequence.
  const bool t5 = m.family == ModelFamily::kT5;
  const int64_t layers = t5 ? m.num_layers + m.decoder_layers() : m.num_layers;
  const std::string have = t5 ? str_cat("model.num_layers=", m.num_layers,
                                        " and model.num_decoder_layers=", m.decoder_layers(), " (",
                                        layers, " layers in all)")
                              : str_cat("model.num_layers=", m.num_layers);
  if (layers < P) {
    return InvalidArgument("pipeline=", P, " stages need at least as many layers, and ", have,
                           ": use a smaller pipeline axis or more layers");
  }
  if (layers < P * V) {
    return InvalidArgument("pipeline=", P, " stages of train.pipeline_virtual_stages=", V,
                           " chunks need at least ", P * V, " layers, and ", have,
                           ": use fewer virtual stages or more layers");
  }
  const int64_t micro_batches = config.train.num_microbatches;
  if (config.train.pipeline_schedule == "interleaved" && micro_batches % P != 0) {
    return InvalidArgument("train.pipeline_schedule=interleaved runs micro-batches in rounds of ",
                           "pipeline=", P, ", and train.num_microbatches=", micro_batches,
                           " is not a multiple of it: use a multiple of ", P,
                           " micro-batches, or train.pipeline_schedule=1f1b");
  }
  return Status::Ok();
}

Status check_seq_layout(const Config& config, const comm::MeshCoords& coords) {
  const int S = coords.seq;
  if (S == 1) return Status::Ok();
  if (config.model.family == ModelFamily::kT5) {
    return Unimplemented("seq=", S, ": sequence sharding is built for the decoder-only families ",
                         "(gpt, llama), not for model.family=t5 yet (issue 26): train t5 with a ",
                         "mesh of seq 1");
  }
  if (config.train.seq_len % S != 0) {
    return InvalidArgument("train.seq_len=", config.train.seq_len, " does not split over the seq ",
                           "axis of ", S, " ranks: make it a multiple of ", S);
  }
  return Status::Ok();
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
  p.pipeline_rank = coords.p;
  p.pipeline_size = coords.pipeline;
  p.pipeline = groups.pipeline.get();
  p.seq_rank = coords.s;
  p.seq_size = coords.seq;
  p.seq = groups.seq.get();
  return p;
}

double Distributed::all_reduce(comm::Communicator* group, double value, comm::ReduceOp op) const {
  if (group == nullptr || group->size() == 1) return value;
  Tensor t(scratch, DType::kF32, {1});
  const float v = static_cast<float>(value);
  backend->copy_from_host(t, &v);
  comm::collective_or_die(group->all_reduce(t, op), "a reduction of the train loop");
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
  g.all_gather = [this, step,
                  round](const std::string& value) -> StatusOr<std::vector<std::string>> {
    const int r = (*round)++;
    StatusOr<std::vector<std::string>> values = comm::store_all_gather(
        *store, str_cat("ckpt/", step, "/", r), ctx.rank, ctx.world, value, timeout);
    const int64_t previous = *last_checkpoint_;
    if (!values.ok() || r != 0 || previous == step) return values;
    *last_checkpoint_ = step;
    // Every rank set its key of this round after it had returned from the previous save, so
    // nobody reads that save's keys any more: without this the store would grow with the run.
    if (ctx.rank == 0 && previous >= 0) {
      AX_RETURN_IF_ERROR(store->erase_prefix(str_cat("ckpt/", previous, "/")).status());
    }
    return values;
  };
  return g;
}

StatusOr<std::shared_ptr<comm::TcpStore>> connect_job_store(const job::JobContext& ctx,
                                                            comm::Millis timeout) {
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
  so.connect_timeout = timeout;
  AX_ASSIGN_OR_RETURN(so.secret, comm::job_store_secret(ctx, timeout));
  StatusOr<std::shared_ptr<comm::TcpStore>> store = comm::make_tcp_store(so);
  if (!store.ok()) return store.status().with_context("connecting to the job's store");
  return *store;
}

StatusOr<std::unique_ptr<Distributed>> setup_distributed(const Config& config,
                                                         const job::JobContext& ctx,
                                                         Backend* backend, std::ostream& log) {
  auto d = std::make_unique<Distributed>();
  d->ctx = ctx;
  d->backend = backend;
  d->timeout = comm::Millis(static_cast<int64_t>(std::ceil(config.train.comm_timeout_s * 1000)));
  d->fsdp_prefetch = config.train.fsdp_prefetch;
  AX_ASSIGN_OR_RETURN(d->coords, resolve_mesh(ctx, config.mesh));
  // A plain return: the message is the user's, without a source location.
  if (Status s = check_pipeline_layout(config, d->coords); !s.ok()) return s;
  if (Status s = check_seq_layout(config, d->coords); !s.ok()) return s;
  AX_ASSIGN_OR_RETURN(d->scratch, backend->alloc(64));
  if (!d->multi()) return d;
  AX_ASSIGN_OR_RETURN(d->store, connect_job_store(ctx, d->timeout));
  // A collective that fails ends every process; rank 0 hosts the store through which the
  // others learn which rank went missing (a round of a few seconds, docs/comm.md), so it waits
  // for them before it exits: until each has said it is going (the counter kExitedKey), at most
  // 8 s (a rank that died says nothing).
  {
    constexpr const char* kExitedKey = "failure/exited";
    std::weak_ptr<comm::TcpStore> weak = d->store;
    if (ctx.rank == 0) {
      comm::set_failure_linger(8000);
      comm::set_failure_exit_hooks({}, [weak, world = ctx.world] {
        std::shared_ptr<comm::TcpStore> store = weak.lock();
        if (!store) return true;
        StatusOr<int64_t> gone = store->add(kExitedKey, 0);
        return !gone.ok() || *gone >= world - 1;
      });
    } else {
      comm::set_failure_exit_hooks(
          [weak] {
            if (std::shared_ptr<comm::TcpStore> store = weak.lock()) {
              (void)store->add(kExitedKey, 1);
            }
          },
          {});
    }
  }
  comm::CommOptions co;
  co.timeout = d->timeout;
  co.coordinator = ctx.coordinator;
  co.cuda_stream = backend->native_stream();
  co.cuda_device = backend->device_ordinal();
  // A GPU collective that hangs or fails is found by the communicator's watchdog while this
  // thread waits for the stream elsewhere: the process ends there, like a failed call.
  co.on_async_failure = [](const Status& s) {
    comm::collective_or_die(s, "a collective on the GPU");
  };
  const bool cuda = backend->device_ordinal() >= 0;  // NCCL needs a device; cpu-bf16 is Gloo
  StatusOr<comm::MeshGroups> groups = comm::make_mesh_groups(
      d->store, d->coords, cuda ? comm::CommBackend::kNccl : comm::CommBackend::kGloo, co);
  if (!groups.ok()) return groups.status().with_context("building the mesh groups");
  d->groups = std::move(*groups);
  d->reporter = std::make_unique<comm::ActivityReporter>(d->store, ctx.rank, d->timeout);
  log << "job: " << job::describe(ctx) << "; mesh "
      << (d->coords.pipeline > 1 ? str_cat("pipeline=", d->coords.pipeline, " ") : std::string())
      << "data=" << d->coords.data << " fsdp=" << d->coords.fsdp
      << (d->coords.seq > 1 ? str_cat(" seq=", d->coords.seq) : std::string())
      << " tensor=" << d->coords.tensor << " (this rank "
      << (d->coords.pipeline > 1 ? str_cat("p", d->coords.p, " ") : std::string()) << "d"
      << d->coords.d << " f" << d->coords.f
      << (d->coords.seq > 1 ? str_cat(" s", d->coords.s) : std::string()) << " t" << d->coords.t
      << ")\n";
  return d;
}

}  // namespace ax::train
