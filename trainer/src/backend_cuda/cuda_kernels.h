// Host launchers of the CUDA backend's kernels (defined in the .cu files beside this one). Plain
// pointers and sizes: the backend (cuda_backend.cc) has checked the views. Every launcher
// enqueues on `stream` (last argument) and returns at once, except sum_squares, which waits for
// its result. Activations and compute weights are bf16; statistics, parameter gradients and the
// optimizer state are f32. Gradients accumulate (+=) as backend.h says.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "ax/trainer/adamw_scalars.h"

namespace ax::train::cuda {

using bf16 = __nv_bfloat16;

// ---- cuda_norms.cu: embedding, LayerNorm, RMSNorm, column reductions ----

// out (B,T,C) = wte[tokens] (+ wpe[t]); a token < 0 gives a zero row (plus wpe).
void embedding_forward(bf16* out, const int32_t* tokens, const bf16* wte, const bf16* wpe,
                       int64_t B, int64_t T, int64_t C, cudaStream_t stream);
// dwte (Vp,C) += scatter of dout by token (f32 atomics); dwpe (maxT,C) += Σ_b dout[b,t] in
// batch order (deterministic), when not null.
void embedding_backward(float* dwte, float* dwpe, const bf16* dout, const int32_t* tokens,
                        int64_t B, int64_t T, int64_t C, cudaStream_t stream);

// One warp per row. mean == nullptr selects RMSNorm (and bias must be null).
void norm_forward(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* weight,
                  const bf16* bias, int64_t N, int64_t C, float eps, cudaStream_t stream);
// dinp (N,C) += the input gradient of LayerNorm (mean != nullptr) or RMSNorm.
void norm_backward_inputs(bf16* dinp, const bf16* dout, const bf16* inp, const bf16* weight,
                          const float* mean, const float* rstd, int64_t N, int64_t C,
                          cudaStream_t stream);
// Column sums over N rows, deterministic (fixed row chunks, then the chunks in order):
//   dweight (C) += Σ_n dout · norm, norm = (inp - mean) · rstd (mean null: inp · rstd);
//   dbias (C) += Σ_n dout.
// Either output may be null (dweight null: inp, mean, rstd are not read). `scratch` holds
// column_grads_scratch_floats(N, C) floats.
void column_grads(float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                  const float* mean, const float* rstd, int64_t N, int64_t C, float* scratch,
                  cudaStream_t stream);
int64_t column_grads_scratch_floats(int64_t N, int64_t C);

// ---- cuda_pointwise.cu: casts, GELU, SwiGLU, add, RoPE, cross-entropy, optimizer ----

void cast_f32_to_bf16(bf16* dst, const float* src, int64_t n, cudaStream_t stream);
void cast_bf16_to_f32(float* dst, const bf16* src, int64_t n, cudaStream_t stream);

void gelu_forward(bf16* out, const bf16* inp, int64_t n, cudaStream_t stream);
void gelu_backward(bf16* dinp, const bf16* dout, const bf16* inp, int64_t n, cudaStream_t stream);
// out (N,F) = silu(inp[:, :F]) · inp[:, F:], inp (N,2F).
void swiglu_forward(bf16* out, const bf16* inp, int64_t N, int64_t F, cudaStream_t stream);
void swiglu_backward(bf16* dinp, const bf16* dout, const bf16* inp, int64_t N, int64_t F,
                     cudaStream_t stream);
void add_forward(bf16* out, const bf16* a, const bf16* b, int64_t n, cudaStream_t stream);
// f32 (FSDP's reduce-scattered gradient shards).
void add_forward(float* out, const float* a, const float* b, int64_t n, cudaStream_t stream);

// Rows of R = (NH + 2·KVH)·HD values; the first `rotated` heads turn by the table's angle of
// their position (cos_sin: (T, HD/2) cos then (T, HD/2) sin, f32), the rest are copied
// (forward) or passed through (backward, +=).
void rope_forward(bf16* out, const bf16* inp, const float* cos_sin, int64_t B, int64_t T, int64_t R,
                  int64_t rotated, int64_t HD, cudaStream_t stream);
void rope_backward(bf16* dinp, const bf16* dout, const float* cos_sin, int64_t B, int64_t T,
                   int64_t R, int64_t rotated, int64_t HD, cudaStream_t stream);

// One block per row of logits (N,Vp); the first V columns are real.
void cross_entropy_forward(float* losses, const bf16* logits, const int32_t* targets, int64_t N,
                           int64_t V, int64_t Vp, cudaStream_t stream);
// Overwrites dlogits; it may be logits itself.
void cross_entropy_backward(bf16* dlogits, const bf16* logits, const int32_t* targets, int64_t N,
                            int64_t V, int64_t Vp, float dloss, cudaStream_t stream);
void ce_shard_max(float* rowmax, const bf16* logits, int64_t N, int64_t Vl, int64_t v_count,
                  cudaStream_t stream);
void ce_shard_sums(float* sums, const bf16* logits, const float* rowmax, const int32_t* targets,
                   int64_t N, int64_t Vl, int64_t v_begin, int64_t v_count, cudaStream_t stream);
void ce_shard_backward(bf16* dlogits, const bf16* logits, const float* lse, const int32_t* targets,
                       int64_t N, int64_t Vl, int64_t v_begin, int64_t v_count, float dloss,
                       cudaStream_t stream);

// Σ x² with f64 products and sums in a fixed order (the same value on every run). `scratch`
// holds kSumSquaresBlocks + 1 doubles. Waits for the stream.
inline constexpr int kSumSquaresBlocks = 512;
double sum_squares(const float* x, int64_t n, double* scratch, cudaStream_t stream);

// The scalars of one AdamW step (ax/trainer/adamw_scalars.h): ax::train::adamw_scalars
// derives them on the host, the same for every backend.
void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n,
                  const AdamWScalars& s, cudaStream_t stream);

// ---- cuda_attention.cu: flash-style attention over a packed qkv ----

struct AttnShape {
  int64_t B, T, NH, KVH, HD;
  bool causal;
};
inline constexpr int64_t kAttnMaxHeadDim = 256;
// Shared memory one block of the attention kernels needs for a head size (the largest of the
// three kernels); the device must offer it per block.
size_t attention_shared_bytes(int64_t head_dim);
// Lets the kernels use up to `max_shared_bytes` of dynamic shared memory (the device's opt-in
// limit). Once per device, before the first attention launch.
void attention_init(size_t max_shared_bytes);
// out (B,T,NH·HD) bf16, lse (B,NH,T) f32, qkv (B,T,(NH+2KVH)·HD) bf16.
void attention_forward(bf16* out, float* lse, const bf16* qkv, const AttnShape& s,
                       cudaStream_t stream);
// dqkv += gradients; `scratch` holds B·NH·T floats (the row sums D = Σ dout·out).
void attention_backward(bf16* dqkv, const bf16* dout, const bf16* out, const float* lse,
                        const bf16* qkv, float* scratch, const AttnShape& s, cudaStream_t stream);

}  // namespace ax::train::cuda
