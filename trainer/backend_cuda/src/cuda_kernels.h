// Host launchers of the CUDA backend's kernels (defined in the .cu files beside this one). Plain
// pointers and sizes: the backend (cuda_ops.cc) has checked the views. Every launcher enqueues on
// `stream` (last argument) and returns at once, except sum_squares, which waits for its result.
//
// Act is the activation type of the backend's dtype plan, bf16 or float (each .cu instantiates
// both): activations, their gradients and compute weights are Act; statistics, parameter
// gradients and the optimizer state are f32. Kernels compute in f32 and round once when they
// store a bf16. Gradients accumulate (+=) as backend.h says.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "ax/trainer/backend/adamw_scalars.h"

namespace ax::train::cuda {

using bf16 = __nv_bfloat16;

// ---- cuda_norms.cu: embedding, LayerNorm, RMSNorm, column reductions ----

// out (B,T,C) = wte[tokens] (+ wpe[t]); a token < 0 gives a zero row (plus wpe).
template <typename Act>
void embedding_forward(Act* out, const int32_t* tokens, const Act* wte, const Act* wpe, int64_t B,
                       int64_t T, int64_t C, cudaStream_t stream);
// dwte (Vp,C) += scatter of dout by token (f32 atomics); dwpe (maxT,C) += dout[b,t] for b in
// order, as the CPU backend adds them (the same bits), when not null.
template <typename Act>
void embedding_backward(float* dwte, float* dwpe, const Act* dout, const int32_t* tokens, int64_t B,
                        int64_t T, int64_t C, cudaStream_t stream);

// One warp per row. mean == nullptr selects RMSNorm (and bias must be null).
template <typename Act>
void norm_forward(Act* out, float* mean, float* rstd, const Act* inp, const Act* weight,
                  const Act* bias, int64_t N, int64_t C, float eps, cudaStream_t stream);
// dinp (N,C) += the input gradient of LayerNorm (mean != nullptr) or RMSNorm.
template <typename Act>
void norm_backward_inputs(Act* dinp, const Act* dout, const Act* inp, const Act* weight,
                          const float* mean, const float* rstd, int64_t N, int64_t C,
                          cudaStream_t stream);
// Column sums over N rows (any N), deterministic (fixed row chunks, then the chunks in order):
//   dweight (C) += Σ_n dout · norm, norm = (inp - mean) · rstd (mean null: inp · rstd);
//   dbias (C) += Σ_n dout.
// Either output may be null (dweight null: inp, mean, rstd are not read). `scratch` holds
// column_grads_scratch_floats(N, C) floats.
template <typename Act>
void column_grads(float* dweight, float* dbias, const Act* dout, const Act* inp, const float* mean,
                  const float* rstd, int64_t N, int64_t C, float* scratch, cudaStream_t stream);
int64_t column_grads_scratch_floats(int64_t N, int64_t C);
// The largest grid.y column_grads launches (CUDA's limit); more row chunks loop.
inline constexpr int64_t kMaxGridY = 65535;

// ---- cuda_pointwise.cu: casts, GELU, gated linear units, add, RoPE, cross-entropy, optimizer ----

void cast_f32_to_bf16(bf16* dst, const float* src, int64_t n, cudaStream_t stream);
void cast_bf16_to_f32(float* dst, const bf16* src, int64_t n, cudaStream_t stream);

template <typename Act>
void gelu_forward(Act* out, const Act* inp, int64_t n, cudaStream_t stream);
template <typename Act>
void gelu_backward(Act* dinp, const Act* dout, const Act* inp, int64_t n, cudaStream_t stream);
// out (N,F) = act(inp[:, :F]) · inp[:, F:], inp (N,2F); act = GELU (tanh approximation, as
// gelu_forward) when `gelu` (GeGLU), else SiLU (SwiGLU).
template <typename Act>
void glu_forward(Act* out, const Act* inp, int64_t N, int64_t F, bool gelu, cudaStream_t stream);
template <typename Act>
void glu_backward(Act* dinp, const Act* dout, const Act* inp, int64_t N, int64_t F, bool gelu,
                  cudaStream_t stream);
// Dropout (Backend::dropout_forward / dropout_backward, DropoutSpec): out (N,F) = inp · keep ·
// scale, out may be inp; dinp (N,F) += dout · keep · scale; row_keys (N).
struct DropoutArgs {
  uint64_t seed;
  uint32_t threshold;
  float scale;
  int64_t feature_offset;
};
template <typename Act>
void dropout_forward(Act* out, const Act* inp, const int32_t* row_keys, int64_t N, int64_t F,
                     DropoutArgs args, cudaStream_t stream);
template <typename Act>
void dropout_backward(Act* dinp, const Act* dout, const int32_t* row_keys, int64_t N, int64_t F,
                      DropoutArgs args, cudaStream_t stream);
// The residual stream (Act) and FSDP's reduce-scattered f32 gradient shards.
template <typename Act>
void add_forward(Act* out, const Act* a, const Act* b, int64_t n, cudaStream_t stream);

// Rows of R = (NH + 2·KVH)·HD values; the first `rotated` heads turn by the table's angle of
// their position, the rest are copied (forward) or passed through (backward, +=). `cos_sin`
// holds (cos, sin) pairs, f32, at [2·(t·HD/2 + j)]: its layout does not depend on the T of the
// call, so one table serves every T up to the one it was built for.
template <typename Act>
void rope_forward(Act* out, const Act* inp, const float* cos_sin, int64_t B, int64_t T, int64_t R,
                  int64_t rotated, int64_t HD, cudaStream_t stream);
template <typename Act>
void rope_backward(Act* dinp, const Act* dout, const float* cos_sin, int64_t B, int64_t T,
                   int64_t R, int64_t rotated, int64_t HD, cudaStream_t stream);

// One block per row of logits (N,Vp); the first V columns are real. A target < 0 is ignored
// (loss 0, a zero gradient row); a target >= V is never read: its row's loss and gradient are
// NaN, so a bad id shows in the loss instead of reading past the row. z_loss > 0 adds
// z_loss · lse² to the loss (and its gradient); 0 skips the term.
template <typename Act>
void cross_entropy_forward(float* losses, const Act* logits, const int32_t* targets, int64_t N,
                           int64_t V, int64_t Vp, float z_loss, cudaStream_t stream);
// Overwrites dlogits; it may be logits itself.
template <typename Act>
void cross_entropy_backward(Act* dlogits, const Act* logits, const int32_t* targets, int64_t N,
                            int64_t V, int64_t Vp, float dloss, float z_loss, cudaStream_t stream);
template <typename Act>
void ce_shard_max(float* rowmax, const Act* logits, int64_t N, int64_t Vl, int64_t v_count,
                  cudaStream_t stream);
template <typename Act>
void ce_shard_sums(float* sums, const Act* logits, const float* rowmax, const int32_t* targets,
                   int64_t N, int64_t Vl, int64_t v_begin, int64_t v_count, cudaStream_t stream);
template <typename Act>
void ce_shard_backward(Act* dlogits, const Act* logits, const float* lse, const int32_t* targets,
                       int64_t N, int64_t Vl, int64_t v_begin, int64_t v_count, float dloss,
                       float z_loss, cudaStream_t stream);

// Σ x² with f64 products and sums in a fixed order (the same value on every run). `scratch`
// holds kSumSquaresBlocks + 1 doubles. Waits for the stream.
inline constexpr int kSumSquaresBlocks = 512;
double sum_squares(const float* x, int64_t n, double* scratch, cudaStream_t stream);

// The scalars of one AdamW step (ax/trainer/adamw_scalars.h): ax::train::adamw_scalars
// derives them on the host, the same for every backend.
void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n,
                  const AdamWScalars& s, cudaStream_t stream);

