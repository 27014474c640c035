// The parameter store (param_store.h): the layout table, initialisation, the sharded buffers and
// FSDP's gathers, prefetches and reduce-scatters.
#include "ax/trainer/parallel/param_store.h"

#include <algorithm>

#include "ax/common/rng.h"
#include "ax/trainer/comm/communicator.h"
#include "fsdp_prefetch.h"

namespace ax::train {
namespace {

constexpr int64_t kAlignElements = 16;  // 64 bytes of f32

int64_t align_up(int64_t n, int64_t a) { return (n + a - 1) / a * a; }

}  // namespace

// ---- ParamLayout ----

void ParamLayout::add(ParamSpec spec) {
  AX_CHECK(find(spec.name) == nullptr) << "parameter " << spec.name << " declared twice";
  AX_CHECK(!spec.shape.empty() && spec.shape.size() <= kMaxDims) << spec.name;
  spec.numel = 1;
  for (int64_t d : spec.shape) spec.numel *= d;
  if (spec.logical_shape.empty()) spec.logical_shape = spec.shape;
  spec.unit = unit_;
  index_.emplace(spec.name, specs_.size());
  specs_.push_back(std::move(spec));
}

void ParamLayout::share(const std::string& name, std::vector<int> stages) {
  auto it = index_.find(name);
  AX_CHECK(it != index_.end()) << "no parameter named " << name;
  specs_[it->second].pipeline_stages = std::move(stages);
}

void ParamLayout::finalize(int shards) {
  AX_CHECK_GE(shards, 1);
  shards_ = shards;
  units_.clear();
  int64_t offset = 0;
  if (shards == 1) {
    for (bool decay : {true, false}) {
      for (ParamSpec& spec : specs_) {
        if (spec.weight_decay != decay) continue;
        spec.offset = offset;
        offset = align_up(offset + spec.numel, kAlignElements);
      }
      if (decay) decay_end_ = offset;
    }
    total_ = offset;
    return;
  }
  for (int u = 0; u < num_units(); ++u) {
    Unit unit{offset, 0};
    // Parameters several pipeline stages hold first, each a block sharded on its own: every
    // stage that holds one lays it out alike, whatever else its unit holds. Without them the
    // order is unchanged.
    for (bool shared : {true, false}) {
      for (ParamSpec& spec : specs_) {
        if (spec.unit != u || spec.pipeline_shared() != shared) continue;
        spec.offset = offset;
        offset = align_up(offset + spec.numel, shared ? kAlignElements * shards : kAlignElements);
      }
      if (shared) unit.head = offset - unit.begin;
    }
    AX_CHECK(u == 0 || unit.head == 0) << "a pipeline-shared parameter outside unit 0";
    unit.size = align_up(offset - unit.begin, kAlignElements * shards);
    offset = unit.begin + unit.size;
    units_.push_back(unit);
  }
  decay_end_ = 0;  // no single decay range: the optimizer walks ParamStore::owned()
  total_ = offset;
}

std::vector<ParamLayout::Unit> ParamLayout::blocks(int u) const {
  const Unit& unit = units_[static_cast<size_t>(u)];
  std::vector<Unit> out;
  for (const ParamSpec& spec : specs_) {
    if (spec.unit == u && spec.pipeline_shared()) out.push_back(block_of(spec));
  }
  if (unit.size > unit.head) out.push_back({unit.begin + unit.head, unit.size - unit.head});
  return out;
}

ParamLayout::Unit ParamLayout::block_of(const ParamSpec& spec) const {
  const Unit& unit = units_[static_cast<size_t>(spec.unit)];
  if (spec.pipeline_shared()) {
    return {spec.offset, align_up(spec.numel, kAlignElements * shards_)};
  }
  return {unit.begin + unit.head, unit.size - unit.head};
}

int ParamLayout::num_units() const {
  int last = 0;
  for (const ParamSpec& spec : specs_) last = std::max(last, spec.unit);
  return last + 1;
}

const ParamSpec* ParamLayout::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &specs_[it->second];
}

