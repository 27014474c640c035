// The decoder-only language model: embeddings, a stack of DecoderLayers, a final norm and the
// LM head (tied to wte or its own lm_head), with the parameter layout and activation plan.
#include "ax/trainer/model.h"

#include <algorithm>
#include <cmath>

#include "ax/trainer/comm/communicator.h"
#include "layers.h"

namespace ax::train {

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
  const int64_t multiple = std::max<int64_t>(1, config.vocab_multiple);
  return (vocab + multiple - 1) / multiple * multiple;
}

// ---- Model ----

class Model::Impl {
 public:
  ModelConfig config;
  Backend* be = nullptr;
  int64_t B = 0, T = 0, C = 0, V = 0, Vp = 0;
  ModelParallel par;
  ModelOptions options;
  layers::TensorGroup tp;
  // This rank's vocabulary shard: rows [v_begin, v_begin + Vl) of the padded table, of which
  // the first v_count are real tokens.
  int64_t Vl = 0, v_begin = 0, v_count = 0;
  std::unique_ptr<ParamStore> store;

  void* acts_base = nullptr;
  size_t act_bytes = 0;

  // Blocks.
  ParamViews wte, wpe, lm_head;  // wpe empty with RoPE; lm_head = wte when tied
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
  Tensor row_f32;  // (Vl) f32, one row of logits for the host
  Tensor dres;     // (N, C) gradient of the residual stream
  layers::DecoderLayer::Scratch scratch;

  int64_t num_targets = 0;
  bool has_targets = false;
  bool logits_valid = false;

  ~Impl() {
    if (acts_base != nullptr) be->free(acts_base);
  }

  // The network's parameters, unit by unit: 0 = embeddings, final norm and head; 1 + i = layer i.
  ParamLayout declare() {
    ParamLayout layout;
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
    return layout;
  }

  void bind() {
    const ParamStore& ps = *store;
    wte = ps.views("wte");
    wpe = ps.views(config.position == "learned" ? "wpe" : "");
    lm_head = ps.views(config.tied_embeddings ? "wte" : "lm_head.weight");
    for (layers::DecoderLayer& block : blocks) block.bind(ps);
    lnf.bind(ps);
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
    row_f32 = arena->take(DType::kF32, {Vl});
    dres = arena->take(dt, {N, C});
    if (!blocks.empty()) blocks[0].plan_scratch(arena, dt, B, T, C, &scratch);
  }

  Tensor residual_into(size_t i) const { return i == 0 ? encoded : block_acts[i - 1].res_out; }
  // The vocabulary-parallel loss of the last logits (tensor groups > 1). Returns the sum of the
  // per-row losses over the non-ignored targets and leaves lse on the device for backward.
  double split_vocab_loss(std::span<const int32_t> host_targets) {
    const int64_t N = B * T;
    be->ce_shard_max(rowmax, logits, v_count);
    comm::collective_or_die(par.tensor->all_reduce(rowmax, comm::ReduceOp::kMax),
                      "tensor-parallel cross-entropy (max)");
    be->ce_shard_sums(sums, logits, rowmax, targets, v_begin, v_count);
    comm::collective_or_die(par.tensor->all_reduce(sums, comm::ReduceOp::kSum),
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
  const int tp = std::max(1, parallel.tensor_size);
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
  impl->Vl = padded / tp;
  impl->v_begin = parallel.tensor_rank * impl->Vl;
  impl->v_count = std::clamp<int64_t>(vocab - impl->v_begin, 0, impl->Vl);
  AX_ASSIGN_OR_RETURN(impl->store, ParamStore::create(impl->declare(), backend, parallel));
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
ParamStore& Model::store() const { return *impl_->store; }
const ParamLayout& Model::layout() const { return impl_->store->layout(); }
Backend* Model::backend() const { return impl_->be; }
int64_t Model::batch() const { return impl_->B; }
int64_t Model::seq_len() const { return impl_->T; }
int64_t Model::vocab() const { return impl_->V; }
size_t Model::activation_bytes() const { return impl_->act_bytes; }
int64_t Model::num_targets() const { return impl_->num_targets; }
const ModelParallel& Model::parallel() const { return impl_->par; }
bool Model::sharded() const { return impl_->store->sharded(); }
Tensor Model::params() const { return impl_->store->params(); }
Tensor Model::grads() const { return impl_->store->grads(); }
std::vector<OwnedRange> Model::owned() const { return impl_->store->owned(); }
double Model::grad_sum_squares() const { return impl_->store->grad_sum_squares(); }
void Model::reduce_gradients() { impl_->store->reduce_gradients(); }
void Model::init(uint64_t seed) { impl_->store->init(seed); }
void Model::sync_compute_weights() { impl_->store->sync_compute_weights(); }
void Model::zero_grad() { impl_->store->zero_grad(); }

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

  ParamStore& ps = *m.store;
  ps.gather(0);
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
    const int unit = static_cast<int>(i) + 1;
    ps.gather(unit);
    ps.prefetch(unit + 1);
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
  ParamStore& ps = *m.store;
  for (size_t i = m.blocks.size(); i-- > 0;) {
    const int unit = static_cast<int>(i) + 1;
    ps.gather(unit);
    ps.prefetch(unit - 1);
    // The shared activations hold the last layer's after the forward pass; any other layer runs
    // its forward pass again from its kept input (the same ops on the same values: bit-equal).
    if (m.options.recompute_layers && i + 1 < m.blocks.size()) {
      m.blocks[i].forward(be, m.residual_into(i), m.block_acts[i], m.scratch);
    }
    m.blocks[i].backward(be, m.dres, m.residual_into(i), m.block_acts[i], m.scratch);
    ps.release(unit);
  }
  be.embedding_backward(m.wte.dw, m.wpe.dw, m.dres.view({m.B, m.T, m.C}), m.tokens);
  ps.release(0);
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

StatusOr<std::vector<float>> Model::parameter(const std::string& name) const {
  return impl_->store->parameter(name);
}

StatusOr<std::vector<float>> Model::gradient(const std::string& name) const {
  return impl_->store->gradient(name);
}

Status Model::set_parameter(const std::string& name, std::span<const float> values) {
  return impl_->store->set_parameter(name, values);
}

}  // namespace ax::train