// ---- cuda_position_bias.cu: T5's relative position bias ----

// bias (Bb,NH,Tq,Tk)[b,h,i,j] = table (num_buckets,NH)[buckets[b,i,j], h]; buckets (Bb,Tq,Tk).
// A bucket outside [0, num_buckets) is never read: NaN.
template <typename Act>
void position_bias_forward(Act* bias, const Act* table, const int32_t* buckets, int64_t Bb,
                           int64_t NH, int64_t Tq, int64_t Tk, int64_t num_buckets,
                           cudaStream_t stream);
// dtable (num_buckets,NH) f32 += the per-bucket sums of dbias (Bb,NH,Tq,Tk) f32 in a fixed order
// (no atomics); a bucket outside the table is skipped. `scratch` holds
// position_bias_scratch_floats(Bb, NH, Tq, num_buckets) floats; num_buckets is at most
// position_bias_max_buckets() (one warp's accumulators fill the default shared memory).
void position_bias_backward(float* dtable, const float* dbias, const int32_t* buckets, int64_t Bb,
                            int64_t NH, int64_t Tq, int64_t Tk, int64_t num_buckets, float* scratch,
                            cudaStream_t stream);
int64_t position_bias_scratch_floats(int64_t Bb, int64_t NH, int64_t Tq, int64_t num_buckets);
int64_t position_bias_max_buckets();

