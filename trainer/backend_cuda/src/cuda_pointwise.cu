// Casts, GELU, the gated linear units (SwiGLU, GeGLU), add, RoPE, the softmax cross-entropy
// (whole vocabulary and shards, with T5x's z-loss), the squared norm and AdamW. Element-wise
// kernels are grid-stride loops; row-wise ones (the cross-entropy) take one block per row and an
// online max/sum, so the logits are read twice (statistics, then the gradient written in place) and
// never copied.
#include "ax/trainer/backend/dropout_mask.h"
#include "cuda_common.cuh"

namespace ax::train::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kRowThreads = 512;             // cross-entropy: one block per row of the vocabulary
constexpr float kGeluScale = 0.7978845608f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

__global__ void cast_f32_to_bf16_kernel(bf16* dst, const float* src, int64_t n) {
  AX_GRID_STRIDE(i, n) dst[i] = to_bf16(src[i]);
}

__global__ void cast_bf16_to_f32_kernel(float* dst, const bf16* src, int64_t n) {
  AX_GRID_STRIDE(i, n) dst[i] = to_f32(src[i]);
}

// GELU with the tanh approximation and its derivative: gelu_* and GeGLU's gate.
__device__ __forceinline__ float gelu(float x) {
  float u = kGeluScale * (x + kGeluCubic * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}

__device__ __forceinline__ float gelu_grad(float x) {
  float u = kGeluScale * (x + kGeluCubic * x * x * x);
  float th = tanhf(u);
  float du = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
  return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
}

template <typename Act>
__global__ void gelu_forward_kernel(Act* out, const Act* inp, int64_t n) {
  AX_GRID_STRIDE(i, n) store(&out[i], gelu(to_f32(inp[i])));
}

template <typename Act>
__global__ void gelu_backward_kernel(Act* dinp, const Act* dout, const Act* inp, int64_t n) {
  AX_GRID_STRIDE(i, n) add_to(&dinp[i], gelu_grad(to_f32(inp[i])) * to_f32(dout[i]));
}

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// Gated linear units: kGelu selects GeGLU (GELU gate), else SwiGLU (SiLU gate).
template <bool kGelu, typename Act>
__global__ void glu_forward_kernel(Act* out, const Act* inp, int64_t N, int64_t F) {
  AX_GRID_STRIDE(i, N * F) {
    int64_t n = i / F, f = i % F;
    float gate = to_f32(inp[n * 2 * F + f]), up = to_f32(inp[n * 2 * F + F + f]);
    if (kGelu) {
      store(&out[i], gelu(gate) * up);
    } else {
      store(&out[i], gate * sigmoid(gate) * up);
    }
  }
}

template <bool kGelu, typename Act>
__global__ void glu_backward_kernel(Act* dinp, const Act* dout, const Act* inp, int64_t N,
                                    int64_t F) {
  AX_GRID_STRIDE(i, N * F) {
    int64_t n = i / F, f = i % F;
    float a = to_f32(inp[n * 2 * F + f]), up = to_f32(inp[n * 2 * F + F + f]);
    float dy = to_f32(dout[i]);
    if (kGelu) {
      add_to(&dinp[n * 2 * F + f], dy * up * gelu_grad(a));
      add_to(&dinp[n * 2 * F + F + f], dy * gelu(a));
    } else {
      float sig = sigmoid(a);
      add_to(&dinp[n * 2 * F + f], dy * up * (sig * (1.0f + a * (1.0f - sig))));
      add_to(&dinp[n * 2 * F + F + f], dy * a * sig);
    }
  }
}

template <typename Act>
__global__ void add_kernel(Act* out, const Act* a, const Act* b, int64_t n) {
  AX_GRID_STRIDE(i, n) store(&out[i], to_f32(a[i]) + to_f32(b[i]));
}

// One thread per rotated pair (j, j + HD/2) or per passed-through value element, so that the
// rotation may run in place. The table's (cos, sin) of (t, j) sit side by side at t·half + j
// whatever T the table was built for (a layout that depended on T read the sines of a shorter
// call from the cosines of a longer one).
template <bool kBackward, typename Act>
__global__ void rope_kernel(Act* y, const Act* x, const float2* cos_sin, int64_t rows, int64_t T,
                            int64_t R, int64_t rotated, int64_t HD) {
  int64_t half = HD / 2, pairs = rotated * half, slots = pairs + (R - rotated * HD);
  AX_GRID_STRIDE(i, rows * slots) {
    int64_t n = i / slots, slot = i % slots;
    const Act* xr = x + n * R;
    Act* yr = y + n * R;
    if (slot >= pairs) {
      int64_t e = rotated * HD + (slot - pairs);
      if (kBackward) {
        add_to(&yr[e], to_f32(xr[e]));
      } else {
        yr[e] = xr[e];
      }
      continue;
    }
    int64_t h = slot / half, j = slot % half, t = n % T;
    const float2 cs = cos_sin[t * half + j];
    const float c = cs.x, s = cs.y;
    int64_t e0 = h * HD + j, e1 = e0 + half;
    float x0 = to_f32(xr[e0]), x1 = to_f32(xr[e1]);
    if (kBackward) {
      add_to(&yr[e0], x0 * c + x1 * s);
      add_to(&yr[e1], x1 * c - x0 * s);
    } else {
      store(&yr[e0], x0 * c - x1 * s);
      store(&yr[e1], x0 * s + x1 * c);
    }
  }
}

// (max, Σ e^(x - max)) over x[0, count), for the whole block.
template <typename Act>
__device__ void row_max_sum(const Act* x, int64_t count, float* shared, float* m_out,
                            float* s_out) {
  float m = -INFINITY, s = 0.0f;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    float v = to_f32(x[i]);
    if (v > m) {
      s = s * expf(m - v) + 1.0f;
      m = v;
    } else if (v != -INFINITY) {
      s += expf(v - m);
    }
  }
  block_max_sum(m, s, shared);
  *m_out = m;
  *s_out = s;
}

