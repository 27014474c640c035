// Flash-style attention over a packed qkv (B, T, (NH + 2·KVH)·HD), in f32 on CUDA cores.
//
// Forward: a block takes kBr query rows of one (batch, head); K and V stream through shared
// memory in tiles of kBc keys; each warp keeps its rows' running max, sum and output in
// registers (online softmax), so the T × T scores never exist. lse = max + log(sum) is saved.
//
// Backward (FlashAttention-2's recomputation, split so that nothing is atomic and every sum has
// a fixed order): D = Σ dO·O per row; one kernel per key tile of a key/value head walks its query
// heads and query tiles and accumulates dK, dV in registers; another per query tile walks the
// key tiles and accumulates dQ. Both recompute P = exp(S - lse) from the saved lse.
//
// Lane layout: in a score pass each lane owns one key (or one query) and dots a full head row
// from shared memory; rows that lanes read across are padded by one float (no bank conflicts).
// In an accumulation pass each lane owns head-dim columns lane, lane + 32, ...
#include <algorithm>

#include "cuda_common.cuh"

namespace ax::train::cuda {
namespace {

constexpr int kBr = 32;  // query rows per tile
constexpr int kBc = 32;  // keys per tile (one per lane)
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * kWarp;
constexpr int kRowsPerWarp = kBr / kWarps;
constexpr int kCols = kAttnMaxHeadDim / kWarp;  // head-dim columns per lane, at most
static_assert(kBr == kWarp && kBc == kWarp, "a score pass puts one query or key on each lane");
static_assert(kBr % kWarps == 0, "each warp owns whole rows");

struct Dims {
  int64_t T, NH, KVH, HD, R, OC, group;
  float scale;
  bool causal;
};

Dims dims_of(const AttnShape& s) {
  Dims d;
  d.T = s.T;
  d.NH = s.NH;
  d.KVH = s.KVH;
  d.HD = s.HD;
  d.R = (s.NH + 2 * s.KVH) * s.HD;
  d.OC = s.NH * s.HD;
  d.group = s.NH / s.KVH;
  d.scale = 1.0f / sqrtf(static_cast<float>(s.HD));
  d.causal = s.causal;
  return d;
}

__device__ __forceinline__ bool visible(int64_t query, int64_t key, const Dims& d) {
  return query < d.T && key < d.T && (!d.causal || key <= query);
}

// rows × HD values of a head from a (B, T, stride) tensor into shared memory with row pitch
// `pitch`, as f32; rows past T are zero.
template <typename Act>
__device__ void load_tile(float* dst, int pitch, const Act* src, int64_t stride, int64_t t0,
                          int rows, const Dims& d) {
  for (int64_t i = threadIdx.x; i < rows * d.HD; i += blockDim.x) {
    int64_t r = i / d.HD, c = i % d.HD;
    dst[r * pitch + c] = t0 + r < d.T ? to_f32(src[(t0 + r) * stride + c]) : 0.0f;
  }
}

__device__ __forceinline__ float dot_row(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
  for (int64_t c = 0; c < n; ++c) s += a[c] * b[c];
  return s;
}

// grid (query tiles, NH, B).
template <typename Act>
__global__ void __launch_bounds__(kThreads)
    attention_forward_kernel(Act* out, float* lse, const Act* qkv, Dims d) {
  extern __shared__ float smem[];
  const int64_t HD = d.HD, q0 = int64_t{blockIdx.x} * kBr, h = blockIdx.y, b = blockIdx.z;
  const int64_t g = h / d.group;
  const int kp = static_cast<int>(HD) + 1;
  float* qs = smem;           // (kBr, HD)
  float* ks = qs + kBr * HD;  // (kBc, HD + 1)
  float* vs = ks + kBc * kp;  // (kBc, HD)
  const Act* base = qkv + b * d.T * d.R;
  load_tile(qs, static_cast<int>(HD), base + h * HD, d.R, q0, kBr, d);

  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  float m[kRowsPerWarp], l[kRowsPerWarp], o[kRowsPerWarp][kCols];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    m[rr] = -INFINITY;
    l[rr] = 0.0f;
#pragma unroll
    for (int i = 0; i < kCols; ++i) o[rr][i] = 0.0f;
  }
  const int64_t key_end = d.causal ? min(d.T, q0 + kBr) : d.T;
  for (int64_t k0 = 0; k0 < key_end; k0 += kBc) {
    __syncthreads();
    load_tile(ks, kp, base + (d.NH + g) * HD, d.R, k0, kBc, d);
    load_tile(vs, static_cast<int>(HD), base + (d.NH + d.KVH + g) * HD, d.R, k0, kBc, d);
    __syncthreads();
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const int r = warp * kRowsPerWarp + rr;
      const int64_t t = q0 + r;
      if (t >= d.T) continue;
      const bool ok = visible(t, k0 + lane, d);
      float s = ok ? d.scale * dot_row(qs + r * HD, ks + lane * kp, HD) : -INFINITY;
      const float m_new = fmaxf(m[rr], warp_max(s));
      if (m_new == -INFINITY) continue;  // no visible key yet
      const float p = ok ? expf(s - m_new) : 0.0f;
      const float alpha = expf(m[rr] - m_new);
      l[rr] = l[rr] * alpha + warp_sum(p);
      m[rr] = m_new;
#pragma unroll
      for (int i = 0; i < kCols; ++i) o[rr][i] *= alpha;
      for (int j = 0; j < kBc; ++j) {
        const float pj = __shfl_sync(0xffffffffu, p, j);
#pragma unroll
        for (int i = 0; i < kCols; ++i) {
          const int64_t c = lane + i * kWarp;
          if (c < HD) o[rr][i] += pj * vs[j * HD + c];
        }
      }
    }
  }
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int64_t t = q0 + warp * kRowsPerWarp + rr;
    if (t >= d.T) continue;
    const float inv = 1.0f / l[rr];
    Act* orow = out + (b * d.T + t) * d.OC + h * HD;
#pragma unroll
    for (int i = 0; i < kCols; ++i) {
      const int64_t c = lane + i * kWarp;
      if (c < HD) store(&orow[c], o[rr][i] * inv);
    }
    if (lane == 0) lse[(b * d.NH + h) * d.T + t] = m[rr] + logf(l[rr]);
  }
}

