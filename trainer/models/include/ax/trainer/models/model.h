// Models on a Backend: a network (decoder-only LM for gpt and llama; encoder-decoder for T5)
// over a ParamStore (param_store.h: one allocation per buffer sliced by a layout table, names,
// shapes, init and weight decay as in docs/parameter-names.md); the activations of one
// micro-batch are planned once in one arena. Design notes: docs/trainer.md.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ax/common/status.h"
#include "ax/trainer/backend/backend.h"
#include "ax/trainer/backend/tensor.h"
#include "ax/trainer/config/config.h"
#include "ax/trainer/parallel/param_store.h"

namespace ax::train {

// How a model trains beyond what its config describes (train.* keys that reach the network).
struct ModelOptions {
  // Activation recomputation per layer: keep only each layer's output (the residual stream) and
  // run a layer's forward pass again just before its backward pass, so the other activations of
  // all layers share one layer's worth of memory. Same results, about one more forward pass.
  bool recompute_layers = false;
  // Encoder-decoder models: the encoder's input length (train.encoder_seq_len); the decoder's is
  // the model's seq_len.
  int64_t encoder_seq_len = 0;
  // T5x's auxiliary z-loss (train.z_loss): z_loss · lse² per token is added to the loss, lse =
  // log Σ exp of the token's logits. 0 skips the term: the loss has the bits it had without it.
  float z_loss = 0;
  // Pipeline stages (parallel.pipeline_size > 1): model chunks per stage, the interleaved
  // schedule's virtual stages. The layers are cut into P·V contiguous chunks, chunk c on stage
  // c mod P; the first chunk also embeds (t5: also the chunk with the decoder's first layer),
  // the last holds the head and the loss.
  int pipeline_chunks = 1;
  // Model::plan only (no backend to ask): the compute dtype activations are sized in.
  DType planned_dtype = DType::kF32;
};

// One micro-batch as any model family reads it: host memory, row-major (batch, length). A loss
// mask is a target < 0 (ignored: no loss, no gradient).
struct Batch {
  std::span<const int32_t> tokens{};   // (B, T) decoder input, in [0, vocab)
  std::span<const int32_t> targets{};  // (B, T), < 0 ignored; empty: logits only
  // (B, T) or empty: packed examples, numbered per row; a token never attends to another
  // segment's (instruction tuning, T5x-style packing). Positions stay the row's 0..T-1.
  std::span<const int32_t> segment_ids{};
  // Encoder-decoder models: the encoder's input (B, Te) and its segments (or empty).
  std::span<const int32_t> encoder_tokens{};
  std::span<const int32_t> encoder_segment_ids{};
  // Training with dropout (model.dropout > 0): each row's place in the data (B), which keys its
  // masks, and the step's seed. Empty (evaluation, sampling): no dropout.
  std::span<const uint64_t> row_ids{};
  uint64_t dropout_seed = 0;
};

// A network over a ParamStore. The factory picks the family from model.family (gpt and llama:
// the decoder-only LM of decoder_lm.cc); the loop, the optimizer, checkpoints and sampling see
// only this interface and the store (docs/trainer.md "Model families").
class Model {
 public:
  // A model for micro-batches of (batch, seq_len) tokens. `vocab` is the tokenizer's size; the
  // table has padded_vocab_size(config, vocab) rows, and the softmax (loss and logits) covers
  // every one of them, as a Hugging Face config.json's vocab_size does; vocab() is that size.
  static StatusOr<std::unique_ptr<Model>> create(const ModelConfig& config, int64_t vocab,
                                                 int64_t batch, int64_t seq_len, Backend* backend,
                                                 const ModelParallel& parallel = {},
                                                 const ModelOptions& options = {});
  virtual ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const { return config_; }
  ParamStore& store() const { return *store_; }
  const ParamLayout& layout() const { return store_ ? store_->layout() : planned_->layout; }
  Backend* backend() const { return backend_; }
  int64_t batch() const { return batch_; }
  int64_t seq_len() const { return seq_len_; }
  int64_t vocab() const { return vocab_; }
  size_t activation_bytes() const { return activation_bytes_; }
  // The same model sized on one rank without allocating anything (a backend-free plan for
  // `ax-train plan`, docs/plan.md): the same checks, declarations and activation plan as create(),
  // the store's buffers counted (store_bytes) instead of allocated. Only the layout, the sizes
  // and flops_per_row() may be used; forward, backward and the store may not.
  static StatusOr<std::unique_ptr<Model>> plan(const ModelConfig& config, int64_t vocab,
                                               int64_t batch, int64_t seq_len,
                                               const ModelParallel& parallel,
                                               const ModelOptions& options);
  bool planned_only() const { return planned_ != nullptr; }
  // The store's buffers on this rank (allocated, or counted for a plan).
  StoreBytes store_bytes() const;
  const ModelParallel& parallel() const { return store_->parallel(); }
  bool sharded() const { return store_->sharded(); }

