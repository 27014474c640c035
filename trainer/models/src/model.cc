// Model: the family factory and the checks every family shares (model.h).
#include "ax/trainer/models/model.h"

#include <algorithm>

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

int64_t logical_matmul_parameters(const ParamLayout& layout, std::string_view prefix) {
  int64_t n = 0;
  for (const ParamSpec& spec : layout.specs()) {
    if (!spec.matmul || !spec.name.starts_with(prefix)) continue;
    int64_t numel = 1;
    for (int64_t d : spec.logical_shape) numel *= d;
    n += numel;
  }
  return n;
}

Model::~Model() {
  if (activations_ != nullptr) backend_->free(activations_);
  for (void* p : slot_memory_) backend_->free(p);
}

int Model::acquire_slot() {
  for (size_t s = 0; s < slot_busy_.size(); ++s) {
    if (!slot_busy_[s]) {
      slot_busy_[s] = true;
      return static_cast<int>(s);
    }
  }
  const int slot = slots_allocated();
  Arena dry_run;
  plan_slot(&dry_run, slot);
  slot_bytes_ = dry_run.used();
  StatusOr<void*> memory = backend_->alloc(dry_run.used());
  AX_CHECK(memory.ok()) << "activations of micro-batch slot " << slot << ": "
                        << memory.status().to_string();
  slot_memory_.push_back(*memory);
  Arena arena(*memory, dry_run.used());
  plan_slot(&arena, slot);
  slot_busy_.push_back(true);
  slot_targets_.push_back(0);
  return slot;
}

size_t Model::next_slot_bytes() {
  Arena dry_run;
  plan_slot(&dry_run, slots_allocated());
  return dry_run.used();
}

void Model::release_slot(int slot) {
  AX_CHECK(slot >= 0 && slot < slots_allocated() && slot_busy_[static_cast<size_t>(slot)]);
  slot_busy_[static_cast<size_t>(slot)] = false;
}

namespace {

// The defaults of a family without pipeline stages (every family has them today).
void refuse_pipeline_stages(const ModelConfig& config) {
  AX_CHECK(false) << "model.family=" << name_of(config.family) << " has no pipeline stages";
}

}  // namespace

Tensor Model::stage_input(int) const {
  refuse_pipeline_stages(config_);
  return {};
}
Tensor Model::stage_output(int) const {
  refuse_pipeline_stages(config_);
  return {};
}
Tensor Model::stage_gradient() const {
  refuse_pipeline_stages(config_);
  return {};
}
Tensor Model::stage_gradient_in(int) const {
  refuse_pipeline_stages(config_);
  return {};
}
double Model::stage_forward_impl(const Batch&, int, int) {
  refuse_pipeline_stages(config_);
  return 0;
}
void Model::stage_backward_impl(int, float) { refuse_pipeline_stages(config_); }
void Model::plan_slot(Arena*, int) { refuse_pipeline_stages(config_); }

StoreBytes Model::store_bytes() const {
  return store_ ? train::store_bytes(layout(), dtype()) : planned_->bytes;
}

Status Model::build(ParamLayout layout, const ModelParallel& parallel,
                    const std::function<void()>& bind, const std::function<void(Arena*)>& plan) {
  if (backend_ == nullptr) {  // Model::plan: count, allocate nothing
    planned_ = std::make_unique<Planned>();
    planned_->layout = std::move(layout);
    planned_->layout.finalize(std::max(1, parallel.fsdp_size));
    planned_->bytes = train::store_bytes(planned_->layout, dtype());
    Arena dry_run;
    plan(&dry_run);
    activation_bytes_ = dry_run.used();
    return Status::Ok();
  }
  AX_ASSIGN_OR_RETURN(store_, ParamStore::create(std::move(layout), backend_, parallel));
  bind();
  Arena dry_run;
  plan(&dry_run);
  activation_bytes_ = dry_run.used();
  AX_ASSIGN_OR_RETURN(activations_, backend_->alloc(activation_bytes_));
  Arena arena(activations_, activation_bytes_);
  plan(&arena);
  return Status::Ok();
}

StatusOr<std::unique_ptr<Model>> Model::create(const ModelConfig& config, int64_t vocab,
                                               int64_t batch, int64_t seq_len, Backend* backend,
                                               const ModelParallel& parallel,
                                               const ModelOptions& options) {
  AX_CHECK(backend != nullptr);
  return create_or_plan(config, vocab, batch, seq_len, backend, parallel, options);
}

StatusOr<std::unique_ptr<Model>> Model::plan(const ModelConfig& config, int64_t vocab,
                                             int64_t batch, int64_t seq_len,
                                             const ModelParallel& parallel,
                                             const ModelOptions& options) {
  return create_or_plan(config, vocab, batch, seq_len, nullptr, parallel, options);
}