int64_t ParamLayout::num_parameters() const {
  int64_t n = 0;
  for (const ParamSpec& spec : specs_) n += spec.numel;
  return n;
}

int64_t ParamLayout::num_matmul_parameters() const {
  int64_t n = 0;
  for (const ParamSpec& spec : specs_) n += spec.matmul ? spec.numel : 0;
  return n;
}

Tensor param_view(const ParamSpec& spec, void* base, DType dtype) {
  Tensor t;
  t.data = static_cast<char*>(base) + static_cast<size_t>(spec.offset) * dtype_size(dtype);
  t.dtype = dtype;
  t.ndim = static_cast<int>(spec.shape.size());
  for (int i = 0; i < t.ndim; ++i) t.shape[i] = spec.shape[i];
  return t;
}

namespace {

// Calls fn(local, logical, n) for runs of a parameter's elements that are contiguous both in its
// tensor-parallel part (flat index `local`) and in the logical tensor (flat index `logical`).
template <typename Fn>
void for_each_logical_run(const ParamSpec& spec, Fn fn) {
  if (spec.split_dim < 0) {
    fn(int64_t{0}, int64_t{0}, spec.numel);
    return;
  }
  AX_CHECK(spec.shape.size() <= 2) << spec.name;
  const int64_t cols = spec.shape.size() == 2 ? spec.shape[1] : 1;
  const int64_t logical_cols = spec.logical_shape.size() == 2 ? spec.logical_shape[1] : 1;
  if (spec.split_dim == 0) {
    for (const ParamPiece& p : spec.pieces) {
      fn(p.local_begin * cols, p.logical_begin * cols, p.length * cols);
    }
    return;
  }
  for (int64_t r = 0; r < spec.shape[0]; ++r) {
    for (const ParamPiece& p : spec.pieces) {
      fn(r * cols + p.local_begin, r * logical_cols + p.logical_begin, p.length);
    }
  }
}

}  // namespace

void init_parameters(const ParamLayout& layout, uint64_t seed, std::span<float> host) {
  AX_CHECK_EQ(static_cast<int64_t>(host.size()), layout.total());
  std::fill(host.begin(), host.end(), 0.f);
  for (const ParamSpec& spec : layout.specs()) {
    float* p = host.data() + spec.offset;
    switch (spec.init) {
      case ParamInit::kOnes:
        std::fill(p, p + spec.numel, 1.f);
        break;
      case ParamInit::kZeros:
        break;
      case ParamInit::kNormal: {
        // Pair k of the logical tensor's stream holds elements 2k and 2k + 1.
        for_each_logical_run(spec, [&](int64_t local, int64_t logical, int64_t n) {
          SplitMix64 rng(seed ^ fnv1a64(spec.name));
          const int64_t first_pair = logical / 2;
          rng.skip(static_cast<uint64_t>(2 * first_pair));
          for (int64_t e = 2 * first_pair; e < logical + n; e += 2) {
            double z[2];
            rng.normal_pair(&z[0], &z[1]);
            for (int k = 0; k < 2; ++k) {
              if (e + k >= logical && e + k < logical + n) {
                p[local + e + k - logical] = static_cast<float>(z[k] * spec.init_std);
              }
            }
          }
        });
        break;
      }
    }
  }
}

// ---- ParamStore ----

namespace {

// Parameters several pipeline stages hold (pipeline_shared()): another stage's gradient lands in
// a buffer of the largest one (with FSDP, of its shard), as Impl::allocate sizes it.
int64_t shared_gradient_elements(const ParamLayout& layout) {
  int64_t shared = 0;
  for (const ParamSpec& spec : layout.specs()) {
    if (!spec.pipeline_shared()) continue;
    // With FSDP the holders sum their shards of its block, not the whole parameter.
    shared = std::max(
        shared, layout.shards() > 1 ? layout.block_of(spec).size / layout.shards() : spec.numel);
  }
  return shared;
}

}  // namespace

