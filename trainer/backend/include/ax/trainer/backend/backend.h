// The backend interface: memory, a queue, and every op as a forward/backward pair. Model code
// calls these and never tests #ifdefs. The CPU backend is the fp32 reference (and, as cpu-bf16,
// runs the CUDA backend's bf16 dtype plan); the CUDA backend computes with bf16 (or, when asked,
// f32) activations and fp32 master weights and optimizer state, on its stream.
//
// Conventions (as in llm.c):
//   - shapes: B batch, T sequence, C channels, N = B*T rows, OC output channels, Vp padded
//     vocabulary (storage), V real vocabulary, NH query heads, KVH key/value heads, HD head dim;
//   - every gradient output (`d...`) is ACCUMULATED into (+=); the caller zeroes it when needed,
//     so residual branches and micro-batches add up without extra copies;
//   - every op checks the shapes and dtypes of its views and aborts (AX_CHECK) on a mismatch: a
//     mismatch is a bug in model code, not a user error.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "ax/common/status.h"
#include "ax/trainer/backend/tensor.h"

namespace ax::train {

struct AdamWArgs {
  float lr = 0;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0;  // decoupled: p -= lr * wd * p
  int64_t step = 1;        // 1-based, for bias correction
  float grad_scale = 1;    // multiplies the gradient first (global-norm clipping)
};

// Bytes a backend holds: live allocations and their peak since creation.
class AllocationCounter {
 public:
  void on_alloc(const void* ptr, size_t bytes);
  void on_free(const void* ptr);
  size_t in_use() const;
  size_t peak() const;

 private:
  mutable std::mutex mu_;
  std::unordered_map<const void*, size_t> sizes_;
  size_t in_use_ = 0, peak_ = 0;
};

// The activation of a gated linear unit (glu_forward / glu_backward): SiLU (SwiGLU, Llama) or
// GELU with the tanh approximation (GeGLU: T5 v1.1's gated GELU, Hugging Face's `gelu_new`).
enum class Glu : uint8_t { kSwiGlu, kGeGlu };

// What an attention op reads besides its tensors (attention_forward / attention_backward).
// Queries are the first NH·HD columns of each row of `q`; keys are KVH·HD columns of each row of
// `kv` from `k_offset`, values the KVH·HD columns after them. Self-attention over a packed
// (B, T, (NH + 2·KVH)·HD) row passes the same tensor as q and kv with k_offset = NH·HD;
// cross-attention passes the decoder's queries and the encoder's packed keys and values.
struct AttentionSpec {
  int num_heads = 0;     // NH
  int num_kv_heads = 0;  // KVH; query head h reads key/value head h / (NH / KVH)
  bool causal = false;   // a query sees the keys whose position is not after its own
  float scale = 0;       // multiplies Q·Kᵀ (1/sqrt(HD) in GPT-style models)
  int64_t k_offset = 0;  // column of the first key head in a kv row
  // Positions in the whole sequence of query row 0 and key row 0 (rows are consecutive
  // positions): with `causal`, query i (position q_first_position + i) sees key j when
  // k_first_position + j <= q_first_position + i. Both 0 (self-attention over a whole row):
  // query i sees keys j <= i. A slice of a row (sequence parallelism, docs/sharding.md) sets
  // the slice's first position against the gathered row's keys; only their difference matters.
  int64_t q_first_position = 0;
  int64_t k_first_position = 0;
  // Optional, added to the scaled scores: (Bb, NH, Tq, Tk) in the activation dtype, Bb = 1 (the
  // same for every row of the batch) or B. T5's relative position bias.
  Tensor bias;
  // Optional, both or neither: (B, Tq) and (B, Tk) i32. A query and a key of different segments
  // never attend (padding, packed examples); a query that sees no key gets a zero output and
  // lse = -inf, and no gradient.
  Tensor q_segments, k_segments;
};

// What dropout_forward / dropout_backward read besides their tensors. Element (n, f) of an
// (N, F) input is kept when dropout_keep(seed, row_keys[n], feature_offset + f, threshold)
// (dropout_mask.h), and a kept element is multiplied by `scale`: the mask is a function of these
// numbers alone, the same on every backend, drawn again by the backward pass instead of stored.
struct DropoutSpec {
  uint64_t seed = 0;           // one per step, site and layer (docs/t5.md "Dropout")
  uint32_t threshold = 0;      // dropout_threshold(rate): drop when the element's bits are below
  float scale = 1;             // 1 / (1 - rate)
  int64_t feature_offset = 0;  // the first column's index in the whole (unsplit) feature axis
};

// The rotation of rope_forward / rope_backward: pair j of a head of HD columns turns by
// position · inv_freq[j], inv_freq[j] = theta^(-2j/HD), rescaled for a longer context by Llama
// 3.1's scheme (Hugging Face's rope_type "llama3") when `scaling` is kLlama3: a pair whose
// wavelength 2π/inv_freq exceeds original_max_positions / low_freq_factor turns `factor` times
// slower, one below original_max_positions / high_freq_factor keeps its frequency, and one
// between blends the two by s = (original_max_positions / wavelength - low_freq_factor) /
// (high_freq_factor - low_freq_factor): (1 - s) · inv_freq / factor + s · inv_freq.
struct RopeSpec {
  enum class Scaling : uint8_t { kNone, kLlama3 };
  double theta = 10000;
  Scaling scaling = Scaling::kNone;
  double factor = 1;  // kLlama3: factor > 0, high_freq_factor > low_freq_factor > 0
  double low_freq_factor = 1;
  double high_freq_factor = 1;
  double original_max_positions = 1;

