// A model's parameters apart from the network that computes with them (docs/trainer.md "The
// parameter store"): the layout table, this rank's f32 master and gradient shards, the
// compute-dtype weights a network reads (with FSDP gathered one unit at a time, the next one
// prefetched), the reduce-scatter of each unit's gradients, the gradient norm over the mesh, the
// data-parallel gradient sum, and access by name. The optimizer, the train state and the
// checkpoints work on the store; networks (decoder LM, encoder-decoder) declare their parameters
// in a layout, unit by unit, and bind views of them.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "ax/common/status.h"
#include "ax/trainer/backend/backend.h"
#include "ax/trainer/backend/tensor.h"

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
  // FSDP unit, in the order the network computes them: 0 stays gathered for the whole step (a
  // decoder LM's embeddings, final norm and head), 1.. one at a time (a layer each).
  int unit = 0;
  int64_t offset = 0;  // elements from the start of the allocation
  int64_t numel = 0;
  bool weight_decay = false;  // matrices and embeddings; not norms and biases
  bool matmul = false;        // counts as a matmul parameter (PaLM's N, for MFU)
  // The pipeline stages (ranks of the pipeline group, ascending) that hold this parameter when
  // more than one does: a tied embedding table on the first and the last stage, T5's token table
  // on the stages that embed the encoder's and the decoder's tokens, a T5 relative-bias table on
  // every stage with a layer of its stack. Its gradient is summed over them before the
  // optimizer, so the copies stay identical, and the gradient norm counts it on the first of
  // them (docs/sharding.md "Pipeline parallelism"). Empty (or one stage): this stage's alone.
  std::vector<int> pipeline_stages;
  bool pipeline_shared() const { return pipeline_stages.size() > 1; }
  ParamInit init = ParamInit::kNormal;
  double init_std = 0;
};

// The layout table; every tensor starts on a 64-byte boundary (the padding between tensors stays
// zero in every buffer). Unsharded (shards = 1): parameters with weight decay come first, then
// those without, so each optimizer group is one contiguous range. FSDP (shards > 1): unit by
// unit, each unit padded to a multiple of 16 × shards elements so that it splits evenly; rank f
// of the fsdp group owns the f-th 1/shards of every unit (of each of its head's parameters and of
// the rest, when the unit has pipeline_shared() parameters, which come first as its head).
class ParamLayout {
 public:
  struct Unit {
    int64_t begin = 0;  // elements
    int64_t size = 0;   // a multiple of 16 × shards
    // The unit's first `head` elements (a multiple of 16 × shards; 0 = none) are its
    // pipeline_shared() parameters, each padded to a multiple of 16 × shards and sharded on its
    // own, apart from the rest: fsdp rank f of every stage that holds one owns the same elements
    // of it although the stages' other unit-0 parameters differ.
    int64_t head = 0;
  };
  // FSDP: the parts of unit u sharded each on its own ({begin, size}, head 0): each
  // pipeline_shared() parameter of its head, then the rest; none for an empty unit (a middle
  // stage's unit 0). block_of: the one `spec` lies in.
  std::vector<Unit> blocks(int u) const;
  Unit block_of(const ParamSpec& spec) const;
  // Appends a parameter in declaration order, in the current unit; finalize() assigns the offsets.
  void add(ParamSpec spec);
  void set_unit(int unit) { unit_ = unit; }
  // Before finalize(): the pipeline stages that hold parameter `name` (ParamSpec::pipeline_stages).
  void share(const std::string& name, std::vector<int> stages);
  void finalize(int shards = 1);
  int shards() const { return shards_; }
  // By unit index (shards > 1 only; empty otherwise).
  const std::vector<Unit>& units() const { return units_; }
  int num_units() const;  // 1 + the highest unit any parameter is in

  const std::vector<ParamSpec>& specs() const { return specs_; }
  const ParamSpec* find(const std::string& name) const;  // nullptr when absent
  int64_t total() const { return total_; }               // elements, padding included
  int64_t decay_end() const { return decay_end_; }       // [0, decay_end) has weight decay
  int64_t num_parameters() const;                        // without padding
  int64_t num_matmul_parameters() const;