// A target >= V is not a column of the row: it is never read, and the row's loss is NaN.
// z_loss = 0 skips the z-loss term.
template <typename Act>
__global__ void cross_entropy_forward_kernel(float* losses, const Act* logits,
                                             const int32_t* targets, int64_t V, int64_t Vp,
                                             float z_loss) {
  __shared__ float shared[2 * kWarp];
  int64_t n = blockIdx.x;
  int32_t target = targets[n];
  if (target < 0 || target >= V) {
    if (threadIdx.x == 0) losses[n] = target < 0 ? 0.0f : NAN;
    return;
  }
  const Act* x = logits + n * Vp;
  float m, s;
  row_max_sum(x, V, shared, &m, &s);
  if (threadIdx.x == 0) {
    const float lse = m + logf(s);
    float loss = lse - to_f32(x[target]);
    if (z_loss != 0.0f) loss += z_loss * lse * lse;
    losses[n] = loss;
  }
}

// d = ((1 + 2·z_loss·lse) · softmax(x) - onehot) · dloss over the first V columns, 0 beyond;
// each thread reads the elements it writes, after the whole block has read the row, so d may be
// x. A target >= V gives NaN over the first V columns.
template <typename Act>
__global__ void cross_entropy_backward_kernel(Act* dlogits, const Act* logits,
                                              const int32_t* targets, int64_t V, int64_t Vp,
                                              float dloss, float z_loss) {
  __shared__ float shared[2 * kWarp];
  int64_t n = blockIdx.x;
  int32_t target = targets[n];
  const Act* x = logits + n * Vp;
  Act* d = dlogits + n * Vp;
  if (target < 0 || target >= V) {
    const float fill = target < 0 ? 0.0f : NAN;
    for (int64_t i = threadIdx.x; i < Vp; i += blockDim.x) store(&d[i], i < V ? fill : 0.0f);
    return;
  }
  float m, s;
  row_max_sum(x, V, shared, &m, &s);
  float scale = dloss / s;
  if (z_loss != 0.0f) scale = dloss * (1.0f + 2.0f * z_loss * (m + logf(s))) / s;
  for (int64_t i = threadIdx.x; i < Vp; i += blockDim.x) {
    float v = 0.0f;
    if (i < V) {
      v = expf(to_f32(x[i]) - m) * scale;
      if (i == target) v -= dloss;
    }
    store(&d[i], v);
  }
}

