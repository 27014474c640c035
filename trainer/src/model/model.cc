// The decoder-only language model: embeddings, a stack of DecoderLayers, a final norm and the
// LM head (tied to wte or its own lm_head), with the parameter layout and activation plan.
#include "ax/trainer/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "layers.h"
#include "rng.h"

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
  specs_.push_back(std::move(spec));
}

void ParamLayout::finalize() {
  int64_t offset = 0;
  for (bool decay : {true, false}) {
    for (ParamSpec& spec : specs_) {
      if (spec.weight_decay != decay) continue;
      spec.offset = offset;
      offset = align_up(offset + spec.numel, kAlignElements);
    }
    if (decay) decay_end_ = offset;
  }
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
        SplitMix64 rng(seed ^ fnv1a64(spec.name));
        for (int64_t i = 0; i < spec.numel; i += 2) {
          double z0, z1;
          rng.normal_pair(&z0, &z1);
          p[i] = static_cast<float>(z0 * spec.init_std);
          if (i + 1 < spec.numel) p[i + 1] = static_cast<float>(z1 * spec.init_std);
        }
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

  // One allocation each; `weights` is `params` unless the backend computes in another dtype.
  void* params = nullptr;   // f32 master weights
  void* grads = nullptr;    // f32
  void* weights = nullptr;  // compute dtype
  void* acts_base = nullptr;
  size_t act_bytes = 0;

  // Blocks.
  layers::Weights wte, wpe, lm_head;  // wpe empty with RoPE; lm_head = wte when tied
  std::vector<layers::DecoderLayer> blocks;
  layers::Norm lnf;

  // Activations of one micro-batch.
  Tensor tokens;   // (B, T) i32
  Tensor targets;  // (B, T) i32
  Tensor encoded;  // (N, C) embedding output = residual stream into layer 0
  std::vector<layers::DecoderLayer::Acts> block_acts;
  layers::Norm::Acts lnf_acts;
  Tensor logits;   // (N, Vp); holds dlogits after backward
  Tensor losses;   // (N) f32
  Tensor row_f32;  // (Vp) f32, one row of logits for the host
  Tensor dres;     // (N, C) gradient of the residual stream
  layers::DecoderLayer::Scratch scratch;

  int64_t num_targets = 0;
  bool has_targets = false;
  bool logits_valid = false;

  ~Impl() {
    for (void* p : {params, grads, acts_base}) {
      if (p != nullptr) be->free(p);
    }
    if (weights != nullptr && weights != params) be->free(weights);
  }

  void declare() {
    const bool learned = config.position == "learned";
    ParamSpec spec;
    spec.name = "wte";
    spec.shape = {Vp, C};
    spec.weight_decay = true;
    spec.matmul = config.tied_embeddings;  // the LM head counts once; a lookup does not
    spec.init_std = config.init_std;
    layout.add(spec);
    if (learned) {
      spec.name = "wpe";
      spec.shape = {config.max_seq_len, C};
      spec.matmul = false;
      layout.add(spec);
    }
    blocks.resize(static_cast<size_t>(config.num_layers));
    for (size_t i = 0; i < blocks.size(); ++i) {
      blocks[i].declare(&layout, "h." + std::to_string(i), config);
    }
    lnf.declare(&layout, "lnf", C, config.norm == "rmsnorm", config.bias, config.norm_eps);
    if (!config.tied_embeddings) {
      spec.name = "lm_head.weight";
      spec.shape = {Vp, C};
      spec.matmul = true;
      layout.add(spec);
    }
    layout.finalize();
  }

  void bind() {
    layers::ParamBinder binder(layout, weights, be->compute_dtype(), grads);
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
    for (size_t i = 0; i < blocks.size(); ++i) blocks[i].plan(arena, dt, B, T, C, &block_acts[i]);
    lnf.plan(arena, dt, N, C, &lnf_acts);
    logits = arena->take(dt, {N, Vp});
    losses = arena->take(DType::kF32, {N});
    row_f32 = arena->take(DType::kF32, {Vp});
    dres = arena->take(dt, {N, C});
    if (!blocks.empty()) blocks[0].plan_scratch(arena, dt, B, T, C, &scratch);
  }

  Tensor residual_into(size_t i) const { return i == 0 ? encoded : block_acts[i - 1].res_out; }
  Tensor flat(void* base, DType dtype) const { return Tensor(base, dtype, {layout.total()}); }
};

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::~Model() = default;