// D[b, h, t] = Σ_c dout · out over the head's columns; one warp per (b, t, h).
template <typename Act>
__global__ void attention_row_dot_kernel(float* D, const Act* dout, const Act* out, int64_t B,
                                         Dims d) {
  const int64_t w = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (w >= B * d.T * d.NH) return;
  const int64_t h = w % d.NH, bt = w / d.NH, b = bt / d.T, t = bt % d.T;
  const Act* dy = dout + bt * d.OC + h * d.HD;
  const Act* y = out + bt * d.OC + h * d.HD;
  float s = 0.0f;
  for (int64_t c = lane; c < d.HD; c += kWarp) s += to_f32(dy[c]) * to_f32(y[c]);
  s = warp_sum(s);
  if (lane == 0) D[(b * d.NH + h) * d.T + t] = s;
}

// grid (key tiles, KVH, B): dK, dV of kBc keys of one key/value head, over its query heads.
template <typename Act>
__global__ void __launch_bounds__(kThreads)
    attention_backward_kv_kernel(Act* dqkv, const Act* dout, const float* lse, const float* D,
                                 const Act* qkv, Dims d) {
  extern __shared__ float smem[];
  const int64_t HD = d.HD, k0 = int64_t{blockIdx.x} * kBc, g = blockIdx.y, b = blockIdx.z;
  const int qp = static_cast<int>(HD) + 1;
  float* qs = smem;             // (kBr, HD + 1)
  float* dos = qs + kBr * qp;   // (kBr, HD + 1)
  float* ks = dos + kBr * qp;   // (kBc, HD)
  float* vs = ks + kBc * HD;    // (kBc, HD)
  float* lses = vs + kBc * HD;  // (kBr)
  float* Ds = lses + kBr;       // (kBr)
  const Act* base = qkv + b * d.T * d.R;
  load_tile(ks, static_cast<int>(HD), base + (d.NH + g) * HD, d.R, k0, kBc, d);
  load_tile(vs, static_cast<int>(HD), base + (d.NH + d.KVH + g) * HD, d.R, k0, kBc, d);

  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  float dk[kRowsPerWarp][kCols], dv[kRowsPerWarp][kCols];
#pragma unroll
  for (int kk = 0; kk < kRowsPerWarp; ++kk) {
#pragma unroll
    for (int i = 0; i < kCols; ++i) dk[kk][i] = dv[kk][i] = 0.0f;
  }
  const int64_t q_begin = d.causal ? k0 / kBr * kBr : 0;
  for (int64_t h = g * d.group; h < (g + 1) * d.group; ++h) {
    for (int64_t q0 = q_begin; q0 < d.T; q0 += kBr) {
      __syncthreads();
      load_tile(qs, qp, base + h * HD, d.R, q0, kBr, d);
      load_tile(dos, qp, dout + b * d.T * d.OC + h * HD, d.OC, q0, kBr, d);
      if (threadIdx.x < kBr) {
        const int64_t t = q0 + threadIdx.x;
        lses[threadIdx.x] = t < d.T ? lse[(b * d.NH + h) * d.T + t] : 0.0f;
        Ds[threadIdx.x] = t < d.T ? D[(b * d.NH + h) * d.T + t] : 0.0f;
      }
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < kRowsPerWarp; ++kk) {
        const int j = warp * kRowsPerWarp + kk;
        if (k0 + j >= d.T) continue;
        // Lane = query row of the tile.
        const bool ok = visible(q0 + lane, k0 + j, d);
        float p = 0.0f, ds = 0.0f;
        if (ok) {
          p = expf(d.scale * dot_row(qs + lane * qp, ks + j * HD, HD) - lses[lane]);
          const float dp = dot_row(dos + lane * qp, vs + j * HD, HD);
          ds = p * (dp - Ds[lane]) * d.scale;
        }
        for (int r = 0; r < kBr; ++r) {
          const float pr = __shfl_sync(0xffffffffu, p, r);
          const float dsr = __shfl_sync(0xffffffffu, ds, r);
#pragma unroll
          for (int i = 0; i < kCols; ++i) {
            const int64_t c = lane + i * kWarp;
            if (c < HD) {
              dv[kk][i] += pr * dos[r * qp + c];
              dk[kk][i] += dsr * qs[r * qp + c];
            }
          }
        }
      }
    }
  }