// Keep in step with ParamStore::Impl::allocate() below (plan_test compares the two).
StoreBytes store_bytes(const ParamLayout& layout, DType dt) {
  const int F = layout.shards();
  const size_t shard_elems = static_cast<size_t>(layout.total() / F);
  const size_t ds = dtype_size(dt);
  StoreBytes b;
  b.master = shard_elems * sizeof(float);
  b.gradients = shard_elems * sizeof(float);
  b.scratch = 16 * sizeof(float);
  b.scratch += static_cast<size_t>(shared_gradient_elements(layout)) * sizeof(float);
  if (F == 1) {
    b.compute = dt == DType::kF32 ? 0 : shard_elems * ds;
    return b;
  }
  const std::vector<ParamLayout::Unit>& units = layout.units();
  int64_t max_unit = units[0].size, max_layer_unit = 0;
  for (size_t u = 1; u < units.size(); ++u) {
    max_layer_unit = std::max(max_layer_unit, units[u].size);
    max_unit = std::max(max_unit, units[u].size);
  }
  b.gathered = static_cast<size_t>(units[0].size) * (ds + sizeof(float)) +
               2 * static_cast<size_t>(max_layer_unit) * (ds + sizeof(float));
  b.scratch += static_cast<size_t>(max_unit / F) * sizeof(float);
  if (dt != DType::kF32) b.scratch += 2 * static_cast<size_t>(max_unit / F) * ds;
  return b;
}

class ParamStore::Impl {
 public:
  ParamLayout layout;
  Backend* be = nullptr;
  ModelParallel par;
  int F = 1;  // fsdp shards

  // Shard buffers (the whole layout when F == 1): f32 master weights and gradients.
  void* params = nullptr;
  void* grads = nullptr;
  // F == 1: the compute-dtype weights (`params` itself when the backend computes in f32).
  void* weights = nullptr;
  // F > 1: gathered units. Unit 0 stays gathered for the whole step; the other units alternate
  // between two slots. Gradients of a unit accumulate in the matching f32 buffer and are
  // reduce-scattered into `grads` when the network releases the unit.
  void* root_w = nullptr;
  void* root_g = nullptr;
  void* slot_w[2] = {nullptr, nullptr};
  void* slot_g[2] = {nullptr, nullptr};
  void* scatter_tmp = nullptr;       // one unit's shard, f32
  void* shard_compute = nullptr;     // one unit's shard in the compute dtype (bf16 backends)
  void* prefetch_compute = nullptr;  // the same for the prefetch gather's input
  void* scalar = nullptr;            // 16 floats for reductions of one value
  void* shared_tmp = nullptr;        // pipeline: the other end's gradient of a shared parameter
  int slot_unit[2] = {-1, -1};
  // The unit being prefetched (into slot (unit - 1) % 2), or -1.
  std::unique_ptr<Prefetcher> prefetcher;
  int pending_unit = -1;
  bool root_gathered = false;
  int64_t max_layer_unit = 0;

  ~Impl() {
    prefetcher.reset();  // joins a gather thread before the buffers go
    for (void* p : {params, grads, root_w, root_g, slot_w[0], slot_w[1], slot_g[0], slot_g[1],
                    scatter_tmp, shard_compute, prefetch_compute, scalar, shared_tmp}) {
      if (p != nullptr) be->free(p);
    }
    if (weights != nullptr && weights != params) be->free(weights);
  }