  bool operator==(const RopeSpec&) const = default;
};
// The HD/2 inverse frequencies of `spec` in f64: the one definition both backends build their
// (cos, sin) tables from, so that the CPU and CUDA rotations agree.
std::vector<double> rope_inv_freq(const RopeSpec& spec, int64_t head_dim);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "cpu (2 threads, OpenBLAS)", "cuda:0 NVIDIA H100"
  // The dtype activations and compute weights use (f32 on CPU, bf16 or f32 on CUDA).
  virtual DType compute_dtype() const = 0;
  // Peak dense FLOP/s of the device for MFU, for the math this backend's GEMMs use (bf16 or
  // TF32 tensor cores, or f32 on CUDA cores); 0 when unknown.
  virtual double peak_flops() const = 0;
  // FLOPs of the matrix products (GEMMs, attention products) this backend has executed so far,
  // where it counts them (the CPU backends do; 0 otherwise): what MFU's model FLOPs must not
  // exceed, since the peak is a GEMM rate.
  virtual double executed_matmul_flops() const { return 0; }
  // The device's queue and ordinal for communicators that enqueue on it (NCCL): the CUDA
  // backend's cudaStream_t and device; nullptr / -1 on the CPU.
  virtual void* native_stream() const { return nullptr; }
  virtual int device_ordinal() const { return -1; }
  // The device's model as its driver names it ("NVIDIA H100 80GB HBM3"), what `ax-train plan`'s
  // GPU table is looked up by; empty on the CPU.
  virtual std::string device_model() const { return ""; }

  // Memory (device memory for CUDA). alloc returns zeroed memory or fails with ResourceExhausted.
  virtual StatusOr<void*> alloc(size_t bytes) = 0;
  virtual void free(void* ptr) = 0;
  // Bytes the backend holds now and at most since it was created: alloc()'s blocks plus its
  // own scratch (GEMM workspace, reduction buffers). A CUDA backend's peak is its peak GPU
  // memory apart from the CUDA context and library handles.
  size_t bytes_in_use() const { return allocations_.in_use(); }
  size_t peak_bytes_in_use() const { return allocations_.peak(); }
  virtual void copy_from_host(Tensor dst, const void* src) = 0;
  virtual void copy_to_host(void* dst, Tensor src) = 0;
  virtual void copy(Tensor dst, Tensor src) = 0;  // same shape; casts between f32 and bf16
  virtual void zero(Tensor t) = 0;
  virtual void synchronize() = 0;