 private:
  std::vector<ParamSpec> specs_;
  std::unordered_map<std::string, size_t> index_;  // name -> specs_ index (find, add)
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
// process with the communicator's message naming the missing rank (comm::collective_or_die).
struct ModelParallel {
  int tensor_rank = 0, tensor_size = 1;
  int fsdp_rank = 0, fsdp_size = 1;
  // Pipeline parallelism: this rank's network is stage pipeline_rank of pipeline_size (a
  // contiguous range of layers); `pipeline` (required when pipeline_size > 1) joins the stages
  // of one pipeline in order: activations and gradients go to the neighbours over it, and the
  // gradient norm and the loss are summed over it.
  int pipeline_rank = 0, pipeline_size = 1;
  comm::Communicator* pipeline = nullptr;
  // Sequence parallelism: this rank holds slice seq_rank of seq_size of every row; `seq`
  // (required when seq_size > 1) joins the slices: attention gathers keys and values over it,
  // and gradients are summed over it as over `data` (parameters are replicated across it).
  int seq_rank = 0, seq_size = 1;
  comm::Communicator* seq = nullptr;
  comm::Communicator* tensor = nullptr;  // required when tensor_size > 1
  comm::Communicator* fsdp = nullptr;    // required when fsdp_size > 1
  comm::Communicator* data = nullptr;    // optional: gradients are summed over it
  // Optional, fsdp > 1: a second communicator over the fsdp group on which the next unit is
  // gathered while the current one computes; without it every gather waits.
  comm::Communicator* fsdp_prefetch = nullptr;
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

// A parameter's compute-dtype weights and f32 gradient, as a network reads and accumulates them;
// both empty when the parameter is absent (a linear layer without bias).
struct ParamViews {
  Tensor w;
  Tensor dw;
};

// The bytes of the buffers ParamStore::create allocates on one rank for a finalized layout:
// what `ax-train plan` counts instead of allocating (docs/plan.md).
struct StoreBytes {
  size_t master = 0;     // f32 master weights, this rank's shard
  size_t gradients = 0;  // f32 gradients, this rank's shard
  size_t compute = 0;    // unsharded, non-f32 backend: the compute-dtype copy of the weights
  size_t gathered = 0;   // FSDP: unit 0's weights and gradients, two layer slots of each
  size_t scratch = 0;    // FSDP: one unit's shard for the reduce-scatter and casts; reductions
  size_t total() const { return master + gradients + compute + gathered + scratch; }
};
StoreBytes store_bytes(const ParamLayout& finalized, DType compute_dtype);

class ParamStore {
 public:
  // `layout` holds the network's declarations (not finalized); create() finalizes it for
  // parallel.fsdp_size shards and allocates this rank's buffers (zeros; init() fills them).
  static StatusOr<std::unique_ptr<ParamStore>> create(ParamLayout layout, Backend* backend,
                                                      const ModelParallel& parallel);
  ~ParamStore();
  ParamStore(const ParamStore&) = delete;
  ParamStore& operator=(const ParamStore&) = delete;

  const ParamLayout& layout() const;
  Backend* backend() const;
  const ModelParallel& parallel() const;
  bool sharded() const;  // tensor_size, fsdp_size or pipeline_size > 1

  // The views of parameter `name` ("" = none: empty views). With FSDP they point into the buffer
  // of the parameter's unit, which holds that unit's weights after gather(unit).
  ParamViews views(const std::string& name) const;

  // FSDP (nothing to do otherwise). gather(u): unit u's weights are in place (its prefetch waited
  // for, or gathered now); unit 0 stays until the weights change. prefetch(u): starts gathering
  // unit u >= 1 (no-op out of range or without a prefetch communicator); the buffer it lands in
  // must not be the one in use: prefetch the unit after the current one in the direction of the
  // pass. release(u): reduce-scatters unit u's gradients into this rank's shard (+=) and zeroes
  // the unit's gradient buffer. Units alternate between two buffers: (u - 1) % 2.
  void gather(int unit);
  void prefetch(int unit);
  void release(int unit);

  // This rank's shard of the f32 masters and gradients (layout().total() / fsdp elements).
  Tensor params() const;
  Tensor grads() const;
  // Where each parameter's part of this rank lies in the shard buffers, in layout order.
  std::vector<OwnedRange> owned() const;
  // Σ g² over the whole model (every shard and stage, a replicated parameter and a tied table
  // counted once): collective over the tensor, fsdp and pipeline groups.
  double grad_sum_squares() const;
  // After the last micro-batch of a step: sums the gradients over the data and seq groups, and a
  // pipeline_shared() parameter's over the stages that hold it.
  void reduce_gradients();
  void zero_grad();
  // Refreshes the compute-dtype copy of the weights after the masters changed (nothing to do
  // when the backend computes in f32 without FSDP); drops gathered units.
  void sync_compute_weights();
  // Masters from init_parameters(seed), then sync_compute_weights().
  void init(uint64_t seed);

  // Host copies by parameter name (NotFound for an unknown name; FailedPrecondition when the
  // store is sharded, since no single rank holds whole parameters).
  StatusOr<std::vector<float>> parameter(const std::string& name) const;
  StatusOr<std::vector<float>> gradient(const std::string& name) const;
  Status set_parameter(const std::string& name, std::span<const float> values);

 private:
  class Impl;
  explicit ParamStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ax::train