template <typename Act>
__global__ void ce_shard_max_kernel(float* rowmax, const Act* logits, int64_t Vl, int64_t v_count) {
  __shared__ float shared[kWarp];
  const Act* x = logits + blockIdx.x * Vl;
  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < v_count; i += blockDim.x) m = fmaxf(m, to_f32(x[i]));
  m = block_max(m, shared);
  if (threadIdx.x == 0) rowmax[blockIdx.x] = m;
}

template <typename Act>
__global__ void ce_shard_sums_kernel(float* sums, const Act* logits, const float* rowmax,
                                     const int32_t* targets, int64_t Vl, int64_t v_begin,
                                     int64_t v_count) {
  __shared__ float shared[kWarp];
  int64_t n = blockIdx.x;
  const Act* x = logits + n * Vl;
  float m = rowmax[n], s = 0.0f;
  for (int64_t i = threadIdx.x; i < v_count; i += blockDim.x) s += expf(to_f32(x[i]) - m);
  s = block_sum(s, shared);
  if (threadIdx.x == 0) {
    int64_t local = static_cast<int64_t>(targets[n]) - v_begin;
    sums[2 * n] = s;
    sums[2 * n + 1] = (targets[n] >= 0 && local >= 0 && local < v_count) ? to_f32(x[local]) : 0.0f;
  }
}

template <typename Act>
__global__ void ce_shard_backward_kernel(Act* dlogits, const Act* logits, const float* lse,
                                         const int32_t* targets, int64_t Vl, int64_t v_begin,
                                         int64_t v_count, float dloss, float z_loss) {
  int64_t n = blockIdx.x;
  const Act* x = logits + n * Vl;
  Act* d = dlogits + n * Vl;
  int32_t target = targets[n];
  int64_t local = static_cast<int64_t>(target) - v_begin;
  float l = lse[n];
  // The softmax's factor: dloss, times 1 + 2·z_loss·lse with a z-loss.
  const float g = z_loss != 0.0f ? dloss * (1.0f + 2.0f * z_loss * l) : dloss;
  for (int64_t i = threadIdx.x; i < Vl; i += blockDim.x) {
    float v = 0.0f;
    if (target >= 0 && i < v_count) {
      v = expf(to_f32(x[i]) - l) * g;
      if (i == local) v -= dloss;
    }
    store(&d[i], v);
  }
}

// Fixed grid and fixed reduction trees: the same sum on every run.
__global__ void sum_squares_kernel(double* partials, const float* x, int64_t n) {
  __shared__ double shared[kThreads];
  double acc = 0.0;
  AX_GRID_STRIDE(i, n) {
    double v = x[i];
    acc += v * v;
  }
  shared[threadIdx.x] = acc;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) shared[threadIdx.x] += shared[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = shared[0];
}

__global__ void sum_partials_kernel(double* out, const double* partials, int count) {
  double s = 0.0;
  for (int i = 0; i < count; ++i) s += partials[i];
  *out = s;
}