  // out[b,t,:] = wte[tokens[b,t],:] (+ wpe[t,:] when wpe is not empty).
  // out (B,T,C), tokens (B,T) i32, wte (Vp,C), wpe (maxT,C) or empty. A token < 0 (a token
  // another tensor-parallel rank's vocabulary shard holds) gives a zero row (plus wpe) in the
  // forward pass and no wte gradient in the backward pass.
  virtual void embedding_forward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe) = 0;
  virtual void embedding_backward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens) = 0;

  // out (N,C), mean (N) f32, rstd (N) f32, inp (N,C), weight (C), bias (C) or empty.
  virtual void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight,
                                 Tensor bias, float eps) = 0;
  virtual void layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout,
                                  Tensor inp, Tensor weight, Tensor mean, Tensor rstd) = 0;

  // out (N,C), rstd (N) f32, inp (N,C), weight (C).
  virtual void rmsnorm_forward(Tensor out, Tensor rstd, Tensor inp, Tensor weight, float eps) = 0;
  virtual void rmsnorm_backward(Tensor dinp, Tensor dweight, Tensor dout, Tensor inp, Tensor weight,
                                Tensor rstd) = 0;

  // out = inp · weightᵀ + bias. out (N,OC), inp (N,C), weight (OC,C), bias (OC) or empty.
  virtual void matmul_forward(Tensor out, Tensor inp, Tensor weight, Tensor bias) = 0;
  // dinp (N,C) += dout · weight; dweight (OC,C) += doutᵀ · inp; dbias (OC) += Σ dout.
  // dinp or dbias may be empty (not needed).
  virtual void matmul_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                               Tensor weight) = 0;

  // Rotary embedding on the query and key heads of a packed qkv tensor; value heads are copied.
  // out, inp (B,T,(NH+2*KVH)*HD); pairs (i, i+HD/2) of row t rotate by angle
  // (first_position + t) * rope_inv_freq(rope, HD)[i]: first_position is 0 in training, the
  // cache slot when decoding.
  virtual void rope_forward(Tensor out, Tensor inp, int num_heads, int num_kv_heads,
                            const RopeSpec& rope, int64_t first_position) = 0;
  virtual void rope_backward(Tensor dinp, Tensor dout, int num_heads, int num_kv_heads,
                             const RopeSpec& rope, int64_t first_position) = 0;

  // Dot-product attention (AttentionSpec says which columns are Q, K and V, and the scale, mask
  // and bias). out (B,Tq,NH*HD); lse (B,NH,Tq) f32 saves the softmax log-sum-exp for the backward
  // pass; q (B,Tq,Rq), kv (B,Tk,Rkv).
  virtual void attention_forward(Tensor out, Tensor lse, Tensor q, Tensor kv,
                                 const AttentionSpec& spec) = 0;
  // dq (like q) += into its query columns, dkv (like kv) += into its key and value columns (dq
  // and dkv may be the same tensor); dbias (like spec.bias, f32) += the bias gradient, or empty.
  virtual void attention_backward(Tensor dq, Tensor dkv, Tensor dbias, Tensor dout, Tensor out,
                                  Tensor lse, Tensor q, Tensor kv, const AttentionSpec& spec) = 0;

  // GELU, tanh approximation. out, inp (N,F).
  virtual void gelu_forward(Tensor out, Tensor inp) = 0;
  virtual void gelu_backward(Tensor dinp, Tensor dout, Tensor inp) = 0;
  // Gated linear unit: out (N,F) = act(inp[:, :F]) * inp[:, F:], inp (N,2F) (the gate, then the
  // up projection), act = silu (Glu::kSwiGlu) or gelu_forward's GELU (Glu::kGeGlu).
  virtual void glu_forward(Tensor out, Tensor inp, Glu glu) = 0;
  // dinp (N,2F) += the gradients of the gate and of the up projection; dout (N,F).
  virtual void glu_backward(Tensor dinp, Tensor dout, Tensor inp, Glu glu) = 0;

  // Dropout (DropoutSpec): out (N,F) = inp · keep · scale; out may be inp. row_keys (N) i32,
  // one key per row (its bits, as uint32).
  virtual void dropout_forward(Tensor out, Tensor inp, Tensor row_keys,
                               const DropoutSpec& spec) = 0;
  // dinp (N,F) += dout · keep · scale.
  virtual void dropout_backward(Tensor dinp, Tensor dout, Tensor row_keys,
                                const DropoutSpec& spec) = 0;

  // out = a + b (the residual stream), same shapes.
  virtual void add_forward(Tensor out, Tensor a, Tensor b) = 0;

  // T5's relative position bias, the AttentionSpec::bias of a stack's self-attention:
  // bias[b,h,i,j] = table[buckets[b,i,j], h]. bias (Bb,NH,Tq,Tk) and table (num_buckets,NH), a
  // compute weight, in the activation dtype; buckets (Bb,Tq,Tk) i32, each in [0, num_buckets).
  // A bucket outside is a bug: the CPU aborts; CUDA (whose ids live on the device) never reads
  // past the table and gives that element a NaN bias.
  virtual void position_bias_forward(Tensor bias, Tensor table, Tensor buckets) = 0;
  // dtable (num_buckets,NH) f32 += for each bucket k and head h the sum of dbias[b,h,i,j] over
  // the (b,i,j) with buckets[b,i,j] = k; dbias (Bb,NH,Tq,Tk) f32 (attention_backward's). The
  // same bits on every run (no float atomics); CUDA skips a bucket outside the table.
  virtual void position_bias_backward(Tensor dtable, Tensor dbias, Tensor buckets) = 0;

  // Softmax cross-entropy over the first V columns of logits (N,Vp); targets (N) i32, a target
  // < 0 is ignored (loss 0, no gradient). A target >= V is a bug Model::forward refuses on the
  // host; should one reach a backend, the CPU aborts and CUDA (whose ids live on the device)
  // never reads it and gives its row a NaN loss and NaN gradients. losses (N) f32:
  // lse - logit[target] + z_loss * lse², lse = log Σ exp over the real columns (z_loss >= 0 is
  // T5x's auxiliary z-loss; with z_loss = 0 the term is not computed at all).
  virtual void cross_entropy_forward(Tensor losses, Tensor logits, Tensor targets, int64_t V,
                                     float z_loss) = 0;
  // dlogits (N,Vp) = ((1 + 2·z_loss·lse) · softmax(logits) - onehot(target)) * dloss for the
  // first V columns, 0 for padded columns. Overwrites (does not accumulate) and may alias
  // logits, so the full logits are never kept twice.
  virtual void cross_entropy_backward(Tensor dlogits, Tensor logits, Tensor targets, int64_t V,
                                      float dloss, float z_loss) = 0;

  // Vocabulary-parallel cross-entropy (tensor parallelism): logits (N,Vl) hold the columns
  // [v_begin, v_begin + Vl) of the padded vocabulary, of which the first v_count (0 <= v_count
  // <= Vl) are real. Targets (N) i32 are global ids (< 0 ignored). The caller combines the
  // shards: all-reduce(max) of rowmax, then all-reduce(sum) of sums, then
  // lse = max + log(sums[:,0]) and loss = lse - sums[:,1] (+ z_loss · lse²).
  // rowmax (N) f32 = max over the real columns (-inf when v_count == 0).
  virtual void ce_shard_max(Tensor rowmax, Tensor logits, int64_t v_count) = 0;
  // sums (N,2) f32: [:,0] = Σ exp(x - rowmax) over the real columns, [:,1] = the target's logit
  // when the target lies in [v_begin, v_begin + v_count), else 0. rowmax (N) f32 is the global max.
  virtual void ce_shard_sums(Tensor sums, Tensor logits, Tensor rowmax, Tensor targets,
                             int64_t v_begin, int64_t v_count) = 0;
  // dlogits (N,Vl) = ((1 + 2·z_loss·lse) · exp(x - lse) - [column is the target]) * dloss over
  // the real columns, 0 over the padded ones and on rows whose target is ignored. Overwrites;
  // may alias logits.
  virtual void ce_shard_backward(Tensor dlogits, Tensor logits, Tensor lse, Tensor targets,
                                 int64_t v_begin, int64_t v_count, float dloss, float z_loss) = 0;

  // Σ x² in f64 precision over one tensor (for the global gradient norm).
  virtual double sum_squares(Tensor x) = 0;
  // In-place AdamW on f32 params / grads / m / v of one parameter group.
  virtual void adamw_update(Tensor params, Tensor grads, Tensor m, Tensor v,
                            const AdamWArgs& args) = 0;

 protected:
  AllocationCounter allocations_;  // implementations report every block they allocate
};