  Status allocate() {
    const DType dt = be->compute_dtype();
    const size_t shard_elems = static_cast<size_t>(layout.total() / F);
    AX_ASSIGN_OR_RETURN(params, be->alloc(shard_elems * sizeof(float)));
    AX_ASSIGN_OR_RETURN(grads, be->alloc(shard_elems * sizeof(float)));
    AX_ASSIGN_OR_RETURN(scalar, be->alloc(16 * sizeof(float)));
    if (const int64_t shared = shared_gradient_elements(layout); shared > 0) {
      AX_ASSIGN_OR_RETURN(shared_tmp, be->alloc(static_cast<size_t>(shared) * sizeof(float)));
    }
    if (F == 1) {
      if (dt == DType::kF32) {
        weights = params;
      } else {
        AX_ASSIGN_OR_RETURN(weights, be->alloc(shard_elems * dtype_size(dt)));
      }
      return Status::Ok();
    }
    const std::vector<ParamLayout::Unit>& units = layout.units();
    int64_t max_unit = units[0].size;
    for (size_t u = 1; u < units.size(); ++u) {
      max_layer_unit = std::max(max_layer_unit, units[u].size);
      max_unit = std::max(max_unit, units[u].size);
    }
    AX_ASSIGN_OR_RETURN(root_w, be->alloc(static_cast<size_t>(units[0].size) * dtype_size(dt)));
    AX_ASSIGN_OR_RETURN(root_g, be->alloc(static_cast<size_t>(units[0].size) * sizeof(float)));
    for (int s = 0; s < 2 && max_layer_unit > 0; ++s) {
      AX_ASSIGN_OR_RETURN(slot_w[s],
                          be->alloc(static_cast<size_t>(max_layer_unit) * dtype_size(dt)));
      AX_ASSIGN_OR_RETURN(slot_g[s],
                          be->alloc(static_cast<size_t>(max_layer_unit) * sizeof(float)));
    }
    AX_ASSIGN_OR_RETURN(scatter_tmp, be->alloc(static_cast<size_t>(max_unit / F) * sizeof(float)));
    if (dt != DType::kF32) {
      AX_ASSIGN_OR_RETURN(shard_compute,
                          be->alloc(static_cast<size_t>(max_unit / F) * dtype_size(dt)));
      AX_ASSIGN_OR_RETURN(prefetch_compute,
                          be->alloc(static_cast<size_t>(max_unit / F) * dtype_size(dt)));
    }
    if (par.fsdp_prefetch != nullptr) prefetcher = std::make_unique<Prefetcher>(par.fsdp_prefetch);
    return Status::Ok();
  }

  Tensor shard(void* base) const { return Tensor(base, DType::kF32, {layout.total() / F}); }
  // A parameter several stages hold whose gradient norm another stage counts (the first holder).
  bool counted_elsewhere(const ParamSpec& spec) const {
    return spec.pipeline_shared() && spec.pipeline_stages[0] != par.pipeline_rank;
  }
  int64_t units() const { return static_cast<int64_t>(layout.units().size()); }

  std::vector<ParamLayout::Unit> blocks(int u) const { return layout.blocks(u); }
  // A block's part of this rank's shard buffer `base`.
  Tensor shard_part(void* base, const ParamLayout::Unit& block) const {
    return Tensor(static_cast<float*>(base) + block.begin / F, DType::kF32, {block.size / F});
  }
  // Unit u's buffer: unit 0's own, else the slot the unit alternates into.
  void* unit_base(int u, bool grad) const {
    if (u == 0) return grad ? root_g : root_w;
    const int slot = (u - 1) % 2;
    return grad ? slot_g[slot] : slot_w[slot];
  }

  // A block's part of this rank's weights in the compute dtype (cast into `cast_buffer` when
  // that is not f32), and the full unit u at `dst`.
  Tensor gather_input(const ParamLayout::Unit& block, void* cast_buffer) {
    const DType dt = be->compute_dtype();
    Tensor mine = shard_part(params, block);
    if (dt == DType::kF32) return mine;
    Tensor cast(cast_buffer, dt, {block.size / F});
    be->copy(cast, mine);
    return cast;
  }
  Tensor unit_tensor(int u, void* dst) const {
    return Tensor(dst, be->compute_dtype(), {layout.units()[static_cast<size_t>(u)].size});
  }