// The CPU reference's float operations in its order; the _rn intrinsics keep nvcc from fusing
// them into FMAs, so both backends give the same bits.
__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, int64_t n,
                             AdamWScalars s) {
  AX_GRID_STRIDE(i, n) {
    float grad = __fmul_rn(s.grad_scale, g[i]);
    float param = __fmul_rn(p[i], s.decay);
    float mi = __fadd_rn(__fmul_rn(m[i], s.beta1), __fmul_rn(s.one_minus_beta1, grad));
    float vi =
        __fadd_rn(__fmul_rn(v[i], s.beta2), __fmul_rn(__fmul_rn(s.one_minus_beta2, grad), grad));
    m[i] = mi;
    v[i] = vi;
    float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), s.bias2_sqrt), s.eps);
    p[i] = __fadd_rn(param, __fdiv_rn(__fmul_rn(s.neg_step_size, mi), denom));
  }
}

}  // namespace

void cast_f32_to_bf16(bf16* dst, const float* src, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  cast_f32_to_bf16_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(dst, src, n);
  AX_CUDA_CHECK_LAUNCH();
}

void cast_bf16_to_f32(float* dst, const bf16* src, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  cast_bf16_to_f32_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(dst, src, n);
  AX_CUDA_CHECK_LAUNCH();
}

template <typename Act>
__global__ void dropout_forward_kernel(Act* out, const Act* inp, const int32_t* row_keys, int64_t N,
                                       int64_t F, DropoutArgs a) {
  AX_GRID_STRIDE(i, N * F) {
    const int64_t n = i / F, f = i % F;
    const auto feature = static_cast<uint32_t>(a.feature_offset + f);
    const bool keep =
        dropout_keep(a.seed, static_cast<uint32_t>(row_keys[n]), feature, a.threshold);
    store(&out[i], keep ? to_f32(inp[i]) * a.scale : 0.0f);
  }
}

template <typename Act>
__global__ void dropout_backward_kernel(Act* dinp, const Act* dout, const int32_t* row_keys,
                                        int64_t N, int64_t F, DropoutArgs a) {
  AX_GRID_STRIDE(i, N * F) {
    const int64_t n = i / F, f = i % F;
    const auto feature = static_cast<uint32_t>(a.feature_offset + f);
    if (dropout_keep(a.seed, static_cast<uint32_t>(row_keys[n]), feature, a.threshold)) {
      add_to(&dinp[i], to_f32(dout[i]) * a.scale);
    }
  }
}

template <typename Act>
void gelu_forward(Act* out, const Act* inp, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  gelu_forward_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(out, inp, n);
  AX_CUDA_CHECK_LAUNCH();
}

template <typename Act>
void gelu_backward(Act* dinp, const Act* dout, const Act* inp, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  gelu_backward_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(dinp, dout, inp, n);
  AX_CUDA_CHECK_LAUNCH();
}

template <typename Act>
void glu_forward(Act* out, const Act* inp, int64_t N, int64_t F, bool gelu, cudaStream_t stream) {
  if (N * F == 0) return;
  const unsigned grid = grid_for(N * F, kThreads);
  if (gelu) {
    glu_forward_kernel<true><<<grid, kThreads, 0, stream>>>(out, inp, N, F);
  } else {
    glu_forward_kernel<false><<<grid, kThreads, 0, stream>>>(out, inp, N, F);
  }
  AX_CUDA_CHECK_LAUNCH();
}

template <typename Act>
void glu_backward(Act* dinp, const Act* dout, const Act* inp, int64_t N, int64_t F, bool gelu,
                  cudaStream_t stream) {
  if (N * F == 0) return;
  const unsigned grid = grid_for(N * F, kThreads);
  if (gelu) {
    glu_backward_kernel<true><<<grid, kThreads, 0, stream>>>(dinp, dout, inp, N, F);
  } else {
    glu_backward_kernel<false><<<grid, kThreads, 0, stream>>>(dinp, dout, inp, N, F);
  }
  AX_CUDA_CHECK_LAUNCH();
}

template <typename Act>
void dropout_forward(Act* out, const Act* inp, const int32_t* row_keys, int64_t N, int64_t F,
                     DropoutArgs args, cudaStream_t stream) {
  if (N * F == 0) return;
  dropout_forward_kernel<<<grid_for(N * F, kThreads), kThreads, 0, stream>>>(out, inp, row_keys, N,
                                                                             F, args);
  AX_CUDA_CHECK_LAUNCH();
}

