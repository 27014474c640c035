// The decoder-only language model: embeddings, a stack of DecoderLayers, a final norm and the
// LM head (tied to wte or its own lm_head), with the parameter layout and activation plan.
#include "ax/trainer/model.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "ax/common/logging.h"
#include "ax/trainer/comm/communicator.h"
#include "fsdp_prefetch.h"
#include "layers.h"
#include "ax/common/rng.h"

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
  specs_.push_back(std::move(spec));
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
  int last_unit = 0;
  for (const ParamSpec& spec : specs_) last_unit = std::max(last_unit, spec.unit);
  for (int u = 0; u <= last_unit; ++u) {
    Unit unit{offset, 0};
    for (ParamSpec& spec : specs_) {
      if (spec.unit != u) continue;
      spec.offset = offset;
      offset = align_up(offset + spec.numel, kAlignElements);
    }
    unit.size = align_up(offset - unit.begin, kAlignElements * shards);
    offset = unit.begin + unit.size;
    units_.push_back(unit);
  }
  decay_end_ = 0;  // no single decay range: the optimizer walks Model::owned()
  total_ = offset;
}

const ParamSpec* ParamLayout::find(const std::string& name) const {
  for (const ParamSpec& spec : specs_) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
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

StatusOr<int64_t> padded_vocab_size(const ModelConfig& config, int64_t vocab) {
  if (vocab <= 0) return InvalidArgument("the vocabulary is empty");
  if (config.vocab_size > 0) {
    if (config.vocab_size < vocab) {
      return InvalidArgument("model.vocab_size=", config.vocab_size,
                             " is smaller than the tokenizer's vocabulary (", vocab,
                             "); use 0 to size it from the tokenizer");
    }
    return config.vocab_size;
  }
  return align_up(vocab, std::max<int64_t>(1, config.vocab_multiple));
}

// ---- Model ----

class Model::Impl {
 public:
  ModelConfig config;
  ParamLayout layout;
  Backend* be = nullptr;
  int64_t B = 0, T = 0, C = 0, V = 0, Vp = 0;
  ModelParallel par;
  ModelOptions options;
  layers::TensorGroup tp;
  int F = 1;  // fsdp shards
  // This rank's vocabulary shard: rows [v_begin, v_begin + Vl) of the padded table, of which
  // the first v_count are real tokens.
  int64_t Vl = 0, v_begin = 0, v_count = 0;

  // Shard buffers (the whole layout when F == 1): f32 master weights and gradients.
  void* params = nullptr;
  void* grads = nullptr;
  // F == 1: the compute-dtype weights (`params` itself when the backend computes in f32).
  void* weights = nullptr;
  // F > 1: gathered units. Unit 0 (embeddings, final norm, head) stays gathered for the whole
  // step; layers alternate between two slots. Gradients of a unit accumulate in the matching
  // f32 buffer and are reduce-scattered into `grads` after the unit's backward.
  void* root_w = nullptr;
  void* root_g = nullptr;
  void* slot_w[2] = {nullptr, nullptr};
  void* slot_g[2] = {nullptr, nullptr};
  void* scatter_tmp = nullptr;  // one unit's shard, f32
  void* shard_compute = nullptr;  // one unit's shard in the compute dtype (bf16 backends)
  void* prefetch_compute = nullptr;  // the same for the prefetch gather's input
  int slot_unit[2] = {-1, -1};
  // The unit being prefetched (into slot (unit - 1) % 2), or -1.
  std::unique_ptr<Prefetcher> prefetcher;
  int pending_unit = -1;
  bool root_gathered = false;
  int64_t max_layer_unit = 0;

  void* acts_base = nullptr;
  size_t act_bytes = 0;

  // Blocks.
  layers::Weights wte, wpe, lm_head;  // wpe empty with RoPE; lm_head = wte when tied
  std::vector<layers::DecoderLayer> blocks;
  layers::Norm lnf;

  // Activations of one micro-batch.
  Tensor tokens;   // (B, T) i32 (with a split vocabulary: this shard's ids, -1 elsewhere)
  Tensor targets;  // (B, T) i32
  Tensor encoded;  // (N, C) embedding output = residual stream into layer 0
  std::vector<layers::DecoderLayer::Acts> block_acts;
  layers::Norm::Acts lnf_acts;
  Tensor logits;   // (N, Vl); holds dlogits after backward
  Tensor losses;   // (N) f32
  Tensor rowmax;   // (N) f32, split vocabulary only
  Tensor sums;     // (N, 2) f32, split vocabulary only
  Tensor lse;      // (N) f32, split vocabulary only
  Tensor scalar;   // (16) f32, for reductions of one value
  Tensor row_f32;  // (Vl) f32, one row of logits for the host
  Tensor dres;     // (N, C) gradient of the residual stream
  layers::DecoderLayer::Scratch scratch;

  int64_t num_targets = 0;
  bool has_targets = false;
  bool logits_valid = false;

  ~Impl() {
    prefetcher.reset();  // joins a gather thread before the buffers go
    for (void* p : {params, grads, acts_base, root_w, root_g, slot_w[0], slot_w[1], slot_g[0],
                    slot_g[1], scatter_tmp, shard_compute, prefetch_compute}) {
      if (p != nullptr) be->free(p);
    }
    if (weights != nullptr && weights != params) be->free(weights);
  }

  void declare() {
    const bool learned = config.position == "learned";
    const bool split_vocab = tp.size > 1;
    ParamSpec spec;
    spec.name = "wte";
    spec.shape = {Vp, C};
    spec.weight_decay = true;
    spec.matmul = config.tied_embeddings;  // the LM head counts once; a lookup does not
    spec.init_std = config.init_std;
    if (split_vocab) {
      spec.logical_shape = {Vp, C};
      spec.split_dim = 0;
      spec.pieces = {{0, v_begin, Vl}};
      spec.shape = {Vl, C};
    }
    const ParamSpec vocab_spec = spec;
    layout.set_unit(0);
    layout.add(spec);
    if (learned) {
      ParamSpec pos;
      pos.name = "wpe";
      pos.shape = {config.max_seq_len, C};
      pos.weight_decay = true;
      pos.init_std = config.init_std;
      layout.add(pos);
    }
    blocks.resize(static_cast<size_t>(config.num_layers));
    for (size_t i = 0; i < blocks.size(); ++i) {
      layout.set_unit(static_cast<int>(i) + 1);
      blocks[i].declare(&layout, "h." + std::to_string(i), config, tp);
    }
    layout.set_unit(0);
    lnf.declare(&layout, "lnf", C, config.norm == "rmsnorm", config.bias, config.norm_eps);
    if (!config.tied_embeddings) {
      spec = vocab_spec;
      spec.name = "lm_head.weight";
      spec.matmul = true;
      layout.add(spec);
    }
    layout.finalize(F);
  }

  void bind() {
    const DType dt = be->compute_dtype();
    if (F == 1) {
      bind_with(layers::ParamBinder(layout, weights, dt, grads));
      return;
    }
    bind_with(layers::ParamBinder(
        layout,
        [this](int unit, bool grad) -> void* {
          if (unit == 0) return grad ? root_g : root_w;
          const int slot = (unit - 1) % 2;
          return grad ? slot_g[slot] : slot_w[slot];
        },
        dt));
  }

  void bind_with(const layers::ParamBinder& binder) {
    wte = binder.get("wte");
    wpe = binder.get(config.position == "learned" ? "wpe" : "");
    lm_head = binder.get(config.tied_embeddings ? "wte" : "lm_head.weight");
    for (layers::DecoderLayer& block : blocks) block.bind(binder);
    lnf.bind(binder);
  }

  // Called twice: a dry run that counts bytes, then on the allocation.
  void plan(Arena* arena) {
    const DType dt = be->compute_dtype();
    const int64_t N = B * T;
    tokens = arena->take(DType::kI32, {B, T});
    targets = arena->take(DType::kI32, {B, T});
    encoded = arena->take(dt, {N, C});
    block_acts.resize(blocks.size());
    for (size_t i = 0; i < blocks.size(); ++i) {
      if (options.recompute_layers && i > 0) {
        // Recomputation: every layer shares layer 0's activations except its output, which is
        // the next layer's input and stays.
        block_acts[i] = block_acts[0];
        block_acts[i].res_out = arena->take(dt, {B * T, C});
      } else {
        blocks[i].plan(arena, dt, B, T, C, &block_acts[i]);
      }
    }
    lnf.plan(arena, dt, N, C, &lnf_acts);
    logits = arena->take(dt, {N, Vl});
    losses = arena->take(DType::kF32, {N});
    if (tp.size > 1) {
      rowmax = arena->take(DType::kF32, {N});
      sums = arena->take(DType::kF32, {N, 2});
      lse = arena->take(DType::kF32, {N});
    }
    scalar = arena->take(DType::kF32, {16});
    row_f32 = arena->take(DType::kF32, {Vl});
    dres = arena->take(dt, {N, C});
    if (!blocks.empty()) blocks[0].plan_scratch(arena, dt, B, T, C, &scratch);
  }

  Status allocate() {
    const DType dt = be->compute_dtype();
    const size_t shard_elems = static_cast<size_t>(layout.total() / F);
    AX_ASSIGN_OR_RETURN(params, be->alloc(shard_elems * sizeof(float)));
    AX_ASSIGN_OR_RETURN(grads, be->alloc(shard_elems * sizeof(float)));
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
      AX_ASSIGN_OR_RETURN(slot_g[s], be->alloc(static_cast<size_t>(max_layer_unit) * sizeof(float)));
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

  Tensor residual_into(size_t i) const { return i == 0 ? encoded : block_acts[i - 1].res_out; }
  Tensor shard(void* base, DType dtype) const { return Tensor(base, dtype, {layout.total() / F}); }

  // FSDP: unit u's part of this rank's shard buffers, and the full unit.
  int64_t unit_shard_offset(int u) const { return layout.units()[static_cast<size_t>(u)].begin / F; }
  int64_t unit_shard_size(int u) const { return layout.units()[static_cast<size_t>(u)].size / F; }
  Tensor shard_part(void* base, int u, DType dtype = DType::kF32) const {
    return Tensor(static_cast<char*>(base) + unit_shard_offset(u) * dtype_size(dtype), dtype,
                  {unit_shard_size(u)});
  }

  // Unit u's part of this rank's weights in the compute dtype (cast into `cast_buffer` when
  // that is not f32), and the full unit at `dst`.
  Tensor gather_input(int u, void* cast_buffer) {
    const DType dt = be->compute_dtype();
    Tensor mine = shard_part(params, u);
    if (dt == DType::kF32) return mine;
    Tensor cast(cast_buffer, dt, {unit_shard_size(u)});
    be->copy(cast, mine);
    return cast;
  }
  Tensor unit_tensor(int u, void* dst) const {
    return Tensor(dst, be->compute_dtype(), {layout.units()[static_cast<size_t>(u)].size});
  }

  // Gathers unit u's weights into `dst` (compute dtype) from every rank's shard.
  void gather_unit(int u, void* dst) {
    layers::collective_or_die(
        par.fsdp->all_gather(unit_tensor(u, dst), gather_input(u, shard_compute)),
        "gathering FSDP unit");
  }

  // Waits for the prefetch in flight, if any; its slot then holds its unit.
  void finish_prefetch() {
    if (pending_unit < 0) return;
    layers::collective_or_die(prefetcher->wait(), "prefetching FSDP unit");
    slot_unit[(pending_unit - 1) % 2] = pending_unit;
    pending_unit = -1;
  }

  // Starts gathering layer i into its slot (nothing when there is no such layer, no prefetcher,
  // or the slot already holds it). The slot must not be in use: the callers prefetch the layer
  // after the current one in the direction of the pass, whose slot held the layer before it
  // (on a GPU the gather's stream waits for that use: fsdp_prefetch.h).
  void prefetch_layer(int64_t i) {
    if (prefetcher == nullptr || i < 0 || i >= static_cast<int64_t>(blocks.size())) return;
    const int unit = static_cast<int>(i) + 1, slot = static_cast<int>(i % 2);
    if (slot_unit[slot] == unit || pending_unit == unit) return;
    finish_prefetch();
    slot_unit[slot] = -1;
    prefetcher->submit(unit_tensor(unit, slot_w[slot]), gather_input(unit, prefetch_compute));
    pending_unit = unit;
  }

  void ensure_root() {
    if (F == 1 || root_gathered) return;
    gather_unit(0, root_w);
    root_gathered = true;
  }

  void ensure_layer(size_t i) {
    if (F == 1) return;
    const int unit = static_cast<int>(i) + 1, slot = static_cast<int>(i % 2);
    // A prefetch in flight is this layer's, or writes into this slot: either way, wait for it.
    if (pending_unit >= 0 && (pending_unit == unit || (pending_unit - 1) % 2 == slot)) {
      finish_prefetch();
    }
    if (slot_unit[slot] == unit) return;
    gather_unit(unit, slot_w[slot]);
    slot_unit[slot] = unit;
  }

  // Sums unit u's gradient buffer over the fsdp group into this rank's gradient shard (+=), then
  // zeroes the buffer for the next micro-batch.
  void scatter_unit_grads(int u, void* unit_grads) {
    const int64_t full = layout.units()[static_cast<size_t>(u)].size;
    Tensor in(unit_grads, DType::kF32, {full});
    Tensor tmp(scatter_tmp, DType::kF32, {unit_shard_size(u)});
    layers::collective_or_die(par.fsdp->reduce_scatter(tmp, in), "reduce-scattering FSDP gradients");
    Tensor mine = shard_part(grads, u);
    be->add_forward(mine, mine, tmp);
    be->zero(in);
  }

  void invalidate_gathered() {
    if (pending_unit >= 0) finish_prefetch();
    root_gathered = false;
    slot_unit[0] = slot_unit[1] = -1;
  }

  // The vocabulary-parallel loss of the last logits (tensor groups > 1). Returns the sum of the
  // per-row losses over the non-ignored targets and leaves lse on the device for backward.
  double split_vocab_loss(std::span<const int32_t> host_targets) {
    const int64_t N = B * T;
    be->ce_shard_max(rowmax, logits, v_count);
    layers::collective_or_die(par.tensor->all_reduce(rowmax, comm::ReduceOp::kMax),
                      "tensor-parallel cross-entropy (max)");
    be->ce_shard_sums(sums, logits, rowmax, targets, v_begin, v_count);
    layers::collective_or_die(par.tensor->all_reduce(sums, comm::ReduceOp::kSum),
                      "tensor-parallel cross-entropy (sums)");
    std::vector<float> m(static_cast<size_t>(N)), sm(static_cast<size_t>(2 * N));
    be->copy_to_host(m.data(), rowmax);
    be->copy_to_host(sm.data(), sums);
    std::vector<float> l(static_cast<size_t>(N));
    double total = 0;
    for (int64_t n = 0; n < N; ++n) {
      l[n] = m[n] + std::log(sm[2 * n]);
      if (host_targets[n] >= 0) total += static_cast<double>(l[n]) - sm[2 * n + 1];
    }
    be->copy_from_host(lse, l.data());
    return total;
  }
};

namespace {
std::atomic<int> g_failure_linger_ms{0};
}  // namespace

void layers::set_failure_linger(int milliseconds) { g_failure_linger_ms.store(milliseconds); }

void layers::collective_or_die(const Status& status, const char* what) {
  if (status.ok()) return;
  std::fprintf(stderr, "ax-train: %s failed: %s\n", what, status.to_string().c_str());
  std::fflush(nullptr);
  // The rank that hosts the store stays a little longer, so that the other ranks can still
  // find out through it which rank went missing.
  const int linger = g_failure_linger_ms.load();
  if (linger > 0) std::this_thread::sleep_for(std::chrono::milliseconds(linger));
  std::_Exit(1);
}

void layers::TensorGroup::all_reduce(Tensor t) const {
  if (size == 1) return;
  layers::collective_or_die(comm->all_reduce(t, comm::ReduceOp::kSum),
                                 "tensor-parallel all-reduce");
}

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::~Model() = default;

StatusOr<std::unique_ptr<Model>> Model::create(const ModelConfig& config, int64_t vocab,
                                               int64_t batch, int64_t seq_len, Backend* backend,
                                               const ModelParallel& parallel,
                                               const ModelOptions& options) {
  AX_CHECK(backend != nullptr);
  if (batch <= 0 || seq_len <= 0) {
    return InvalidArgument("a micro-batch needs batch > 0 and seq_len > 0, got (", batch, ", ",
                           seq_len, ")");
  }
  if (config.num_layers < 1 || config.model_dim < 1 || config.num_heads < 1 ||
      config.num_kv_heads < 1 || config.hidden_dim < 1) {
    return InvalidArgument(
        "model.num_layers, model_dim, num_heads, num_kv_heads and hidden_dim "
        "must be positive");
  }
  if (config.model_dim % config.num_heads != 0 || config.num_heads % config.num_kv_heads != 0) {
    return InvalidArgument(
        "model.num_heads=", config.num_heads, " must divide model.model_dim=", config.model_dim,
        " and model.num_kv_heads=", config.num_kv_heads, " must divide model.num_heads");
  }
  if (config.norm != "layernorm" && config.norm != "rmsnorm") {
    return InvalidArgument("model.norm='", config.norm, "': expected layernorm|rmsnorm");
  }
  if (config.activation != "gelu" && config.activation != "swiglu") {
    return InvalidArgument("model.activation='", config.activation, "': expected gelu|swiglu");
  }
  if (config.position != "learned" && config.position != "rope") {
    return InvalidArgument("model.position='", config.position, "': expected learned|rope");
  }
  if (config.position == "rope" && config.head_dim() % 2 != 0) {
    return InvalidArgument(
        "RoPE needs an even head dimension; model.model_dim / "
        "model.num_heads = ",
        config.head_dim());
  }
  if (config.position == "learned" && seq_len > config.max_seq_len) {
    return InvalidArgument("train.seq_len=", seq_len,
                           " is longer than model.max_seq_len=", config.max_seq_len,
                           " (the learned position table)");
  }
  AX_ASSIGN_OR_RETURN(int64_t padded, padded_vocab_size(config, vocab));
  const int tp = parallel.tensor_size, fsdp = parallel.fsdp_size;
  if (tp < 1 || fsdp < 1 || parallel.tensor_rank < 0 || parallel.tensor_rank >= tp ||
      parallel.fsdp_rank < 0 || parallel.fsdp_rank >= fsdp) {
    return InvalidArgument("bad model parallelism: tensor rank ", parallel.tensor_rank, " of ", tp,
                           ", fsdp rank ", parallel.fsdp_rank, " of ", fsdp);
  }
  if ((tp > 1 && parallel.tensor == nullptr) || (fsdp > 1 && parallel.fsdp == nullptr)) {
    return InvalidArgument("model parallelism needs the tensor and fsdp communicators");
  }
  if (tp > 1) {
    if (config.num_kv_heads % tp != 0 || config.hidden_dim % tp != 0 || padded % tp != 0) {
      return InvalidArgument(
          "tensor parallelism of ", tp, " needs it to divide model.num_kv_heads (",
          config.num_kv_heads, "), and so model.num_heads (", config.num_heads,
          "), model.hidden_dim (", config.hidden_dim, ") and the padded vocabulary (", padded,
          "; model.vocab_multiple rounds it up)");
    }
  }

  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->config.vocab_size = padded;
  impl->be = backend;
  impl->B = batch;
  impl->T = seq_len;
  impl->C = config.model_dim;
  impl->V = vocab;
  impl->Vp = padded;
  impl->par = parallel;
  impl->options = options;
  impl->tp = {parallel.tensor_rank, tp, parallel.tensor};
  impl->F = fsdp;
  impl->Vl = padded / tp;
  impl->v_begin = parallel.tensor_rank * impl->Vl;
  impl->v_count = std::clamp<int64_t>(vocab - impl->v_begin, 0, impl->Vl);
  impl->declare();
  AX_RETURN_IF_ERROR(impl->allocate());
  impl->bind();

  Arena dry_run;
  impl->plan(&dry_run);
  impl->act_bytes = dry_run.used();
  AX_ASSIGN_OR_RETURN(impl->acts_base, backend->alloc(impl->act_bytes));
  Arena arena(impl->acts_base, impl->act_bytes);
  impl->plan(&arena);
  return std::unique_ptr<Model>(new Model(std::move(impl)));
}

const ModelConfig& Model::config() const { return impl_->config; }
const ParamLayout& Model::layout() const { return impl_->layout; }
Backend* Model::backend() const { return impl_->be; }
int64_t Model::batch() const { return impl_->B; }
int64_t Model::seq_len() const { return impl_->T; }
int64_t Model::vocab() const { return impl_->V; }
size_t Model::activation_bytes() const { return impl_->act_bytes; }
int64_t Model::num_targets() const { return impl_->num_targets; }
const ModelParallel& Model::parallel() const { return impl_->par; }
bool Model::sharded() const { return impl_->tp.size > 1 || impl_->F > 1; }
Tensor Model::params() const { return impl_->shard(impl_->params, DType::kF32); }
Tensor Model::grads() const { return impl_->shard(impl_->grads, DType::kF32); }

std::vector<OwnedRange> Model::owned() const {
  const Impl& m = *impl_;
  std::vector<OwnedRange> out;
  for (const ParamSpec& spec : m.layout.specs()) {
    if (m.F == 1) {
      out.push_back({&spec, 0, spec.offset, spec.numel});
      continue;
    }
    const ParamLayout::Unit& unit = m.layout.units()[static_cast<size_t>(spec.unit)];
    const int64_t size = unit.size / m.F;
    const int64_t own_begin = unit.begin + m.par.fsdp_rank * size;
    const int64_t begin = std::max(spec.offset, own_begin);
    const int64_t end = std::min(spec.offset + spec.numel, own_begin + size);
    if (begin >= end) continue;
    out.push_back({&spec, begin - spec.offset, unit.begin / m.F + (begin - own_begin), end - begin});
  }
  return out;
}

double Model::grad_sum_squares() const {
  const Impl& m = *impl_;
  Backend& be = *m.be;
  double local = 0;
  if (m.tp.size == 1) {
    local = be.sum_squares(grads());
  } else {
    // A parameter every tensor rank holds whole has the same gradient on each: count it once.
    for (const OwnedRange& r : owned()) {
      if (r.spec->split_dim < 0 && m.tp.rank != 0) continue;
      local += be.sum_squares(Tensor(static_cast<float*>(m.grads) + r.shard_offset, DType::kF32,
                                     {r.length}));
    }
  }
  if (!sharded()) return local;
  float host[16] = {static_cast<float>(local)};
  be.copy_from_host(m.scalar, host);
  if (m.tp.size > 1) {
    layers::collective_or_die(m.par.tensor->all_reduce(Tensor(m.scalar.data, DType::kF32, {1}), comm::ReduceOp::kSum),
                            "gradient norm (tensor)");
  }
  if (m.F > 1) {
    layers::collective_or_die(m.par.fsdp->all_reduce(Tensor(m.scalar.data, DType::kF32, {1}), comm::ReduceOp::kSum),
                            "gradient norm (fsdp)");
  }
  be.copy_to_host(host, m.scalar);
  return host[0];
}

void Model::reduce_gradients() {
  Impl& m = *impl_;
  if (m.par.data == nullptr || m.par.data->size() == 1) return;
  layers::collective_or_die(m.par.data->all_reduce(grads(), comm::ReduceOp::kSum),
                          "data-parallel gradient all-reduce");
}

void Model::init(uint64_t seed) {
  Impl& m = *impl_;
  std::vector<float> host(static_cast<size_t>(m.layout.total()));
  init_parameters(m.layout, seed, host);
  if (m.F == 1) {
    m.be->copy_from_host(params(), host.data());
  } else {
    std::vector<float> mine(static_cast<size_t>(m.layout.total() / m.F));
    for (size_t u = 0; u < m.layout.units().size(); ++u) {
      const ParamLayout::Unit& unit = m.layout.units()[u];
      const int64_t size = unit.size / m.F;
      std::copy_n(host.begin() + unit.begin + m.par.fsdp_rank * size, size,
                  mine.begin() + unit.begin / m.F);
    }
    m.be->copy_from_host(params(), mine.data());
  }
  sync_compute_weights();
}

void Model::sync_compute_weights() {
  Impl& m = *impl_;
  m.invalidate_gathered();
  if (m.weights == nullptr || m.weights == m.params) return;
  m.be->copy(m.shard(m.weights, m.be->compute_dtype()), params());
}

void Model::zero_grad() {
  Impl& m = *impl_;
  m.be->zero(grads());
  if (m.F > 1) {
    m.be->zero(Tensor(m.root_g, DType::kF32, {m.layout.units()[0].size}));
    for (void* g : m.slot_g) {
      if (g != nullptr) m.be->zero(Tensor(g, DType::kF32, {m.max_layer_unit}));
    }
  }
}

float Model::forward(std::span<const int32_t> tokens, std::span<const int32_t> targets) {
  Impl& m = *impl_;
  Backend& be = *m.be;
  const int64_t N = m.B * m.T;
  AX_CHECK_EQ(static_cast<int64_t>(tokens.size()), N);
  AX_CHECK(targets.empty() || static_cast<int64_t>(targets.size()) == N);
  // Ids are checked here, on the host, for every backend: the CUDA kernels read them on the
  // device unchecked, and a vocabulary split over tensor ranks would drop a target no shard holds.
  for (int32_t t : tokens) {
    AX_CHECK(t >= 0 && t < m.V) << "token " << t << " outside the vocabulary [0, " << m.V << ")";
  }
  for (int32_t t : targets) {
    AX_CHECK(t < m.V) << "target " << t << " outside the vocabulary [0, " << m.V
                      << ") (negative targets are ignored)";
  }

  m.ensure_root();
  if (m.tp.size == 1) {
    be.copy_from_host(m.tokens, tokens.data());
  } else {
    std::vector<int32_t> local(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) {
      const int64_t id = tokens[i] - m.v_begin;
      local[i] = (id >= 0 && id < m.Vl) ? static_cast<int32_t>(id) : -1;
    }
    be.copy_from_host(m.tokens, local.data());
  }
  // With a split vocabulary each rank looks up its rows (zeros elsewhere) and the sum over the
  // group is the embedding; rank 0 alone adds the positions.
  be.embedding_forward(m.encoded.view({m.B, m.T, m.C}), m.tokens, m.wte.w,
                       m.tp.rank == 0 ? m.wpe.w : Tensor());
  m.tp.all_reduce(m.encoded);
  for (size_t i = 0; i < m.blocks.size(); ++i) {
    m.ensure_layer(i);
    m.prefetch_layer(static_cast<int64_t>(i) + 1);
    m.blocks[i].forward(be, m.residual_into(i), m.block_acts[i], m.scratch);
  }
  m.lnf.forward(be, m.lnf_acts, m.residual_into(m.blocks.size()));
  be.matmul_forward(m.logits, m.lnf_acts.out, m.lm_head.w, Tensor());
  m.logits_valid = true;
  m.has_targets = !targets.empty();
  m.num_targets = 0;
  if (!m.has_targets) return 0.f;

  be.copy_from_host(m.targets, targets.data());
  for (int64_t i = 0; i < N; ++i) m.num_targets += targets[i] >= 0 ? 1 : 0;
  double sum = 0;
  if (m.tp.size > 1) {
    sum = m.split_vocab_loss(targets);
  } else {
    be.cross_entropy_forward(m.losses, m.logits, m.targets, m.V);
    std::vector<float> losses(static_cast<size_t>(N));
    be.copy_to_host(losses.data(), m.losses);
    for (int64_t i = 0; i < N; ++i) {
      if (targets[i] >= 0) sum += losses[i];
    }
  }
  return m.num_targets == 0 ? 0.f : static_cast<float>(sum / static_cast<double>(m.num_targets));
}

void Model::backward(float scale) {
  Impl& m = *impl_;
  Backend& be = *m.be;
  AX_CHECK(m.logits_valid && m.has_targets) << "backward() needs a forward() with targets first";
  m.logits_valid = false;
  if (m.num_targets == 0) return;
  const float dloss = scale / static_cast<float>(m.num_targets);
  // dlogits overwrite the logits in place.
  if (m.tp.size > 1) {
    be.ce_shard_backward(m.logits, m.logits, m.lse, m.targets, m.v_begin, m.v_count, dloss);
  } else {
    be.cross_entropy_backward(m.logits, m.logits, m.targets, m.V, dloss);
  }
  Tensor dlnf = m.scratch.dln;
  be.zero(dlnf);
  be.matmul_backward(dlnf, m.lm_head.dw, Tensor(), m.logits, m.lnf_acts.out, m.lm_head.w);
  m.tp.all_reduce(dlnf);  // each vocabulary shard contributes to the hidden state's gradient
  be.zero(m.dres);
  m.lnf.backward(be, m.dres, dlnf, m.residual_into(m.blocks.size()), m.lnf_acts);
  for (size_t i = m.blocks.size(); i-- > 0;) {
    m.ensure_layer(i);
    m.prefetch_layer(static_cast<int64_t>(i) - 1);
    // The shared activations hold the last layer's after the forward pass; any other layer runs
    // its forward pass again from its kept input (the same ops on the same values: bit-equal).
    if (m.options.recompute_layers && i + 1 < m.blocks.size()) {
      m.blocks[i].forward(be, m.residual_into(i), m.block_acts[i], m.scratch);
    }
    m.blocks[i].backward(be, m.dres, m.residual_into(i), m.block_acts[i], m.scratch);
    if (m.F > 1) m.scatter_unit_grads(static_cast<int>(i) + 1, m.slot_g[i % 2]);
  }
  be.embedding_backward(m.wte.dw, m.wpe.dw, m.dres.view({m.B, m.T, m.C}), m.tokens);
  if (m.F > 1) m.scatter_unit_grads(0, m.root_g);
}

std::vector<float> Model::logits(int64_t b, int64_t t) const {
  const Impl& m = *impl_;
  AX_CHECK(m.logits_valid) << "logits() needs a forward() and no backward() since";
  AX_CHECK(m.tp.size == 1) << "logits() of a vocabulary split over tensor-parallel ranks";
  AX_CHECK(b >= 0 && b < m.B && t >= 0 && t < m.T);
  const size_t row = static_cast<size_t>(b * m.T + t) * static_cast<size_t>(m.Vp);
  Tensor src(static_cast<char*>(m.logits.data) + row * dtype_size(m.logits.dtype), m.logits.dtype,
             {m.Vp});
  std::vector<float> out(static_cast<size_t>(m.Vp));
  if (src.dtype == DType::kF32) {
    m.be->copy_to_host(out.data(), src);
  } else {
    m.be->copy(m.row_f32, src);
    m.be->copy_to_host(out.data(), m.row_f32);
  }
  out.resize(static_cast<size_t>(m.V));
  return out;
}

namespace {

Status unsharded_only(const Model& model, const char* what) {
  if (!model.sharded()) return Status::Ok();
  return FailedPrecondition(what, " by name needs an unsharded model; a sharded one holds only ",
                            "parts (see Model::owned())");
}

}  // namespace

StatusOr<std::vector<float>> Model::parameter(const std::string& name) const {
  AX_RETURN_IF_ERROR(unsharded_only(*this, "reading a parameter"));
  const ParamSpec* spec = impl_->layout.find(name);
  if (spec == nullptr) return NotFound("no parameter named ", name);
  std::vector<float> out(static_cast<size_t>(spec->numel));
  impl_->be->copy_to_host(out.data(), param_view(*spec, impl_->params));
  return out;
}

StatusOr<std::vector<float>> Model::gradient(const std::string& name) const {
  AX_RETURN_IF_ERROR(unsharded_only(*this, "reading a gradient"));
  const ParamSpec* spec = impl_->layout.find(name);
  if (spec == nullptr) return NotFound("no parameter named ", name);
  std::vector<float> out(static_cast<size_t>(spec->numel));
  impl_->be->copy_to_host(out.data(), param_view(*spec, impl_->grads));
  return out;
}

Status Model::set_parameter(const std::string& name, std::span<const float> values) {
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