  // Gathers unit u's weights into `dst` (compute dtype) from every rank's shard, block by block.
  void gather_unit(int u, void* dst) {
    const int64_t begin = layout.units()[static_cast<size_t>(u)].begin;
    const size_t ds = dtype_size(be->compute_dtype());
    for (const ParamLayout::Unit& b : blocks(u)) {
      Tensor out(static_cast<char*>(dst) + static_cast<size_t>(b.begin - begin) * ds,
                 be->compute_dtype(), {b.size});
      comm::collective_or_die(par.fsdp->all_gather(out, gather_input(b, shard_compute)),
                              "gathering FSDP unit");
    }
  }

  // Waits for the prefetch in flight, if any; its slot then holds its unit.
  void finish_prefetch() {
    if (pending_unit < 0) return;
    comm::collective_or_die(prefetcher->wait(), "prefetching FSDP unit");
    slot_unit[(pending_unit - 1) % 2] = pending_unit;
    pending_unit = -1;
  }

  void invalidate_gathered() {
    if (pending_unit >= 0) finish_prefetch();
    root_gathered = false;
    slot_unit[0] = slot_unit[1] = -1;
  }

  // Sum of one value over a group (in place in `scalar`).
  void all_reduce_scalar(comm::Communicator* group, float* value, const char* what) {
    float host[16] = {*value};
    be->copy_from_host(Tensor(scalar, DType::kF32, {16}), host);
    comm::collective_or_die(
        group->all_reduce(Tensor(scalar, DType::kF32, {1}), comm::ReduceOp::kSum), what);
    be->copy_to_host(host, Tensor(scalar, DType::kF32, {16}));
    *value = host[0];
  }
};

ParamStore::ParamStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ParamStore::~ParamStore() = default;

StatusOr<std::unique_ptr<ParamStore>> ParamStore::create(ParamLayout layout, Backend* backend,
                                                         const ModelParallel& parallel) {
  AX_CHECK(backend != nullptr);
  const int tp = parallel.tensor_size, fsdp = parallel.fsdp_size;
  if (tp < 1 || fsdp < 1 || parallel.tensor_rank < 0 || parallel.tensor_rank >= tp ||
      parallel.fsdp_rank < 0 || parallel.fsdp_rank >= fsdp) {
    return InvalidArgument("bad model parallelism: tensor rank ", parallel.tensor_rank, " of ", tp,
                           ", fsdp rank ", parallel.fsdp_rank, " of ", fsdp);
  }
  if ((tp > 1 && parallel.tensor == nullptr) || (fsdp > 1 && parallel.fsdp == nullptr) ||
      (parallel.pipeline_size > 1 && parallel.pipeline == nullptr) ||
      (parallel.seq_size > 1 && parallel.seq == nullptr)) {
    return InvalidArgument(
        "model parallelism needs the tensor, fsdp, pipeline and seq communicators");
  }
  auto impl = std::make_unique<Impl>();
  impl->layout = std::move(layout);
  impl->layout.finalize(fsdp);
  impl->be = backend;
  impl->par = parallel;
  impl->F = fsdp;
  AX_RETURN_IF_ERROR(impl->allocate());
  return std::unique_ptr<ParamStore>(new ParamStore(std::move(impl)));
}

const ParamLayout& ParamStore::layout() const { return impl_->layout; }
Backend* ParamStore::backend() const { return impl_->be; }
const ModelParallel& ParamStore::parallel() const { return impl_->par; }
bool ParamStore::sharded() const {
  return impl_->par.tensor_size > 1 || impl_->F > 1 || impl_->par.pipeline_size > 1;
}
Tensor ParamStore::params() const { return impl_->shard(impl_->params); }
Tensor ParamStore::grads() const { return impl_->shard(impl_->grads); }