#pragma unroll
  for (int kk = 0; kk < kRowsPerWarp; ++kk) {
    const int64_t key = k0 + warp * kRowsPerWarp + kk;
    if (key >= d.T) continue;
    Act* krow = dqkv + (b * d.T + key) * d.R + (d.NH + g) * HD;
    Act* vrow = krow + d.KVH * HD;
#pragma unroll
    for (int i = 0; i < kCols; ++i) {
      const int64_t c = lane + i * kWarp;
      if (c < HD) {
        add_to(&krow[c], dk[kk][i]);
        add_to(&vrow[c], dv[kk][i]);
      }
    }
  }
}

// grid (query tiles, NH, B): dQ of kBr query rows of one head.
template <typename Act>
__global__ void __launch_bounds__(kThreads)
    attention_backward_q_kernel(Act* dqkv, const Act* dout, const float* lse, const float* D,
                                const Act* qkv, Dims d) {
  extern __shared__ float smem[];
  const int64_t HD = d.HD, q0 = int64_t{blockIdx.x} * kBr, h = blockIdx.y, b = blockIdx.z;
  const int64_t g = h / d.group;
  const int kp = static_cast<int>(HD) + 1;
  float* qs = smem;            // (kBr, HD)
  float* dos = qs + kBr * HD;  // (kBr, HD)
  float* ks = dos + kBr * HD;  // (kBc, HD + 1)
  float* vs = ks + kBc * kp;   // (kBc, HD + 1)
  const Act* base = qkv + b * d.T * d.R;
  load_tile(qs, static_cast<int>(HD), base + h * HD, d.R, q0, kBr, d);
  load_tile(dos, static_cast<int>(HD), dout + b * d.T * d.OC + h * HD, d.OC, q0, kBr, d);

  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  float dq[kRowsPerWarp][kCols], row_lse[kRowsPerWarp], row_D[kRowsPerWarp];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int64_t t = q0 + warp * kRowsPerWarp + rr;
    row_lse[rr] = t < d.T ? lse[(b * d.NH + h) * d.T + t] : 0.0f;
    row_D[rr] = t < d.T ? D[(b * d.NH + h) * d.T + t] : 0.0f;
#pragma unroll
    for (int i = 0; i < kCols; ++i) dq[rr][i] = 0.0f;
  }
  const int64_t key_end = d.causal ? min(d.T, q0 + kBr) : d.T;
  for (int64_t k0 = 0; k0 < key_end; k0 += kBc) {
    __syncthreads();
    load_tile(ks, kp, base + (d.NH + g) * HD, d.R, k0, kBc, d);
    load_tile(vs, kp, base + (d.NH + d.KVH + g) * HD, d.R, k0, kBc, d);
    __syncthreads();
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const int r = warp * kRowsPerWarp + rr;
      if (q0 + r >= d.T) continue;
      // Lane = key of the tile.
      const bool ok = visible(q0 + r, k0 + lane, d);
      float ds = 0.0f;
      if (ok) {
        const float p = expf(d.scale * dot_row(qs + r * HD, ks + lane * kp, HD) - row_lse[rr]);
        const float dp = dot_row(dos + r * HD, vs + lane * kp, HD);
        ds = p * (dp - row_D[rr]) * d.scale;
      }
      for (int j = 0; j < kBc; ++j) {
        const float dsj = __shfl_sync(0xffffffffu, ds, j);
#pragma unroll
        for (int i = 0; i < kCols; ++i) {
          const int64_t c = lane + i * kWarp;
          if (c < HD) dq[rr][i] += dsj * ks[j * kp + c];
        }
      }
    }
  }
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int64_t t = q0 + warp * kRowsPerWarp + rr;
    if (t >= d.T) continue;
    Act* qrow = dqkv + (b * d.T + t) * d.R + h * HD;