template <typename Act>
void dropout_backward(Act* dinp, const Act* dout, const int32_t* row_keys, int64_t N, int64_t F,
                      DropoutArgs args, cudaStream_t stream) {
  if (N * F == 0) return;
  dropout_backward_kernel<<<grid_for(N * F, kThreads), kThreads, 0, stream>>>(dinp, dout, row_keys,
                                                                              N, F, args);
  AX_CUDA_CHECK_LAUNCH();
}

template <typename Act>
void add_forward(Act* out, const Act* a, const Act* b, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  add_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(out, a, b, n);
  AX_CUDA_CHECK_LAUNCH();
}

template <bool kBackward, typename Act>
void launch_rope(Act* y, const Act* x, const float* cos_sin, int64_t B, int64_t T, int64_t R,
                 int64_t rotated, int64_t HD, cudaStream_t stream) {
  int64_t work = B * T * (rotated * HD / 2 + (R - rotated * HD));
  if (work == 0) return;
  rope_kernel<kBackward><<<grid_for(work, kThreads), kThreads, 0, stream>>>(
      y, x, reinterpret_cast<const float2*>(cos_sin), B * T, T, R, rotated, HD);
  AX_CUDA_CHECK_LAUNCH();
}

template <typename Act>
void rope_forward(Act* out, const Act* inp, const float* cos_sin, int64_t B, int64_t T, int64_t R,
                  int64_t rotated, int64_t HD, cudaStream_t stream) {
  launch_rope<false>(out, inp, cos_sin, B, T, R, rotated, HD, stream);
}

template <typename Act>
void rope_backward(Act* dinp, const Act* dout, const float* cos_sin, int64_t B, int64_t T,
                   int64_t R, int64_t rotated, int64_t HD, cudaStream_t stream) {
  launch_rope<true>(dinp, dout, cos_sin, B, T, R, rotated, HD, stream);
}

template <typename Act>
void cross_entropy_forward(float* losses, const Act* logits, const int32_t* targets, int64_t N,
                           int64_t V, int64_t Vp, float z_loss, cudaStream_t stream) {
  if (N == 0) return;
  cross_entropy_forward_kernel<<<static_cast<unsigned>(N), kRowThreads, 0, stream>>>(
      losses, logits, targets, V, Vp, z_loss);
  AX_CUDA_CHECK_LAUNCH();
}

template <typename Act>
void cross_entropy_backward(Act* dlogits, const Act* logits, const int32_t* targets, int64_t N,
                            int64_t V, int64_t Vp, float dloss, float z_loss, cudaStream_t stream) {
  if (N == 0) return;
  cross_entropy_backward_kernel<<<static_cast<unsigned>(N), kRowThreads, 0, stream>>>(
      dlogits, logits, targets, V, Vp, dloss, z_loss);
  AX_CUDA_CHECK_LAUNCH();
}

template <typename Act>
void ce_shard_max(float* rowmax, const Act* logits, int64_t N, int64_t Vl, int64_t v_count,
                  cudaStream_t stream) {
  if (N == 0) return;
  ce_shard_max_kernel<<<static_cast<unsigned>(N), kRowThreads, 0, stream>>>(rowmax, logits, Vl,
                                                                            v_count);
  AX_CUDA_CHECK_LAUNCH();
}

template <typename Act>
void ce_shard_sums(float* sums, const Act* logits, const float* rowmax, const int32_t* targets,
                   int64_t N, int64_t Vl, int64_t v_begin, int64_t v_count, cudaStream_t stream) {
  if (N == 0) return;
  ce_shard_sums_kernel<<<static_cast<unsigned>(N), kRowThreads, 0, stream>>>(
      sums, logits, rowmax, targets, Vl, v_begin, v_count);
  AX_CUDA_CHECK_LAUNCH();
}