ParamViews ParamStore::views(const std::string& name) const {
  if (name.empty()) return {};
  const Impl& m = *impl_;
  const ParamSpec* spec = m.layout.find(name);
  AX_CHECK(spec != nullptr) << "no parameter named " << name;
  const DType dt = m.be->compute_dtype();
  if (m.F == 1) return {param_view(*spec, m.weights, dt), param_view(*spec, m.grads)};
  // Within a unit's buffer a parameter sits at its offset from the unit's start.
  ParamSpec local = *spec;
  local.offset -= m.layout.units()[static_cast<size_t>(spec->unit)].begin;
  return {param_view(local, m.unit_base(spec->unit, false), dt),
          param_view(local, m.unit_base(spec->unit, true))};
}

void ParamStore::gather(int unit) {
  Impl& m = *impl_;
  if (m.F == 1) return;
  if (unit == 0) {
    if (m.root_gathered) return;
    m.gather_unit(0, m.root_w);
    m.root_gathered = true;
    return;
  }
  const int slot = (unit - 1) % 2;
  // A prefetch in flight is this unit's, or writes into this slot: either way, wait for it.
  if (m.pending_unit >= 0 && (m.pending_unit == unit || (m.pending_unit - 1) % 2 == slot)) {
    m.finish_prefetch();
  }
  if (m.slot_unit[slot] == unit) return;
  m.gather_unit(unit, m.slot_w[slot]);
  m.slot_unit[slot] = unit;
}

void ParamStore::prefetch(int unit) {
  Impl& m = *impl_;
  if (m.prefetcher == nullptr || unit < 1 || unit >= m.units()) return;
  const int slot = (unit - 1) % 2;
  if (m.slot_unit[slot] == unit || m.pending_unit == unit) return;
  m.finish_prefetch();
  m.slot_unit[slot] = -1;
  // Only unit 0 has a head: a layer is one block.
  m.prefetcher->submit(
      m.unit_tensor(unit, m.slot_w[slot]),
      m.gather_input(m.layout.units()[static_cast<size_t>(unit)], m.prefetch_compute));
  m.pending_unit = unit;
}

void ParamStore::release(int unit) {
  Impl& m = *impl_;
  if (m.F == 1) return;
  const ParamLayout::Unit& u = m.layout.units()[static_cast<size_t>(unit)];
  float* base = static_cast<float*>(m.unit_base(unit, true));
  for (const ParamLayout::Unit& b : m.blocks(unit)) {
    Tensor in(base + (b.begin - u.begin), DType::kF32, {b.size});
    Tensor tmp(m.scatter_tmp, DType::kF32, {b.size / m.F});
    comm::collective_or_die(m.par.fsdp->reduce_scatter(tmp, in),
                            "reduce-scattering FSDP gradients");
    Tensor mine = m.shard_part(m.grads, b);
    m.be->add_forward(mine, mine, tmp);
  }
  if (u.size > 0) m.be->zero(Tensor(base, DType::kF32, {u.size}));
}

std::vector<OwnedRange> ParamStore::owned() const {
  const Impl& m = *impl_;
  std::vector<OwnedRange> out;
  for (const ParamSpec& spec : m.layout.specs()) {
    if (m.F == 1) {
      out.push_back({&spec, 0, spec.offset, spec.numel});
      continue;
    }
    // The block the parameter lies in: its own (a parameter several stages hold) or the rest of
    // its unit.
    const ParamLayout::Unit block = m.layout.block_of(spec);
    const int64_t block_begin = block.begin;
    const int64_t size = block.size / m.F;
    const int64_t own_begin = block_begin + m.par.fsdp_rank * size;
    const int64_t begin = std::max(spec.offset, own_begin);
    const int64_t end = std::min(spec.offset + spec.numel, own_begin + size);
    if (begin >= end) continue;
    out.push_back(
        {&spec, begin - spec.offset, block_begin / m.F + (begin - own_begin), end - begin});
  }
  return out;
}