StatusOr<std::unique_ptr<Model>> Model::create_or_plan(const ModelConfig& config, int64_t vocab,
                                                       int64_t batch, int64_t seq_len,
                                                       Backend* backend,
                                                       const ModelParallel& parallel,
                                                       const ModelOptions& options) {
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
  if ((config.kv_channels == 0 && config.model_dim % config.num_heads != 0) ||
      config.num_heads % config.num_kv_heads != 0) {
    return InvalidArgument(
        "model.num_heads=", config.num_heads, " must divide model.model_dim=", config.model_dim,
        " (or set model.kv_channels) and model.num_kv_heads=", config.num_kv_heads,
        " must divide model.num_heads");
  }
  if (config.position == PositionKind::kRope && config.head_dim() % 2 != 0) {
    return InvalidArgument(
        "RoPE needs an even head dimension; model.model_dim / model.num_heads = ",
        config.head_dim());
  }
  AX_ASSIGN_OR_RETURN(int64_t padded, padded_vocab_size(config, vocab));
  const int tp = parallel.tensor_size;
  if (tp > 1 &&
      (config.num_kv_heads % tp != 0 || config.hidden_dim % tp != 0 || padded % tp != 0)) {
    return InvalidArgument("tensor parallelism of ", tp, " needs it to divide model.num_kv_heads (",
                           config.num_kv_heads, "), and so model.num_heads (", config.num_heads,
                           "), model.hidden_dim (", config.hidden_dim,
                           ") and the padded vocabulary (", padded,
                           "; model.vocab_multiple rounds it up)");
  }
  // The softmax covers every row of the table, padding included, as in Megatron-LM, T5X and
  // Hugging Face (config.json's vocab_size): an export or import then computes the same function
  // (docs/checkpoint-format.md "The vocabulary and its padding").
  ModelConfig padded_config = config;
  padded_config.vocab_size = padded;
  switch (config.family) {
    case ModelFamily::kGpt:
    case ModelFamily::kLlama:
      return make_decoder_lm(padded_config, padded, batch, seq_len, backend, parallel, options);
    case ModelFamily::kT5:
      return make_encoder_decoder(padded_config, padded, batch, seq_len, backend, parallel,
                                  options);
  }
  return InvalidArgument("model.family=", name_of(config.family), ": no such model family");
}

float Model::forward(const Batch& batch) { return forward_stage(batch, 0); }

float Model::forward_stage(const Batch& batch, int slot, int chunk) {
  AX_CHECK(slot >= 0 && slot < slots_allocated());
  const int64_t N = batch_ * seq_len_;
  AX_CHECK_EQ(static_cast<int64_t>(batch.tokens.size()), N);
  AX_CHECK(batch.targets.empty() || static_cast<int64_t>(batch.targets.size()) == N);
  AX_CHECK(batch.segment_ids.empty() || static_cast<int64_t>(batch.segment_ids.size()) == N);
  AX_CHECK(batch.row_ids.empty() || static_cast<int64_t>(batch.row_ids.size()) == batch_);
  // Ids are checked here, on the host, for every backend: the CUDA kernels read them on the
  // device unchecked, and a vocabulary split over tensor ranks would drop a target no shard holds.
  for (int32_t t : batch.tokens) {
    AX_CHECK(t >= 0 && t < vocab_)
        << "token " << t << " outside the vocabulary [0, " << vocab_ << ")";
  }
  for (int32_t t : batch.encoder_tokens) {
    AX_CHECK(t >= 0 && t < vocab_)
        << "encoder token " << t << " outside the vocabulary [0, " << vocab_ << ")";
  }
  num_targets_ = 0;
  for (int32_t t : batch.targets) {
    AX_CHECK(t < vocab_) << "target " << t << " outside the vocabulary [0, " << vocab_
                         << ") (negative targets are ignored)";
    num_targets_ += t >= 0 ? 1 : 0;
  }
  slot_targets_[static_cast<size_t>(slot)] = num_targets_;
  const double sum =
      slot == 0 && chunk == 0 ? forward_impl(batch) : stage_forward_impl(batch, slot, chunk);
  logits_valid_ = slot == 0;
  has_targets_ = !batch.targets.empty();
  return num_targets_ == 0 ? 0.f : static_cast<float>(sum / static_cast<double>(num_targets_));
}

void Model::backward(float scale) {
  AX_CHECK(logits_valid_ && has_targets_) << "backward() needs a forward() with targets first";
  logits_valid_ = false;
  if (num_targets_ > 0) {
    backward_impl(scale / static_cast<float>(num_targets_));
  } else if (parallel().seq_size > 1) {
    // The other slices of these rows may hold targets: their attention's backward pass needs
    // this slice's part of the seq group's collectives (a zero gradient from here).
    backward_impl(0.f);
  }
}

void Model::backward_stage(int slot, float scale) {
  if (slot == 0) logits_valid_ = false;
  const int64_t targets = slot_targets(slot);
  // A slice without targets still runs, with a zero gradient, as in backward().
  if (targets == 0 && parallel().seq_size <= 1) return;
  const float dloss = targets == 0 ? 0.f : scale / static_cast<float>(targets);
  if (slot == 0) {
    backward_impl(dloss);
  } else {
    stage_backward_impl(slot, dloss);
  }
}

}  // namespace ax::train