template <typename Act>
void ce_shard_backward(Act* dlogits, const Act* logits, const float* lse, const int32_t* targets,
                       int64_t N, int64_t Vl, int64_t v_begin, int64_t v_count, float dloss,
                       float z_loss, cudaStream_t stream) {
  if (N == 0) return;
  ce_shard_backward_kernel<<<static_cast<unsigned>(N), kRowThreads, 0, stream>>>(
      dlogits, logits, lse, targets, Vl, v_begin, v_count, dloss, z_loss);
  AX_CUDA_CHECK_LAUNCH();
}

double sum_squares(const float* x, int64_t n, double* scratch, cudaStream_t stream) {
  if (n == 0) return 0.0;
  sum_squares_kernel<<<kSumSquaresBlocks, kThreads, 0, stream>>>(scratch, x, n);
  AX_CUDA_CHECK_LAUNCH();
  sum_partials_kernel<<<1, 1, 0, stream>>>(scratch + kSumSquaresBlocks, scratch, kSumSquaresBlocks);
  AX_CUDA_CHECK_LAUNCH();
  double result = 0.0;
  AX_CUDA_CHECK(cudaMemcpyAsync(&result, scratch + kSumSquaresBlocks, sizeof(double),
                                cudaMemcpyDeviceToHost, stream));
  AX_CUDA_CHECK(cudaStreamSynchronize(stream));
  return result;
}

void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n,
                  const AdamWScalars& s, cudaStream_t stream) {
  if (n == 0) return;
  adamw_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(params, grads, m, v, n, s);
  AX_CUDA_CHECK_LAUNCH();
}

// The launchers for both activation types (cuda_kernels.h).
#define AX_POINTWISE_LAUNCHERS(Act)                                                               \
  template void gelu_forward(Act*, const Act*, int64_t, cudaStream_t);                            \
  template void gelu_backward(Act*, const Act*, const Act*, int64_t, cudaStream_t);               \
  template void glu_forward(Act*, const Act*, int64_t, int64_t, bool, cudaStream_t);              \
  template void glu_backward(Act*, const Act*, const Act*, int64_t, int64_t, bool, cudaStream_t); \
  template void dropout_forward(Act*, const Act*, const int32_t*, int64_t, int64_t, DropoutArgs,  \
                                cudaStream_t);                                                    \
  template void dropout_backward(Act*, const Act*, const int32_t*, int64_t, int64_t, DropoutArgs, \
                                 cudaStream_t);                                                   \
  template void add_forward(Act*, const Act*, const Act*, int64_t, cudaStream_t);                 \
  template void rope_forward(Act*, const Act*, const float*, int64_t, int64_t, int64_t, int64_t,  \
                             int64_t, cudaStream_t);                                              \
  template void rope_backward(Act*, const Act*, const float*, int64_t, int64_t, int64_t, int64_t, \
                              int64_t, cudaStream_t);                                             \
  template void cross_entropy_forward(float*, const Act*, const int32_t*, int64_t, int64_t,       \
                                      int64_t, float, cudaStream_t);                              \
  template void cross_entropy_backward(Act*, const Act*, const int32_t*, int64_t, int64_t,        \
                                       int64_t, float, float, cudaStream_t);                      \
  template void ce_shard_max(float*, const Act*, int64_t, int64_t, int64_t, cudaStream_t);        \
  template void ce_shard_sums(float*, const Act*, const float*, const int32_t*, int64_t, int64_t, \
                              int64_t, int64_t, cudaStream_t);                                    \
  template void ce_shard_backward(Act*, const Act*, const float*, const int32_t*, int64_t,        \
                                  int64_t, int64_t, int64_t, float, float, cudaStream_t);
AX_POINTWISE_LAUNCHERS(bf16)
AX_POINTWISE_LAUNCHERS(float)
#undef AX_POINTWISE_LAUNCHERS

}  // namespace ax::train::cuda