#pragma unroll
    for (int i = 0; i < kCols; ++i) {
      const int64_t c = lane + i * kWarp;
      if (c < HD) add_to(&qrow[c], dq[rr][i]);
    }
  }
}

size_t forward_bytes(int64_t HD) { return sizeof(float) * (kBr * HD + kBc * (HD + 1) + kBc * HD); }
size_t backward_kv_bytes(int64_t HD) {
  return sizeof(float) * (2 * kBr * (HD + 1) + 2 * kBc * HD + 2 * kBr);
}
size_t backward_q_bytes(int64_t HD) { return sizeof(float) * (2 * kBr * HD + 2 * kBc * (HD + 1)); }

}  // namespace

size_t attention_shared_bytes(int64_t head_dim) {
  return std::max(
      {forward_bytes(head_dim), backward_kv_bytes(head_dim), backward_q_bytes(head_dim)});
}

template <typename Act>
void allow_shared_bytes(int bytes) {
  AX_CUDA_CHECK(cudaFuncSetAttribute(attention_forward_kernel<Act>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  AX_CUDA_CHECK(cudaFuncSetAttribute(attention_backward_kv_kernel<Act>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  AX_CUDA_CHECK(cudaFuncSetAttribute(attention_backward_q_kernel<Act>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

void attention_init(size_t max_shared_bytes) {
  int bytes = static_cast<int>(std::min(max_shared_bytes, attention_shared_bytes(kAttnMaxHeadDim)));
  allow_shared_bytes<bf16>(bytes);
  allow_shared_bytes<float>(bytes);
}

template <typename Act>
void attention_forward(Act* out, float* lse, const Act* qkv, const AttnShape& s,
                       cudaStream_t stream) {
  if (s.B * s.T * s.NH == 0) return;
  Dims d = dims_of(s);
  dim3 grid(static_cast<unsigned>(ceil_div(s.T, kBr)), static_cast<unsigned>(s.NH),
            static_cast<unsigned>(s.B));
  attention_forward_kernel<<<grid, kThreads, forward_bytes(s.HD), stream>>>(out, lse, qkv, d);
  AX_CUDA_CHECK_LAUNCH();
}

template <typename Act>
void attention_backward(Act* dqkv, const Act* dout, const Act* out, const float* lse,
                        const Act* qkv, float* scratch, const AttnShape& s, cudaStream_t stream) {
  if (s.B * s.T * s.NH == 0) return;
  Dims d = dims_of(s);
  const int64_t warps = s.B * s.T * s.NH;
  attention_row_dot_kernel<<<static_cast<unsigned>(ceil_div(warps * kWarp, kThreads)), kThreads, 0,
                             stream>>>(scratch, dout, out, s.B, d);
  AX_CUDA_CHECK_LAUNCH();
  dim3 kv_grid(static_cast<unsigned>(ceil_div(s.T, kBc)), static_cast<unsigned>(s.KVH),
               static_cast<unsigned>(s.B));
  attention_backward_kv_kernel<<<kv_grid, kThreads, backward_kv_bytes(s.HD), stream>>>(
      dqkv, dout, lse, scratch, qkv, d);
  AX_CUDA_CHECK_LAUNCH();
  dim3 q_grid(static_cast<unsigned>(ceil_div(s.T, kBr)), static_cast<unsigned>(s.NH),
              static_cast<unsigned>(s.B));
  attention_backward_q_kernel<<<q_grid, kThreads, backward_q_bytes(s.HD), stream>>>(
      dqkv, dout, lse, scratch, qkv, d);
  AX_CUDA_CHECK_LAUNCH();
}

// The launchers for both activation types (cuda_kernels.h).
#define AX_ATTENTION_LAUNCHERS(Act)                                                                \
  template void attention_forward(Act*, float*, const Act*, const AttnShape&, cudaStream_t);       \
  template void attention_backward(Act*, const Act*, const Act*, const float*, const Act*, float*, \
                                   const AttnShape&, cudaStream_t);
AX_ATTENTION_LAUNCHERS(bf16)
AX_ATTENTION_LAUNCHERS(float)
#undef AX_ATTENTION_LAUNCHERS

}  // namespace ax::train::cuda