double ParamStore::grad_sum_squares() const {
  Impl& m = *impl_;
  Backend& be = *m.be;
  double local = 0;
  // A parameter several stages hold has the same gradient on each: the first of them counts it.
  const bool skip_shared = std::any_of(m.layout.specs().begin(), m.layout.specs().end(),
                                       [&](const ParamSpec& s) { return m.counted_elsewhere(s); });
  if (m.par.tensor_size == 1 && !skip_shared) {
    local = be.sum_squares(grads());
  } else {
    // A parameter every tensor rank holds whole has the same gradient on each: count it once.
    for (const OwnedRange& r : owned()) {
      if (r.spec->split_dim < 0 && m.par.tensor_rank != 0) continue;
      if (m.counted_elsewhere(*r.spec)) continue;
      local += be.sum_squares(
          Tensor(static_cast<float*>(m.grads) + r.shard_offset, DType::kF32, {r.length}));
    }
  }
  if (!sharded()) return local;
  float value = static_cast<float>(local);
  if (m.par.tensor_size > 1) m.all_reduce_scalar(m.par.tensor, &value, "gradient norm (tensor)");
  if (m.F > 1) m.all_reduce_scalar(m.par.fsdp, &value, "gradient norm (fsdp)");
  if (m.par.pipeline_size > 1) {
    m.all_reduce_scalar(m.par.pipeline, &value, "gradient norm (pipeline)");
  }
  return value;
}

void ParamStore::reduce_gradients() {
  Impl& m = *impl_;
  if (m.par.data != nullptr && m.par.data->size() > 1) {
    comm::collective_or_die(m.par.data->all_reduce(grads(), comm::ReduceOp::kSum),
                            "data-parallel gradient all-reduce");
  }
  if (m.par.seq != nullptr && m.par.seq->size() > 1) {
    comm::collective_or_die(m.par.seq->all_reduce(grads(), comm::ReduceOp::kSum),
                            "seq-parallel gradient all-reduce");
  }
  // Parameters several stages hold, in name order (every stage walks its own in the same order,
  // so each sum below waits only for holders that reach it: no cycle). Megatron's embedding
  // group, generalised: two holders (a tied table on the first and the last stage) swap their
  // gradients and both add the other's (a + b == b + a bit for bit: the copies stay identical);
  // more (a T5 relative-bias table on every stage of its stack) send theirs to the first, which
  // adds them in stage order and sends the sum back. The pipeline group joins the ranks of the
  // same (d, f, t): with FSDP, fsdp rank f of every holder owns the same elements of the
  // parameter's own block, so the holders sum that shard.
  std::vector<const ParamSpec*> shared;
  for (const ParamSpec& spec : m.layout.specs()) {
    if (spec.pipeline_shared()) shared.push_back(&spec);
  }
  std::sort(shared.begin(), shared.end(),
            [](const ParamSpec* a, const ParamSpec* b) { return a->name < b->name; });
  const int me = m.par.pipeline_rank;
  for (const ParamSpec* spec : shared) {
    const std::vector<int>& holders = spec->pipeline_stages;
    AX_CHECK(std::find(holders.begin(), holders.end(), me) != holders.end())
        << spec->name << " declared on pipeline stage " << me << ", which is not among its holders";
    Tensor mine = m.F > 1 ? m.shard_part(m.grads, m.layout.block_of(*spec))
                          : param_view(*spec, m.grads).view({spec->numel});
    Tensor theirs(m.shared_tmp, DType::kF32, {mine.shape[0]});
    const std::string what = "summing the gradient of " + spec->name + " over pipeline stages";
    if (holders.size() == 2) {
      const int peer = holders[0] == me ? holders[1] : holders[0];
      comm::collective_or_die(m.par.pipeline->exchange(
                                  {comm::P2POp::send(mine, peer), comm::P2POp::recv(theirs, peer)}),
                              what.c_str());
      m.be->add_forward(mine, mine, theirs);
      continue;
    }
    if (holders[0] == me) {
      for (size_t k = 1; k < holders.size(); ++k) {
        comm::collective_or_die(m.par.pipeline->recv(theirs, holders[k]), what.c_str());
        m.be->add_forward(mine, mine, theirs);
      }
      for (size_t k = 1; k < holders.size(); ++k) {
        comm::collective_or_die(m.par.pipeline->send(mine, holders[k]), what.c_str());
      }
    } else {
      comm::collective_or_die(m.par.pipeline->send(mine, holders[0]), what.c_str());
      comm::collective_or_die(m.par.pipeline->recv(mine, holders[0]), what.c_str());
    }
  }
}

