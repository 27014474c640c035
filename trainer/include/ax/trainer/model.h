// Decoder-only language models (GPT and Llama-style) on a Backend. Parameters live in ONE
// allocation sliced by a layout table (names, shapes, init and weight decay as in
// docs/parameter-names.md); gradients in a second allocation with the same layout; the
// activations of one micro-batch (batch, seq_len) are planned once in one arena. Design notes:
// docs/trainer.md.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ax/common/status.h"
#include "ax/trainer/backend.h"
#include "ax/trainer/config.h"
#include "ax/trainer/tensor.h"

namespace ax::train {

enum class ParamInit : uint8_t { kNormal, kOnes, kZeros };

struct ParamSpec {
  std::string name;            // "h.0.attn.qkv.weight"
  std::vector<int64_t> shape;  // row-major, a linear weight is (out, in)
  int64_t offset = 0;          // elements from the start of the allocation
  int64_t numel = 0;
  bool weight_decay = false;  // matrices and embeddings; not norms and biases
  bool matmul = false;        // counts as a matmul parameter (PaLM's N, for MFU)
  ParamInit init = ParamInit::kNormal;
  double init_std = 0;
};

// The layout table. Parameters with weight decay come first, then those without, so each
// optimizer group is one contiguous range; every tensor starts on a 64-byte boundary (the
// padding between tensors stays zero in every buffer).
class ParamLayout {
 public:
  // Appends a parameter in declaration order; finalize() assigns the offsets.
  void add(ParamSpec spec);
  void finalize();

  const std::vector<ParamSpec>& specs() const { return specs_; }
  const ParamSpec* find(const std::string& name) const;  // nullptr when absent
  int64_t total() const { return total_; }               // elements, padding included
  int64_t decay_end() const { return decay_end_; }       // [0, decay_end) has weight decay
  int64_t num_parameters() const;                        // without padding
  int64_t num_matmul_parameters() const;

 private:
  std::vector<ParamSpec> specs_;
  int64_t total_ = 0;
  int64_t decay_end_ = 0;
};

// The view of one parameter inside a flat buffer laid out by `layout`.
Tensor param_view(const ParamSpec& spec, void* base, DType dtype = DType::kF32);

// Writes the initial values of every parameter into host (layout.total() floats): N(0, std)
// from a SplitMix64 stream per parameter (seeded by the run seed and the parameter's name) and
// Box-Muller, so values do not depend on thread count or on the other parameters.
void init_parameters(const ParamLayout& layout, uint64_t seed, std::span<float> host);

class Model {
 public:
  // A model for micro-batches of (batch, seq_len) tokens. `vocab` is the real vocabulary (the
  // tokenizer's size, <= config.vocab_size): the loss and sampling use only those columns.
  static StatusOr<std::unique_ptr<Model>> create(const ModelConfig& config, int64_t vocab,
                                                 int64_t batch, int64_t seq_len, Backend* backend);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const;
  const ParamLayout& layout() const;
  Backend* backend() const;
  int64_t batch() const;
  int64_t seq_len() const;
  int64_t vocab() const;
  size_t activation_bytes() const;

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

  // Flat f32 views: master parameters and gradients (layout().total() elements each).
  Tensor params() const;
  Tensor grads() const;
  // Refreshes the compute-dtype copy of the weights after the master parameters changed
  // (nothing to do when the backend computes in f32).
  void sync_compute_weights();

  // Host copies by parameter name (NotFound for an unknown name).
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