StatusOr<std::unique_ptr<Model>> Model::create(const ModelConfig& config, int64_t vocab,
                                               int64_t batch, int64_t seq_len, Backend* backend) {
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

  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->config.vocab_size = padded;
  impl->be = backend;
  impl->B = batch;
  impl->T = seq_len;
  impl->C = config.model_dim;
  impl->V = vocab;
  impl->Vp = padded;
  impl->declare();

  const size_t param_bytes = static_cast<size_t>(impl->layout.total()) * sizeof(float);
  AX_ASSIGN_OR_RETURN(impl->params, backend->alloc(param_bytes));
  AX_ASSIGN_OR_RETURN(impl->grads, backend->alloc(param_bytes));
  if (backend->compute_dtype() == DType::kF32) {
    impl->weights = impl->params;
  } else {
    AX_ASSIGN_OR_RETURN(impl->weights, backend->alloc(static_cast<size_t>(impl->layout.total()) *
                                                      dtype_size(backend->compute_dtype())));
  }
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
Tensor Model::params() const { return impl_->flat(impl_->params, DType::kF32); }
Tensor Model::grads() const { return impl_->flat(impl_->grads, DType::kF32); }

void Model::init(uint64_t seed) {
  std::vector<float> host(static_cast<size_t>(impl_->layout.total()));
  init_parameters(impl_->layout, seed, host);
  impl_->be->copy_from_host(params(), host.data());
  sync_compute_weights();
}

void Model::sync_compute_weights() {
  if (impl_->weights == impl_->params) return;
  impl_->be->copy(impl_->flat(impl_->weights, impl_->be->compute_dtype()), params());
}

void Model::zero_grad() { impl_->be->zero(grads()); }

float Model::forward(std::span<const int32_t> tokens, std::span<const int32_t> targets) {
  Impl& m = *impl_;
  Backend& be = *m.be;
  const int64_t N = m.B * m.T;
  AX_CHECK_EQ(static_cast<int64_t>(tokens.size()), N);
  AX_CHECK(targets.empty() || static_cast<int64_t>(targets.size()) == N);
  for (int32_t t : tokens)
    AX_CHECK(t >= 0 && t < m.V) << "token " << t << " outside the vocabulary";

  be.copy_from_host(m.tokens, tokens.data());
  be.embedding_forward(m.encoded.view({m.B, m.T, m.C}), m.tokens, m.wte.w, m.wpe.w);
  for (size_t i = 0; i < m.blocks.size(); ++i) {
    m.blocks[i].forward(be, m.residual_into(i), m.block_acts[i], m.scratch);
  }
  m.lnf.forward(be, m.lnf_acts, m.residual_into(m.blocks.size()));
  be.matmul_forward(m.logits, m.lnf_acts.out, m.lm_head.w, Tensor());
  m.logits_valid = true;
  m.has_targets = !targets.empty();
  m.num_targets = 0;
  if (!m.has_targets) return 0.f;

  be.copy_from_host(m.targets, targets.data());
  be.cross_entropy_forward(m.losses, m.logits, m.targets, m.V);
  std::vector<float> losses(static_cast<size_t>(N));
  be.copy_to_host(losses.data(), m.losses);
  double sum = 0;
  for (int64_t i = 0; i < N; ++i) {
    if (targets[i] < 0) continue;
    sum += losses[i];
    ++m.num_targets;
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
  be.cross_entropy_backward(m.logits, m.logits, m.targets, m.V, dloss);
  Tensor dlnf = m.scratch.dln;
  be.zero(dlnf);
  be.matmul_backward(dlnf, m.lm_head.dw, Tensor(), m.logits, m.lnf_acts.out, m.lm_head.w);
  be.zero(m.dres);
  m.lnf.backward(be, m.dres, dlnf, m.residual_into(m.blocks.size()), m.lnf_acts);
  for (size_t i = m.blocks.size(); i-- > 0;) {
    m.blocks[i].backward(be, m.dres, m.residual_into(i), m.block_acts[i], m.scratch);
  }
  be.embedding_backward(m.wte.dw, m.wpe.dw, m.dres.view({m.B, m.T, m.C}), m.tokens);
}

std::vector<float> Model::logits(int64_t b, int64_t t) const {
  const Impl& m = *impl_;
  AX_CHECK(m.logits_valid) << "logits() needs a forward() and no backward() since";
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
  const ParamSpec* spec = impl_->layout.find(name);
  if (spec == nullptr) return NotFound("no parameter named ", name);
  std::vector<float> out(static_cast<size_t>(spec->numel));
  impl_->be->copy_to_host(out.data(), param_view(*spec, impl_->params));
  return out;
}

StatusOr<std::vector<float>> Model::gradient(const std::string& name) const {
  const ParamSpec* spec = impl_->layout.find(name);
  if (spec == nullptr) return NotFound("no parameter named ", name);
  std::vector<float> out(static_cast<size_t>(spec->numel));
  impl_->be->copy_to_host(out.data(), param_view(*spec, impl_->grads));
  return out;
}

Status Model::set_parameter(const std::string& name, std::span<const float> values) {
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