void ParamStore::zero_grad() {
  Impl& m = *impl_;
  m.be->zero(grads());
  if (m.F > 1) {
    m.be->zero(Tensor(m.root_g, DType::kF32, {m.layout.units()[0].size}));
    for (void* g : m.slot_g) {
      if (g != nullptr) m.be->zero(Tensor(g, DType::kF32, {m.max_layer_unit}));
    }
  }
}

void ParamStore::sync_compute_weights() {
  Impl& m = *impl_;
  m.invalidate_gathered();
  if (m.weights == nullptr || m.weights == m.params) return;
  m.be->copy(Tensor(m.weights, m.be->compute_dtype(), {m.layout.total()}), params());
}

void ParamStore::init(uint64_t seed) {
  Impl& m = *impl_;
  std::vector<float> host(static_cast<size_t>(m.layout.total()));
  init_parameters(m.layout, seed, host);
  if (m.F == 1) {
    m.be->copy_from_host(params(), host.data());
  } else {
    std::vector<float> mine(static_cast<size_t>(m.layout.total() / m.F));
    for (int u = 0; u < m.units(); ++u) {
      for (const ParamLayout::Unit& b : m.blocks(u)) {
        const int64_t size = b.size / m.F;
        std::copy_n(host.begin() + b.begin + m.par.fsdp_rank * size, size,
                    mine.begin() + b.begin / m.F);
      }
    }
    m.be->copy_from_host(params(), mine.data());
  }
  sync_compute_weights();
}

namespace {

Status unsharded_only(const ParamStore& store, const char* what) {
  if (!store.sharded()) return Status::Ok();
  return FailedPrecondition(what, " by name needs an unsharded model; a sharded one holds only ",
                            "parts (see ParamStore::owned())");
}

}  // namespace

StatusOr<std::vector<float>> ParamStore::parameter(const std::string& name) const {
  AX_RETURN_IF_ERROR(unsharded_only(*this, "reading a parameter"));
  const ParamSpec* spec = impl_->layout.find(name);
  if (spec == nullptr) return NotFound("no parameter named ", name);
  std::vector<float> out(static_cast<size_t>(spec->numel));
  impl_->be->copy_to_host(out.data(), param_view(*spec, impl_->params));
  return out;
}

StatusOr<std::vector<float>> ParamStore::gradient(const std::string& name) const {
  AX_RETURN_IF_ERROR(unsharded_only(*this, "reading a gradient"));
  const ParamSpec* spec = impl_->layout.find(name);
  if (spec == nullptr) return NotFound("no parameter named ", name);
  std::vector<float> out(static_cast<size_t>(spec->numel));
  impl_->be->copy_to_host(out.data(), param_view(*spec, impl_->grads));
  return out;
}

Status ParamStore::set_parameter(const std::string& name, std::span<const float> values) {
  AX_RETURN_IF_ERROR(unsharded_only(*this, "setting a parameter"));
  const ParamSpec* spec = impl_->layout.find(name);
  if (spec == nullptr) return NotFound("no parameter named ", name);
  if (static_cast<int64_t>(values.size()) != spec->numel) {
    return InvalidArgument("parameter ", name, " has ", spec->numel, " elements, got ",
                           values.size());
  }
  impl_->be->copy_from_host(param_view(*spec, impl_->params), values.data());
  if (impl_->weights != impl_->params) {
    impl_->be->copy(param_view(*spec, impl_->weights, impl_->be->compute_dtype()),
                    param_view(*spec, impl_->params));
  }
  return Status::Ok();
}

}  // namespace ax::train