  // Checks the batch's shape and ids (on the host, for every backend: the GPU reads ids
  // unchecked, and a vocabulary split over tensor ranks would drop a target no shard holds),
  // then runs the network. Returns the mean loss over the non-ignored targets (0 when there are
  // none, or without targets).
  float forward(const Batch& batch);
  float forward(std::span<const int32_t> tokens, std::span<const int32_t> targets) {
    return forward(Batch{.tokens = tokens, .targets = targets});
  }
  int64_t num_targets() const { return num_targets_; }  // non-ignored targets of the last forward
  // Accumulates scale × d(mean loss of the last forward) into the gradients. For the mean over
  // a global batch split into micro-batches, pass num_targets() / (targets in the global batch).
  // Invalidates the logits.
  void backward(float scale);
  // The logits at (b, t) of the last forward (before backward): vocab() of them.
  virtual std::vector<float> logits(int64_t b, int64_t t) const = 0;

  // ---- Pipeline stages (docs/sharding.md "Pipeline parallelism") ----
  // With parallel.pipeline_size P > 1 the network is stage parallel.pipeline_rank of P: a
  // contiguous range of layers (with options.pipeline_chunks V > 1, V such ranges, its chunks
  // 0..V-1); the first stage also embeds the tokens, the last holds the final norm, the head and
  // the loss. Each micro-batch in flight holds an activation slot: slot 0 is
  // planned with the model (forward() and backward() use it), further ones are allocated when a
  // schedule first needs them (so the backend's allocation counter shows the schedule's peak)
  // and reused once released.
  bool first_stage() const { return parallel().pipeline_rank == 0; }
  bool last_stage() const { return parallel().pipeline_rank == parallel().pipeline_size - 1; }
  virtual int stage_chunks() const { return 1; }  // options.pipeline_chunks on a pipeline
  int acquire_slot();
  void release_slot(int slot);
  int slots_allocated() const { return static_cast<int>(slot_busy_.size()); }
  size_t slot_bytes() const { return slot_bytes_; }  // of each slot after the first (0: none)
  // The bytes acquire_slot() allocates for a slot beyond the first, by a dry run of its plan
  // (nothing allocated): how `ax-train plan` sizes a schedule's slots on a planned model.
  size_t next_slot_bytes();
  // The forward pass of this stage's `chunk` over `batch` in `slot`: the first chunk of the
  // model reads the tokens, the others their input from stage_input(slot), which the caller
  // fills (every chunk gets the batch: t5's decoder embeds where its first layer is). Returns the
  // mean loss on the model's last chunk (0 elsewhere, and without targets); every chunk counts the
  // targets. The slot remembers its chunk for the backward pass.
  float forward_stage(const Batch& batch, int slot, int chunk = 0);
  int64_t slot_targets(int slot) const { return slot_targets_[static_cast<size_t>(slot)]; }
  // The backward pass of the micro-batch in `slot`, scaled as backward(scale). A chunk other
  // than the model's last reads d(its output) from stage_gradient_in(slot), which the caller
  // fills; a chunk other than the first leaves d(its input) in stage_gradient(). Nothing to do
  // (and nothing to send) when the micro-batch has no targets, except on a seq axis, where it
  // runs with a zero gradient as backward() does.
  void backward_stage(int slot, float scale);
  // (B·T, C) in the compute dtype (t5: (B·Te + B·Td, C), the encoder's stream or memory, then the
  // decoder's): a stage's input (the previous stage's output) in `slot`, its
  // output in `slot`, and the gradient of the residual stream (one buffer for every slot). With
  // chunks the interleaved schedule receives a gradient while another is sent, or ahead of its
  // backward pass, so each slot has its own d(output) buffer; with one chunk it is
  // stage_gradient().
  virtual Tensor stage_input(int slot) const;
  virtual Tensor stage_output(int slot) const;
  virtual Tensor stage_gradient() const;
  virtual Tensor stage_gradient_in(int slot) const;
  // The FLOPs of a forward and backward pass over one row of a batch (the whole model, however
  // it is split over ranks), as MFU counts them (models/flops.h flops_per_token).
  virtual double flops_per_row() const = 0;

