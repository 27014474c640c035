// Mesh coordinates, the groups of each axis, and the communicators of one rank.
#include <cstring>

#include "ax/common/check.h"
#include "comm_internal.h"

namespace ax::train::comm {
namespace {

// A group of one rank: the contract's results are copies of the input (collectives and sends to
// itself).
class LocalCommunicator : public Communicator {
 public:
  LocalCommunicator(std::string name, bool allow_bf16)
      : name_(std::move(name)), allow_bf16_(allow_bf16) {}

  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return name_; }
  int64_t bytes_moved() const override { return bytes_; }

  Status all_reduce(Tensor buf, ReduceOp) override {
    AX_RETURN_IF_ERROR(internal::check_all_reduce(name_, buf, allow_bf16_));
    bytes_ += static_cast<int64_t>(buf.bytes());
    return Status::Ok();
  }
  Status reduce_scatter(Tensor out, Tensor in) override {
    AX_RETURN_IF_ERROR(internal::check_reduce_scatter(name_, 1, out, in, allow_bf16_));
    return copy(out, in);
  }
  Status all_gather(Tensor out, Tensor in) override {
    AX_RETURN_IF_ERROR(internal::check_all_gather(name_, 1, out, in, allow_bf16_));
    return copy(out, in);
  }
  Status broadcast(Tensor buf, int root) override {
    AX_RETURN_IF_ERROR(internal::check_broadcast(name_, 1, buf, root, allow_bf16_));
    bytes_ += static_cast<int64_t>(buf.bytes());
    return Status::Ok();
  }
  Status barrier() override { return Status::Ok(); }
  // Its only peer is itself: each send meets the recv from itself that matches it (a copy).
  Status exchange(const std::vector<P2POp>& ops) override {
    AX_RETURN_IF_ERROR(internal::check_exchange(name_, 1, 0, ops, allow_bf16_));
    bytes_ += internal::exchange_bytes(ops);
    internal::copy_to_self(ops, 0);
    return Status::Ok();
  }

 private:
  Status copy(const Tensor& out, const Tensor& in) {
    bytes_ += static_cast<int64_t>(in.bytes());
    if (in.bytes() > 0 && out.data != in.data) std::memmove(out.data, in.data, in.bytes());
    return Status::Ok();
  }

  const std::string name_;
  const bool allow_bf16_;
  int64_t bytes_ = 0;
};

// The axes a group varies over.
struct Vary {
  bool d = false, f = false, t = false, p = false, s = false;
};

// Global ranks that agree with `c` on every axis not varied, sorted.
std::vector<int> axis_group(const MeshCoords& c, Vary vary) {
  std::vector<int> ranks;
  for (int r = 0; r < c.world(); ++r) {
    const MeshCoords o = MeshCoords::of(r, c.data, c.fsdp, c.tensor, c.pipeline, c.seq);
    if ((vary.p || o.p == c.p) && (vary.d || o.d == c.d) && (vary.f || o.f == c.f) &&
        (vary.s || o.s == c.s) && (vary.t || o.t == c.t)) {
      ranks.push_back(r);
    }
  }
  return ranks;
}

}  // namespace

namespace internal {
std::unique_ptr<Communicator> make_local_communicator(std::string_view backend,
                                                      const std::string& tag, int global_rank,
                                                      bool allow_bf16) {
  return std::make_unique<LocalCommunicator>(group_name(backend, tag, {global_rank}), allow_bf16);
}
}  // namespace internal

MeshCoords MeshCoords::of(int rank, int data, int fsdp, int tensor, int pipeline, int seq) {
  AX_CHECK(data > 0 && fsdp > 0 && tensor > 0 && pipeline > 0 && seq > 0)
      << "mesh axes pipeline=" << pipeline << " data=" << data << " fsdp=" << fsdp << " seq=" << seq
      << " tensor=" << tensor;
  const int world = pipeline * data * fsdp * seq * tensor;
  AX_CHECK(rank >= 0 && rank < world) << "rank " << rank << " outside a mesh of " << world;
  MeshCoords c;
  c.data = data;
  c.fsdp = fsdp;
  c.tensor = tensor;
  c.pipeline = pipeline;
  c.seq = seq;
  c.t = rank % tensor;
  c.s = (rank / tensor) % seq;
  c.f = (rank / (tensor * seq)) % fsdp;
  c.d = (rank / (tensor * seq * fsdp)) % data;
  c.p = rank / (tensor * seq * fsdp * data);
  return c;
}

