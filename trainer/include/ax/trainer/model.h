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

namespace comm {
class Communicator;
}

enum class ParamInit : uint8_t { kNormal, kOnes, kZeros };

// Tensor parallelism: along a parameter's split_dim, this rank's rows (or columns)
// [local_begin, local_begin + length) are the logical tensor's [logical_begin, ...).
struct ParamPiece {
  int64_t local_begin = 0;
  int64_t logical_begin = 0;
  int64_t length = 0;
};

struct ParamSpec {
  std::string name;            // "h.0.attn.qkv.weight"
  std::vector<int64_t> shape;  // this rank's tensor, row-major; a linear weight is (out, in)
  // The logical (unsharded) tensor and how this rank's part sits in it: split_dim -1 = the whole
  // tensor on every tensor-parallel rank (shape == logical_shape), else the concatenation of
  // `pieces` along split_dim (packed qkv and SwiGLU's fc have one piece per block).
  std::vector<int64_t> logical_shape;  // empty = shape (filled in by ParamLayout::add)
  int split_dim = -1;
  std::vector<ParamPiece> pieces;
  int unit = 0;  // FSDP unit: 0 = embeddings, final norm and LM head; 1 + i = layer i
  int64_t offset = 0;          // elements from the start of the allocation
  int64_t numel = 0;
  bool weight_decay = false;  // matrices and embeddings; not norms and biases
  bool matmul = false;        // counts as a matmul parameter (PaLM's N, for MFU)
  ParamInit init = ParamInit::kNormal;
  double init_std = 0;
};

// The layout table; every tensor starts on a 64-byte boundary (the padding between tensors stays
// zero in every buffer). Unsharded (shards = 1): parameters with weight decay come first, then
// those without, so each optimizer group is one contiguous range. FSDP (shards > 1): unit by
// unit, each unit padded to a multiple of 16 × shards elements so that it splits evenly; rank f
// of the fsdp group owns the f-th 1/shards of every unit.
class ParamLayout {
 public:
  struct Unit {
    int64_t begin = 0;  // elements
    int64_t size = 0;   // a multiple of 16 × shards
  };
  // Appends a parameter in declaration order, in the current unit; finalize() assigns the offsets.
  void add(ParamSpec spec);
  void set_unit(int unit) { unit_ = unit; }
  void finalize(int shards = 1);
  int shards() const { return shards_; }
  // By unit index (shards > 1 only; empty otherwise).
  const std::vector<Unit>& units() const { return units_; }

  const std::vector<ParamSpec>& specs() const { return specs_; }
  const ParamSpec* find(const std::string& name) const;  // nullptr when absent
  int64_t total() const { return total_; }               // elements, padding included
  int64_t decay_end() const { return decay_end_; }       // [0, decay_end) has weight decay
  int64_t num_parameters() const;                        // without padding
  int64_t num_matmul_parameters() const;

 private:
  std::vector<ParamSpec> specs_;
  std::vector<Unit> units_;
  int unit_ = 0;
  int shards_ = 1;
  int64_t total_ = 0;
  int64_t decay_end_ = 0;
};

// The mesh as a model sees it. Tensor parallelism (Megatron-style) splits heads, the MLP width
// and the vocabulary over `tensor`; FSDP shards parameters, gradients and optimizer state over
// `fsdp` and gathers one unit (a layer) at a time; gradients are summed over `data` (and over
// `fsdp` by the reduce-scatter). Communicators are borrowed; a collective that fails ends the
// process (exit status 1) with the communicator's message naming the missing rank.
struct ModelParallel {
  int tensor_rank = 0, tensor_size = 1;
  int fsdp_rank = 0, fsdp_size = 1;
  comm::Communicator* tensor = nullptr;  // required when tensor_size > 1
  comm::Communicator* fsdp = nullptr;    // required when fsdp_size > 1
  comm::Communicator* data = nullptr;    // optional: gradients are summed over it
  // Optional, fsdp > 1: a second communicator over the fsdp group. With it, a background thread
  // gathers the next layer while the current one computes (forward and backward); without it
  // every gather waits.
  comm::Communicator* fsdp_prefetch = nullptr;
};

// How a model trades memory for compute.
struct ModelOptions {
  // Activation recomputation per layer: keep only each layer's output (the residual stream) and
  // run a layer's forward pass again just before its backward pass, so the other activations of
  // all layers share one layer's worth of memory. Same results, about one more forward pass.
  bool recompute_layers = false;
};

// A run of this rank's parameter shard: elements [local_begin, local_begin + length) of the
// (tensor-parallel) parameter `spec`, stored at [shard_offset, shard_offset + length) of the flat
// shard buffers (params(), grads(), the optimizer's m and v).
struct OwnedRange {
  const ParamSpec* spec = nullptr;
  int64_t local_begin = 0;
  int64_t shard_offset = 0;
  int64_t length = 0;
};

// The view of one parameter inside a flat buffer laid out by `layout`.
Tensor param_view(const ParamSpec& spec, void* base, DType dtype = DType::kF32);

// Writes the initial values of every parameter into host (layout.total() floats): N(0, std)
// from a SplitMix64 stream per parameter (seeded by the run seed and the parameter's name) over
// the LOGICAL tensor, and Box-Muller, so values depend neither on thread count nor on the other
// parameters nor on how the tensor is split over tensor-parallel ranks.
void init_parameters(const ParamLayout& layout, uint64_t seed, std::span<float> host);

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