// The fp32 reference backend. threads = 0: all cores.
std::unique_ptr<Backend> make_cpu_backend(int threads = 0);
// The CPU backend in the CUDA backend's dtype plan (bf16 activations and compute weights, f32
// statistics, parameter gradients and optimizer state): the reference ops on values widened
// from bf16, each bf16 output rounded once to nearest even (`--device cpu-bf16`).
std::unique_ptr<Backend> make_cpu_bf16_backend(int threads = 0);

// CUDA devices that answer; 0 when this build has no CUDA backend or no GPU (or driver) answers.
int cuda_device_count();
// How the CUDA backend computes (docs/cuda-backend.md "Dtype plans").
struct CudaBackendOptions {
  // Activations, their gradients and compute weights: kBF16 (the default) or kF32
  // (train.precision=float32). Statistics, parameter gradients, masters and optimizer state are
  // f32 either way.
  DType act = DType::kBF16;
  // With f32 activations, GEMMs may round their inputs to TF32 on tensor cores
  // (train.allow_tf32); otherwise they multiply in full f32. No effect with bf16 activations.
  bool allow_tf32 = false;
  // Attention on tensor cores (bf16 products, f32 sums) for the calls its kernels take (bf16,
  // head size a multiple of 16 up to 128, 16-byte aligned rows; segments and a bias too:
  // docs/cuda-backend.md "Attention kernels");
  // false, or AX_CUDA_ATTENTION=cuda-cores in the environment: the f32 CUDA-core kernels for
  // every call.
  bool tensor_core_attention = true;
};
// AX_CUDA_ATTENTION, an environment knob (`--help-env`): false for "cuda-cores", true for
// "tensor-cores" or unset; InvalidArgument naming the variable for any other value.
StatusOr<bool> tensor_core_attention_from_env();
// The CUDA backend on one device. FailedPrecondition "no CUDA device (...)" when none answers or
// the build has no CUDA backend; InvalidArgument for an ordinal that does not exist or an
// activation dtype other than bf16 and f32.
StatusOr<std::unique_ptr<Backend>> make_cuda_backend(int device,
                                                     const CudaBackendOptions& options = {});

}  // namespace ax::train
