// Decoder-only language models (GPT and Llama-style) on a Backend. Parameters live in a
// ParamStore (param_store.h: one allocation per buffer sliced by a layout table, names, shapes,
// init and weight decay as in docs/parameter-names.md); the activations of one micro-batch
// (batch, seq_len) are planned once in one arena. Design notes: docs/trainer.md.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ax/common/status.h"
#include "ax/trainer/backend.h"
#include "ax/trainer/config.h"
#include "ax/trainer/param_store.h"
#include "ax/trainer/tensor.h"

namespace ax::train {

// How a model trades memory for compute.
struct ModelOptions {
  // Activation recomputation per layer: keep only each layer's output (the residual stream) and
  // run a layer's forward pass again just before its backward pass, so the other activations of
  // all layers share one layer's worth of memory. Same results, about one more forward pass.
  bool recompute_layers = false;
};

class Model {
 public:
  // A model for micro-batches of (batch, seq_len) tokens. `vocab` is the real vocabulary (the
  // tokenizer's size, <= config.vocab_size): the loss and sampling use only those columns.
  static StatusOr<std::unique_ptr<Model>> create(const ModelConfig& config, int64_t vocab,
                                                 int64_t batch, int64_t seq_len, Backend* backend,
                                                 const ModelParallel& parallel = {},
                                                 const ModelOptions& options = {});
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const;
  ParamStore& store() const;
  const ParamLayout& layout() const;
  Backend* backend() const;
  int64_t batch() const;
  int64_t seq_len() const;
  int64_t vocab() const;
  size_t activation_bytes() const;

  const ModelParallel& parallel() const;
  bool sharded() const;  // tensor_size > 1 or fsdp_size > 1

  // Parameters from init_parameters(seed).
  void init(uint64_t seed);

  // tokens (batch, seq_len) in [0, vocab); targets (batch, seq_len), < 0 = ignored, or empty
  // (logits only). Returns the mean loss over the non-ignored targets (0 when there are none).
  float forward(std::span<const int32_t> tokens, std::span<const int32_t> targets);
  int64_t num_targets() const;  // non-ignored targets of the last forward
  // Accumulates scale × d(mean loss of the last forward) into the gradients. For the mean over
  // a global batch split into micro-batches, pass num_targets() / (targets in the global batch).
  // Invalidates the logits.
  void backward(float scale);
  void zero_grad();

  // The real-vocabulary logits at (b, t) of the last forward (before backward).
  std::vector<float> logits(int64_t b, int64_t t) const;

  // Flat f32 views of this rank's shard: master parameters and gradients (layout().total() /
  // layout().shards() elements each; the whole layout when fsdp_size == 1).
  Tensor params() const;
  Tensor grads() const;
  // Where each parameter's part of this rank lies in the shard buffers, in layout order.
  std::vector<OwnedRange> owned() const;
  // Σ g² over the whole model (every shard, a replicated parameter counted once): collective over
  // the tensor and fsdp groups.
  double grad_sum_squares() const;
  // After the last micro-batch of a step: sums the gradients over the data group.
  void reduce_gradients();
  // Refreshes the compute-dtype copy of the weights after the master parameters changed
  // (nothing to do when the backend computes in f32).
  void sync_compute_weights();

  // Host copies by parameter name (NotFound for an unknown name; FailedPrecondition on a sharded
  // model, whose parameters no single rank holds).
  StatusOr<std::vector<float>> parameter(const std::string& name) const;
  StatusOr<std::vector<float>> gradient(const std::string& name) const;
  Status set_parameter(const std::string& name, std::span<const float> values);

 private:
  class Impl;
  explicit Model(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The real vocabulary padded to the embedding table size: config.vocab_size when set (error if
// smaller than vocab), else vocab rounded up to vocab_multiple.
StatusOr<int64_t> padded_vocab_size(const ModelConfig& config, int64_t vocab);

}  // namespace ax::train