  // The store's, for callers that hold a model: parameters from init_parameters(seed), zeroed
  // gradients, flat f32 shards, owned ranges, the gradient norm and the data-parallel sum, the
  // compute-weight refresh, host access by name (param_store.h).
  void init(uint64_t seed) { store_->init(seed); }
  void zero_grad() { store_->zero_grad(); }
  Tensor params() const { return store_->params(); }
  Tensor grads() const { return store_->grads(); }
  std::vector<OwnedRange> owned() const { return store_->owned(); }
  double grad_sum_squares() const { return store_->grad_sum_squares(); }
  void reduce_gradients() { store_->reduce_gradients(); }
  void sync_compute_weights() { store_->sync_compute_weights(); }
  StatusOr<std::vector<float>> parameter(const std::string& name) const {
    return store_->parameter(name);
  }
  StatusOr<std::vector<float>> gradient(const std::string& name) const {
    return store_->gradient(name);
  }
  Status set_parameter(const std::string& name, std::span<const float> values) {
    return store_->set_parameter(name, values);
  }

 protected:
  Model(const ModelConfig& config, int64_t vocab, int64_t batch, int64_t seq_len, Backend* backend)
      : config_(config), backend_(backend), vocab_(vocab), batch_(batch), seq_len_(seq_len) {}
  // The network: forward over a checked batch, returning the sum of the per-token losses over
  // its non-ignored targets (num_targets_ of them); backward with d(loss)/d(each token's loss).
  virtual double forward_impl(const Batch& batch) = 0;
  virtual void backward_impl(float dloss) = 0;
  // Pipeline stages: the passes over one slot, and the plan of a new slot's activations (called
  // twice, as `plan` in build()).
  virtual double stage_forward_impl(const Batch& batch, int slot, int chunk);
  virtual void stage_backward_impl(int slot, float dloss);
  virtual void plan_slot(Arena* arena, int slot);
  // A family's build: the store over `layout` (on `parallel`), `bind` to take the parameters'
  // views, then `plan` the activations twice: a dry run sizes one allocation (freed by ~Model),
  // the second pass slices it.
  // Without a backend (Model::plan) the store's buffers are counted and the dry run is all.
  Status build(ParamLayout layout, const ModelParallel& parallel, const std::function<void()>& bind,
               const std::function<void(Arena*)>& plan);
  // create() and plan(): the shared checks and the family factory (backend null for a plan).
  static StatusOr<std::unique_ptr<Model>> create_or_plan(const ModelConfig& config, int64_t vocab,
                                                         int64_t batch, int64_t seq_len,
                                                         Backend* backend,
                                                         const ModelParallel& parallel,
                                                         const ModelOptions& options);

  ModelConfig config_;  // vocab_size is the padded vocabulary, == vocab_
  Backend* backend_;
  int64_t vocab_, batch_, seq_len_;
  std::unique_ptr<ParamStore> store_;
  size_t activation_bytes_ = 0;
  void* activations_ = nullptr;
  std::vector<void*> slot_memory_;  // pipeline slots 1.. (slot 0 is in activations_)
  std::vector<bool> slot_busy_ = {false};
  std::vector<int64_t> slot_targets_ = {0};
  size_t slot_bytes_ = 0;
  // The compute dtype (the backend's; a plan's options.planned_dtype).
  DType dtype() const { return backend_ != nullptr ? backend_->compute_dtype() : planned_dtype_; }
  DType planned_dtype_ = DType::kF32;
  struct Planned {
    ParamLayout layout;
    StoreBytes bytes;
  };
  std::unique_ptr<Planned> planned_;  // a plan's (store_ is null)
  int64_t num_targets_ = 0;
  bool has_targets_ = false;
  bool logits_valid_ = false;
};

// Σ over the matmul parameters whose name starts with `prefix` of their whole (logical) size.
int64_t logical_matmul_parameters(const ParamLayout& layout, std::string_view prefix = "");

// The decoder-only LM of gpt and llama configs (decoder_lm.cc); Model::create calls it.
StatusOr<std::unique_ptr<Model>> make_decoder_lm(const ModelConfig& config, int64_t vocab,
                                                 int64_t batch, int64_t seq_len, Backend* backend,
                                                 const ModelParallel& parallel,
                                                 const ModelOptions& options);
// The encoder-decoder of t5 configs (encoder_decoder.cc); options.encoder_seq_len is its input
// length, seq_len the decoder's.
StatusOr<std::unique_ptr<Model>> make_encoder_decoder(const ModelConfig& config, int64_t vocab,
                                                      int64_t batch, int64_t seq_len,
                                                      Backend* backend,
                                                      const ModelParallel& parallel,
                                                      const ModelOptions& options);

// The real vocabulary padded to the embedding table size: config.vocab_size when set (error if
// smaller than vocab), else vocab rounded up to vocab_multiple.
StatusOr<int64_t> padded_vocab_size(const ModelConfig& config, int64_t vocab);

}  // namespace ax::train