// ---- cuda_attention.cu: flash-style attention (backend.h AttentionSpec) ----

// Queries are the first NH·HD columns of q's rows (B, Tq, Rq); keys are KVH·HD columns of kv's
// rows (B, Tk, Rkv) from column k_offset, values the KVH·HD columns after them. Query head h
// reads key/value head h / (NH / KVH). causal: query i sees keys j <= i + causal_shift.
struct AttnShape {
  int64_t B, Tq, Tk, NH, KVH, HD, Rq, Rkv, k_offset;
  float scale;  // multiplies Q·Kᵀ
  bool causal;
  int64_t causal_shift;  // AttentionSpec's q_first_position - k_first_position
  // The device's shared memory per block when the tensor-core kernels (attention_tc.h) may take
  // the call, 0 when they may not (disabled, or a device before sm_80): then, and for calls they
  // do not take (tc::eligible), the f32 CUDA-core kernels run.
  size_t tensor_core_shared = 0;
};
// The optional inputs, null when absent: a bias (bias_batch = 1 or B, NH, Tq, Tk) added to the
// scaled scores, and segment ids q_segments (B, Tq) and k_segments (B, Tk), both or neither (a
// query never sees a key of another segment). Without them the kernels compiled without masks
// run, which read nothing more than plain attention.
template <typename Act>
struct AttnMasks {
  const Act* bias = nullptr;
  int64_t bias_batch = 0;
  const int32_t* q_segments = nullptr;
  const int32_t* k_segments = nullptr;
  bool present() const { return bias != nullptr || q_segments != nullptr; }
};
inline constexpr int64_t kAttnMaxHeadDim = 256;
// Shared memory one block of the f32 attention kernels needs for a head size (the largest of the
// kernels); the device must offer it per block.
size_t attention_shared_bytes(int64_t head_dim);
// Lets the kernels (both activation types, and the tensor-core kernels) use up to
// `max_shared_bytes` of dynamic shared memory (the device's opt-in limit). Once per device,
// before the first attention launch.
void attention_init(size_t max_shared_bytes);
// out (B,Tq,NH·HD), lse (B,NH,Tq) f32. A query that sees no key gets zeros and lse = -inf.
template <typename Act>
void attention_forward(Act* out, float* lse, const Act* q, const Act* kv, const AttnShape& s,
                       const AttnMasks<Act>& masks, cudaStream_t stream);
// `scratch` of attention_backward holds attention_backward_scratch_floats (attention_plan.h).
// dq += into q's query columns, dkv += into kv's key and value columns (dq and dkv may be the
// same tensor: the columns are disjoint); dbias (bias_batch, NH, Tq, Tk) f32 += the bias
// gradient, or null. Deterministic: no atomics, every sum in a fixed order.
template <typename Act>
void attention_backward(Act* dq, Act* dkv, float* dbias, const Act* dout, const Act* out,
                        const float* lse, const Act* q, const Act* kv, float* scratch,
                        const AttnShape& s, const AttnMasks<Act>& masks, cudaStream_t stream);

}  // namespace ax::train::cuda