std::vector<int> MeshCoords::data_group() const { return axis_group(*this, {.d = true}); }
std::vector<int> MeshCoords::fsdp_group() const { return axis_group(*this, {.f = true}); }
std::vector<int> MeshCoords::tensor_group() const { return axis_group(*this, {.t = true}); }
std::vector<int> MeshCoords::replica_group() const {
  return axis_group(*this, {.d = true, .f = true});
}
std::vector<int> MeshCoords::pipeline_group() const { return axis_group(*this, {.p = true}); }
std::vector<int> MeshCoords::seq_group() const { return axis_group(*this, {.s = true}); }

StatusOr<MeshGroups> make_mesh_groups(std::shared_ptr<Store> store, const MeshCoords& coords,
                                      CommBackend backend, const CommOptions& options) {
  const MeshCoords& c = coords;
  if (c.data < 1 || c.fsdp < 1 || c.tensor < 1 || c.pipeline < 1 || c.seq < 1 || c.d < 0 ||
      c.d >= c.data || c.f < 0 || c.f >= c.fsdp || c.t < 0 || c.t >= c.tensor || c.p < 0 ||
      c.p >= c.pipeline || c.s < 0 || c.s >= c.seq) {
    return InvalidArgument("mesh coordinates (p=", c.p, ", d=", c.d, ", f=", c.f, ", s=", c.s,
                           ", t=", c.t, ") outside the mesh pipeline=", c.pipeline,
                           " data=", c.data, " fsdp=", c.fsdp, " seq=", c.seq,
                           " tensor=", c.tensor);
  }
  auto make_with = [&](const CommOptions& o, const std::string& tag,
                       const std::vector<int>& ranks) {
    return backend == CommBackend::kGloo ? make_gloo_communicator(store, tag, ranks, c.rank(), o)
                                         : make_nccl_communicator(store, tag, ranks, c.rank(), o);
  };
  auto make = [&](const std::string& tag, const std::vector<int>& ranks) {
    return make_with(options, tag, ranks);
  };
  std::vector<int> world(static_cast<size_t>(c.world()));
  for (int r = 0; r < c.world(); ++r) world[static_cast<size_t>(r)] = r;
  // Tags carry the fixed coordinates, so groups of one axis never share store keys. Every rank
  // creates its groups in this order, so the members of each group meet.
  // A pipelined mesh has one group of each axis per stage, a seq axis one per slice: their tags
  // name the stage and the slice too.
  const std::string p = str_cat(c.pipeline > 1 ? str_cat("p=", c.p, ",") : std::string(),
                                c.seq > 1 ? str_cat("s=", c.s, ",") : std::string());
  // Read only to name a failed rank's stage (describe_ranks); a store that cannot take it costs
  // the stage in that line.
  if (c.pipeline > 1) (void)store->set(str_cat(internal::kStageKeyPrefix, c.rank()), str_cat(c.p));
  MeshGroups g;
  g.coords = c;
  AX_ASSIGN_OR_RETURN(g.world, make("world", world));
  AX_ASSIGN_OR_RETURN(g.data,
                      make(str_cat("data[", p, "f=", c.f, ",t=", c.t, "]"), c.data_group()));
  AX_ASSIGN_OR_RETURN(g.fsdp,
                      make(str_cat("fsdp[", p, "d=", c.d, ",t=", c.t, "]"), c.fsdp_group()));
  AX_ASSIGN_OR_RETURN(g.tensor,
                      make(str_cat("tensor[", p, "d=", c.d, ",f=", c.f, "]"), c.tensor_group()));
  AX_ASSIGN_OR_RETURN(g.replica, make(str_cat("replica[", p, "t=", c.t, "]"), c.replica_group()));
  if (c.fsdp > 1) {
    CommOptions own = options;
    own.own_stream = true;  // NCCL: the prefetch gathers overlap the compute (Gloo ignores it)
    AX_ASSIGN_OR_RETURN(
        g.fsdp_prefetch,
        make_with(own, str_cat("fsdp-prefetch[", p, "d=", c.d, ",t=", c.t, "]"), c.fsdp_group()));
  }
  if (c.pipeline > 1) {
    const std::string s = c.seq > 1 ? str_cat(",s=", c.s) : std::string();
    AX_ASSIGN_OR_RETURN(
        g.pipeline,
        make(str_cat("pipeline[d=", c.d, ",f=", c.f, s, ",t=", c.t, "]"), c.pipeline_group()));
  }
  if (c.seq > 1) {
    const std::string pp = c.pipeline > 1 ? str_cat("p=", c.p, ",") : std::string();
    AX_ASSIGN_OR_RETURN(
        g.seq, make(str_cat("seq[", pp, "d=", c.d, ",f=", c.f, ",t=", c.t, "]"), c.seq_group()));
  }
  return g;
}

}  // namespace ax::train::comm
