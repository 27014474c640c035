// Attention for the CUDA backend: the dispatch and the f32 CUDA-core kernels. Calls the
// tensor-core kernels take (attention_tc.h: bf16, head size a multiple of 16 up to 128, 16-byte
// rows) run them (cuda_attention_tc.cu); every other call runs the f32 kernels below.
//
// Flash-style attention in f32 on CUDA cores, the whole of backend.h's AttentionSpec: queries
// from the rows of q, keys and values from the rows of kv (the same tensor for packed
// self-attention), lengths Tq and Tk of their own, GQA, causal or not, any scale, and, in the
// kernels' masked instantiation, an additive bias and segment ids.
//
// Forward: a block takes kBr query rows of one (batch, head); K and V stream through shared
// memory in tiles of kBc keys; each warp keeps its rows' running max, sum and output in
// registers (online softmax), so the Tq × Tk scores never exist. lse = max + log(sum) is saved;
// a row that sees no key gets a zero output and lse = -inf.
//
// Backward (FlashAttention-2's recomputation, split so that nothing is atomic and every sum has
// a fixed order): D = Σ dO·O per row; one kernel per key tile of a key/value head walks its query
// heads and query tiles and accumulates dK, dV in registers; another per query tile walks the
// key tiles, accumulates dQ and writes the bias gradient (it sees each score exactly once). Both
// recompute P = exp(S - lse) from the saved lse; a row with lse = -inf has no gradient.
//
// Bias gradient of a bias shared by the batch (Bb = 1): a dQ block walks a chunk of batch rows
// in order and adds into one slot; with more than one chunk the slots are scratch partials,
// summed in chunk order into dbias by a last kernel (attention_plan.h: the chunking depends on
// the shapes only, so every device gives the same bits).
//
// Masked instantiation (kMasked): bias and segment ids are read only by the kernels instantiated
// with kMasked = true; packed GPT self-attention without them runs the kMasked = false kernels,
// whose code is the unmasked path alone (no extra global reads or registers).
//
// Lane layout: in a score pass each lane owns one key (or one query) and dots a full head row
// from shared memory; rows that lanes read across are padded by one float (no bank conflicts).
// In an accumulation pass each lane owns head-dim columns lane, lane + 32, ...
#include <algorithm>
#include <initializer_list>
#include <type_traits>

#include "attention_plan.h"
#include "attention_tc.h"
#include "cuda_attention.h"
#include "cuda_common.cuh"

namespace ax::train::cuda {
namespace {

constexpr int kBr = 32;  // query rows per tile
constexpr int kBc = 32;  // keys per tile (one per lane)
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * kWarp;
constexpr int kRowsPerWarp = kBr / kWarps;
constexpr int kCols = kAttnMaxHeadDim / kWarp;  // head-dim columns per lane, at most
constexpr int kBiasPitch = kBc + 1;             // the dK/dV kernel's bias tile, read by query
static_assert(kBr == kWarp && kBc == kWarp, "a score pass puts one query or key on each lane");
static_assert(kBr % kWarps == 0, "each warp owns whole rows");

static_assert(kBr == kAttnQueryTile, "attention_plan.h counts the dQ kernel's blocks");

// The optional inputs of the masked kernels, null when absent.
template <typename Act>
struct Masks {
  const Act* bias;            // (Bb, NH, Tq, Tk)
  int64_t bias_batch_stride;  // 0 when Bb = 1
  const int32_t* q_seg;       // (B, Tq), with k_seg
  const int32_t* k_seg;       // (B, Tk)
};

// The same for one (batch row, query head).
template <typename Act>
struct HeadMasks {
  const Act* bias;       // (Tq, Tk) or null
  const int32_t* q_seg;  // (Tq) or null
  const int32_t* k_seg;  // (Tk) or null
};

template <typename Act>
__device__ __forceinline__ HeadMasks<Act> head_masks(const Masks<Act>& m, const Dims& d, int64_t b,
                                                     int64_t h) {
  HeadMasks<Act> hm;
  hm.bias = m.bias == nullptr ? nullptr : m.bias + b * m.bias_batch_stride + h * d.Tq * d.Tk;
  hm.q_seg = m.q_seg == nullptr ? nullptr : m.q_seg + b * d.Tq;
  hm.k_seg = m.k_seg == nullptr ? nullptr : m.k_seg + b * d.Tk;
  return hm;
}

using tc::visible;  // a key exists, is not in the future (causal)

// The segment id of position i of n (0 past the end: such positions are never visible).
__device__ __forceinline__ int32_t segment_at(const int32_t* seg, int64_t i, int64_t n) {
  return i < n ? seg[i] : 0;
}

// rows × HD values of a head from a (T, stride) matrix into shared memory with row pitch `pitch`,
// as f32; rows past T are zero.
template <typename Act>
__device__ void load_tile(float* dst, int pitch, const Act* src, int64_t stride, int64_t t0,
                          int rows, int64_t T, int64_t HD) {
  for (int64_t i = threadIdx.x; i < rows * HD; i += blockDim.x) {
    int64_t r = i / HD, c = i % HD;
    dst[r * pitch + c] = t0 + r < T ? to_f32(src[(t0 + r) * stride + c]) : 0.0f;
  }
}

// The (kBr, kBc) bias tile of query rows q0.. and keys k0.. with row pitch kBiasPitch, as f32.
template <typename Act>
__device__ void load_bias_tile(float* dst, const Act* bias, int64_t q0, int64_t k0, const Dims& d) {
  for (int i = threadIdx.x; i < kBr * kBc; i += blockDim.x) {
    const int r = i / kBc, c = i % kBc;
    dst[r * kBiasPitch + c] =
        q0 + r < d.Tq && k0 + c < d.Tk ? to_f32(bias[(q0 + r) * d.Tk + k0 + c]) : 0.0f;
  }
}

__device__ __forceinline__ float dot_row(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
  for (int64_t c = 0; c < n; ++c) s += a[c] * b[c];
  return s;
}

// grid (query tiles, NH, B).
template <typename Act, bool kMasked>
__global__ void __launch_bounds__(kThreads)
    attention_forward_kernel(Act* out, float* lse, const Act* q, const Act* kv, Dims d,
                             Masks<Act> masks) {
  extern __shared__ float smem[];
  const int64_t HD = d.HD, q0 = int64_t{blockIdx.x} * kBr, h = blockIdx.y, b = blockIdx.z;
  const int kp = static_cast<int>(HD) + 1;
  float* qs = smem;           // (kBr, HD)
  float* ks = qs + kBr * HD;  // (kBc, HD + 1)
  float* vs = ks + kBc * kp;  // (kBc, HD)
  const Act* kb = kv + b * d.Tk * d.Rkv + d.k_col + h / d.group * HD;
  load_tile(qs, static_cast<int>(HD), q + b * d.Tq * d.Rq + h * HD, d.Rq, q0, kBr, d.Tq, HD);

  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  HeadMasks<Act> hm{};
  int32_t q_seg[kRowsPerWarp] = {};
  if constexpr (kMasked) {
    hm = head_masks(masks, d, b, h);
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      if (hm.q_seg != nullptr) {
        q_seg[rr] = segment_at(hm.q_seg, q0 + warp * kRowsPerWarp + rr, d.Tq);
      }
    }
  }
  float m[kRowsPerWarp], l[kRowsPerWarp], o[kRowsPerWarp][kCols];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    m[rr] = -INFINITY;
    l[rr] = 0.0f;
#pragma unroll
    for (int i = 0; i < kCols; ++i) o[rr][i] = 0.0f;
  }
  const int64_t key_end = d.causal ? max(int64_t{0}, min(d.Tk, q0 + kBr + d.shift)) : d.Tk;
  for (int64_t k0 = 0; k0 < key_end; k0 += kBc) {
    __syncthreads();
    load_tile(ks, kp, kb, d.Rkv, k0, kBc, d.Tk, HD);
    load_tile(vs, static_cast<int>(HD), kb + d.KVH * HD, d.Rkv, k0, kBc, d.Tk, HD);
    __syncthreads();
    int32_t k_seg = 0;
    if constexpr (kMasked) {
      if (hm.k_seg != nullptr) k_seg = segment_at(hm.k_seg, k0 + lane, d.Tk);
    }
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const int r = warp * kRowsPerWarp + rr;
      const int64_t t = q0 + r;
      if (t >= d.Tq) continue;
      bool ok = visible(t, k0 + lane, d);
      if constexpr (kMasked) ok = ok && (hm.q_seg == nullptr || q_seg[rr] == k_seg);
      float s = ok ? d.scale * dot_row(qs + r * HD, ks + lane * kp, HD) : -INFINITY;
      if constexpr (kMasked) {
        if (ok && hm.bias != nullptr) s += to_f32(hm.bias[t * d.Tk + k0 + lane]);
      }
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
    if (t >= d.Tq) continue;
    const bool seen = l[rr] > 0.0f;  // false: every key masked (or Tk = 0)
    const float inv = seen ? 1.0f / l[rr] : 0.0f;
    Act* orow = out + (b * d.Tq + t) * d.OC + h * HD;
#pragma unroll
    for (int i = 0; i < kCols; ++i) {
      const int64_t c = lane + i * kWarp;
      if (c < HD) store(&orow[c], o[rr][i] * inv);
    }
    if (lane == 0) lse[(b * d.NH + h) * d.Tq + t] = seen ? m[rr] + logf(l[rr]) : -INFINITY;
  }
}

// D[b, h, t] = Σ_c dout · out over the head's columns; one warp per (b, t, h).
template <typename Act>
__global__ void attention_row_dot_kernel(float* D, const Act* dout, const Act* out, int64_t B,
                                         Dims d) {
  const int64_t w = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (w >= B * d.Tq * d.NH) return;
  const int64_t h = w % d.NH, bt = w / d.NH, b = bt / d.Tq, t = bt % d.Tq;
  const Act* dy = dout + bt * d.OC + h * d.HD;
  const Act* y = out + bt * d.OC + h * d.HD;
  float s = 0.0f;
  for (int64_t c = lane; c < d.HD; c += kWarp) s += to_f32(dy[c]) * to_f32(y[c]);
  s = warp_sum(s);
  if (lane == 0) D[(b * d.NH + h) * d.Tq + t] = s;
}

// grid (key tiles, KVH, B): dK, dV of kBc keys of one key/value head, over its query heads.
template <typename Act, bool kMasked>
__global__ void __launch_bounds__(kThreads)
    attention_backward_kv_kernel(Act* dkv, const Act* dout, const float* lse, const float* D,
                                 const Act* q, const Act* kv, Dims d, Masks<Act> masks) {
  extern __shared__ float smem[];
  const int64_t HD = d.HD, k0 = int64_t{blockIdx.x} * kBc, g = blockIdx.y, b = blockIdx.z;
  const int qp = static_cast<int>(HD) + 1;
  float* qs = smem;             // (kBr, HD + 1)
  float* dos = qs + kBr * qp;   // (kBr, HD + 1)
  float* ks = dos + kBr * qp;   // (kBc, HD)
  float* vs = ks + kBc * HD;    // (kBc, HD)
  float* lses = vs + kBc * HD;  // (kBr)
  float* Ds = lses + kBr;       // (kBr)
  float* bs = Ds + kBr;         // (kBr, kBiasPitch), kMasked only
  const int64_t kv_offset = b * d.Tk * d.Rkv + d.k_col + g * HD;
  load_tile(ks, static_cast<int>(HD), kv + kv_offset, d.Rkv, k0, kBc, d.Tk, HD);
  load_tile(vs, static_cast<int>(HD), kv + kv_offset + d.KVH * HD, d.Rkv, k0, kBc, d.Tk, HD);

  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  int32_t k_seg[kRowsPerWarp] = {};
  if constexpr (kMasked) {
    if (masks.k_seg != nullptr) {
#pragma unroll
      for (int kk = 0; kk < kRowsPerWarp; ++kk) {
        k_seg[kk] = segment_at(masks.k_seg + b * d.Tk, k0 + warp * kRowsPerWarp + kk, d.Tk);
      }
    }
  }
  float dk[kRowsPerWarp][kCols], dv[kRowsPerWarp][kCols];
#pragma unroll
  for (int kk = 0; kk < kRowsPerWarp; ++kk) {
#pragma unroll
    for (int i = 0; i < kCols; ++i) dk[kk][i] = dv[kk][i] = 0.0f;
  }
  const int64_t q_begin = tc::first_query_tile(d, k0, kBr);
  for (int64_t h = g * d.group; h < (g + 1) * d.group; ++h) {
    HeadMasks<Act> hm{};
    if constexpr (kMasked) hm = head_masks(masks, d, b, h);
    for (int64_t q0 = q_begin; q0 < d.Tq; q0 += kBr) {
      __syncthreads();
      load_tile(qs, qp, q + b * d.Tq * d.Rq + h * HD, d.Rq, q0, kBr, d.Tq, HD);
      load_tile(dos, qp, dout + b * d.Tq * d.OC + h * HD, d.OC, q0, kBr, d.Tq, HD);
      if (threadIdx.x < kBr) {
        const int64_t t = q0 + threadIdx.x;
        lses[threadIdx.x] = t < d.Tq ? lse[(b * d.NH + h) * d.Tq + t] : 0.0f;
        Ds[threadIdx.x] = t < d.Tq ? D[(b * d.NH + h) * d.Tq + t] : 0.0f;
      }
      int32_t q_seg = 0;
      if constexpr (kMasked) {
        if (hm.bias != nullptr) load_bias_tile(bs, hm.bias, q0, k0, d);
        if (hm.q_seg != nullptr) q_seg = segment_at(hm.q_seg, q0 + lane, d.Tq);
      }
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < kRowsPerWarp; ++kk) {
        const int j = warp * kRowsPerWarp + kk;
        if (k0 + j >= d.Tk) continue;
        // Lane = query row of the tile.
        bool ok = visible(q0 + lane, k0 + j, d);
        if constexpr (kMasked) {
          // A row that saw no key (lse = -inf) has no gradient.
          ok = ok && lses[lane] != -INFINITY && (hm.q_seg == nullptr || q_seg == k_seg[kk]);
        }
        float p = 0.0f, ds = 0.0f;
        if (ok) {
          float s = d.scale * dot_row(qs + lane * qp, ks + j * HD, HD);
          if constexpr (kMasked) {
            if (hm.bias != nullptr) s += bs[lane * kBiasPitch + j];
          }
          p = expf(s - lses[lane]);
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
    if (key >= d.Tk) continue;
    Act* krow = dkv + kv_offset + key * d.Rkv;
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

// dQ of kBr query rows of one head of batch row b, and (kMasked, db not null) the bias gradient
// of those rows into db (Tq, Tk): written with `assign`, else added.
template <typename Act, bool kMasked>
__device__ __forceinline__ void backward_q_tile(Act* dq, const Act* dout, const float* lse,
                                                const float* D, const Act* q, const Act* kv,
                                                const Dims& d, const Masks<Act>& masks, int64_t b,
                                                float* db, bool assign, float* smem) {
  const int64_t HD = d.HD, q0 = int64_t{blockIdx.x} * kBr, h = blockIdx.y;
  const int kp = static_cast<int>(HD) + 1;
  float* qs = smem;            // (kBr, HD)
  float* dos = qs + kBr * HD;  // (kBr, HD)
  float* ks = dos + kBr * HD;  // (kBc, HD + 1)
  float* vs = ks + kBc * kp;   // (kBc, HD + 1)
  const Act* kb = kv + b * d.Tk * d.Rkv + d.k_col + h / d.group * HD;
  load_tile(qs, static_cast<int>(HD), q + b * d.Tq * d.Rq + h * HD, d.Rq, q0, kBr, d.Tq, HD);
  load_tile(dos, static_cast<int>(HD), dout + b * d.Tq * d.OC + h * HD, d.OC, q0, kBr, d.Tq, HD);

  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  HeadMasks<Act> hm{};
  int32_t q_seg[kRowsPerWarp] = {};
  if constexpr (kMasked) hm = head_masks(masks, d, b, h);
  float dq_acc[kRowsPerWarp][kCols], row_lse[kRowsPerWarp], row_D[kRowsPerWarp];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int64_t t = q0 + warp * kRowsPerWarp + rr;
    row_lse[rr] = t < d.Tq ? lse[(b * d.NH + h) * d.Tq + t] : 0.0f;
    row_D[rr] = t < d.Tq ? D[(b * d.NH + h) * d.Tq + t] : 0.0f;
    if constexpr (kMasked) {
      if (hm.q_seg != nullptr) q_seg[rr] = segment_at(hm.q_seg, t, d.Tq);
    }
#pragma unroll
    for (int i = 0; i < kCols; ++i) dq_acc[rr][i] = 0.0f;
  }
  const int64_t key_end = d.causal ? max(int64_t{0}, min(d.Tk, q0 + kBr + d.shift)) : d.Tk;
  for (int64_t k0 = 0; k0 < key_end; k0 += kBc) {
    __syncthreads();
    load_tile(ks, kp, kb, d.Rkv, k0, kBc, d.Tk, HD);
    load_tile(vs, kp, kb + d.KVH * HD, d.Rkv, k0, kBc, d.Tk, HD);
    __syncthreads();
    int32_t k_seg = 0;
    if constexpr (kMasked) {
      if (hm.k_seg != nullptr) k_seg = segment_at(hm.k_seg, k0 + lane, d.Tk);
    }
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const int r = warp * kRowsPerWarp + rr;
      const int64_t t = q0 + r;
      if (t >= d.Tq) continue;
      // Lane = key of the tile.
      bool ok = visible(t, k0 + lane, d);
      if constexpr (kMasked) {
        ok = ok && row_lse[rr] != -INFINITY && (hm.q_seg == nullptr || q_seg[rr] == k_seg);
      }
      float ds = 0.0f;  // the gradient of the biased score, then of the unscaled one
      if (ok) {
        float s = d.scale * dot_row(qs + r * HD, ks + lane * kp, HD);
        if constexpr (kMasked) {
          if (hm.bias != nullptr) s += to_f32(hm.bias[t * d.Tk + k0 + lane]);
        }
        const float p = expf(s - row_lse[rr]);
        const float dp = dot_row(dos + r * HD, vs + lane * kp, HD);
        ds = p * (dp - row_D[rr]);
      }
      if constexpr (kMasked) {
        if (db != nullptr && k0 + lane < d.Tk) {
          float* e = db + t * d.Tk + k0 + lane;
          *e = assign ? ds : *e + ds;
        }
      }
      ds *= d.scale;
      for (int j = 0; j < kBc; ++j) {
        const float dsj = __shfl_sync(0xffffffffu, ds, j);
#pragma unroll
        for (int i = 0; i < kCols; ++i) {
          const int64_t c = lane + i * kWarp;
          if (c < HD) dq_acc[rr][i] += dsj * ks[j * kp + c];
        }
      }
    }
  }
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int64_t t = q0 + warp * kRowsPerWarp + rr;
    if (t >= d.Tq) continue;
    Act* qrow = dq + (b * d.Tq + t) * d.Rq + h * HD;
#pragma unroll
    for (int i = 0; i < kCols; ++i) {
      const int64_t c = lane + i * kWarp;
      if (c < HD) add_to(&qrow[c], dq_acc[rr][i]);
    }
  }
}

// grid (query tiles, NH, batch chunks): dQ of kBr query rows of one head, for one batch row
// (kMasked = false: chunks are batch rows) or a chunk of them in order (DbiasOut).
template <typename Act, bool kMasked>
__global__ void __launch_bounds__(kThreads)
    attention_backward_q_kernel(Act* dq, const Act* dout, const float* lse, const float* D,
                                const Act* q, const Act* kv, Dims d, Masks<Act> masks,
                                DbiasOut dbias, int64_t B) {
  extern __shared__ float smem[];
  if constexpr (!kMasked) {
    backward_q_tile<Act, false>(dq, dout, lse, D, q, kv, d, masks, blockIdx.z, nullptr, false,
                                smem);
  } else {
    const int64_t b_begin = int64_t{blockIdx.z} * dbias.rows_per_block;
    const int64_t b_end = min(B, b_begin + dbias.rows_per_block);
    float* db = dbias.out == nullptr ? nullptr
                                     : dbias.out + blockIdx.z * dbias.slot_stride +
                                           int64_t{blockIdx.y} * d.Tq * d.Tk;
    for (int64_t b = b_begin; b < b_end; ++b) {
      if (b != b_begin) __syncthreads();  // the previous row's last reads of the Q tile
      backward_q_tile<Act, true>(dq, dout, lse, D, q, kv, d, masks, b, db,
                                 dbias.assign && b == b_begin, smem);
    }
  }
}

// dbias (NH, Tq, Tk) += Σ_c partials[c] in chunk order. Causal rows leave the keys past their
// tile unwritten in the partials; their gradient is zero (as of every key past query + shift).
__global__ void attention_dbias_sum_kernel(float* dbias, const float* partials, int64_t chunks,
                                           int64_t n, Dims d) {
  AX_GRID_STRIDE(e, n) {
    const int64_t key = e % d.Tk, query = e / d.Tk % d.Tq;
    if (d.causal && key > query + d.shift) continue;
    float s = partials[e];
    for (int64_t c = 1; c < chunks; ++c) s += partials[c * n + e];
    dbias[e] += s;
  }
}

size_t forward_bytes(int64_t HD) { return sizeof(float) * (kBr * HD + kBc * (HD + 1) + kBc * HD); }
size_t backward_kv_bytes(int64_t HD, bool masked) {
  return sizeof(float) *
         (2 * kBr * (HD + 1) + 2 * kBc * HD + 2 * kBr + (masked ? kBr * kBiasPitch : 0));
}
size_t backward_q_bytes(int64_t HD) { return sizeof(float) * (2 * kBr * HD + 2 * kBc * (HD + 1)); }

template <typename Act>
Masks<Act> masks_of(const AttnShape& s, const AttnMasks<Act>& m) {
  return {m.bias, m.bias_batch == 1 ? 0 : s.NH * s.Tq * s.Tk, m.q_segments, m.k_segments};
}

// Whether the tensor-core kernels take a call whose tensors start at `ptrs`.
template <typename Act>
bool tensor_cores_take(const AttnShape& s, std::initializer_list<const void*> ptrs) {
  return s.tensor_core_shared > 0 &&
         tc::eligible(dims_of(s), std::is_same_v<Act, bf16>, ptrs.begin(),
                      static_cast<int>(ptrs.size()), s.tensor_core_shared);
}

}  // namespace

size_t attention_shared_bytes(int64_t head_dim) {
  return std::max(
      {forward_bytes(head_dim), backward_kv_bytes(head_dim, true), backward_q_bytes(head_dim)});
}

template <typename Act, bool kMasked>
void allow_shared_bytes(int bytes) {
  AX_CUDA_CHECK(cudaFuncSetAttribute(attention_forward_kernel<Act, kMasked>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  AX_CUDA_CHECK(cudaFuncSetAttribute(attention_backward_kv_kernel<Act, kMasked>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  AX_CUDA_CHECK(cudaFuncSetAttribute(attention_backward_q_kernel<Act, kMasked>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

void attention_init(size_t max_shared_bytes) {
  int bytes = static_cast<int>(std::min(max_shared_bytes, attention_shared_bytes(kAttnMaxHeadDim)));
  allow_shared_bytes<bf16, false>(bytes);
  allow_shared_bytes<bf16, true>(bytes);
  allow_shared_bytes<float, false>(bytes);
  allow_shared_bytes<float, true>(bytes);
  tc_attention_init(max_shared_bytes);
}

template <typename Act>
void attention_forward(Act* out, float* lse, const Act* q, const Act* kv, const AttnShape& s,
                       const AttnMasks<Act>& m, cudaStream_t stream) {
  if (s.B * s.Tq * s.NH == 0) return;
  const Dims d = dims_of(s);
  if constexpr (std::is_same_v<Act, bf16>) {
    if (tensor_cores_take<Act>(s, {out, q, kv})) {
      tc_attention_forward(out, lse, q, kv, s, m, stream);
      return;
    }
  }
  const dim3 grid = grid_of(ceil_div(s.Tq, kBr), s.NH, s.B);
  const size_t bytes = forward_bytes(s.HD);
  if (m.present()) {
    attention_forward_kernel<Act, true>
        <<<grid, kThreads, bytes, stream>>>(out, lse, q, kv, d, masks_of(s, m));
  } else {
    attention_forward_kernel<Act, false>
        <<<grid, kThreads, bytes, stream>>>(out, lse, q, kv, d, Masks<Act>{});
  }
  AX_CUDA_CHECK_LAUNCH();
}

template <typename Act>
void attention_backward(Act* dq, Act* dkv, float* dbias, const Act* dout, const Act* out,
                        const float* lse, const Act* q, const Act* kv, float* scratch,
                        const AttnShape& s, const AttnMasks<Act>& m, cudaStream_t stream) {
  if (s.B * s.Tq * s.NH == 0) return;
  const Dims d = dims_of(s);
  float* row_dots = scratch;
  const int64_t warps = s.B * s.Tq * s.NH;
  attention_row_dot_kernel<<<static_cast<unsigned>(ceil_div(warps * kWarp, kThreads)), kThreads, 0,
                             stream>>>(row_dots, dout, out, s.B, d);
  AX_CUDA_CHECK_LAUNCH();
  // The bias gradient: per batch row into dbias, or for a shared bias in chunks of rows.
  const bool shared = dbias != nullptr && m.bias_batch == 1;
  const DbiasPlan plan = dbias_plan(s.B, s.Tq, s.Tk, s.NH, shared);
  const int64_t n = s.NH * s.Tq * s.Tk;
  DbiasOut out_db{dbias, shared ? 0 : n, plan.rows_per_chunk, false};
  if (plan.partials) out_db = {row_dots + s.B * s.NH * s.Tq, n, plan.rows_per_chunk, true};
  bool tensor_cores = false;
  if constexpr (std::is_same_v<Act, bf16>) {
    tensor_cores = tensor_cores_take<Act>(s, {dq, dkv, dout, q, kv});
    if (tensor_cores) {
      tc_attention_backward(dq, dkv, dout, lse, row_dots, q, kv, s, m, plan, out_db, stream);
    }
  }
  if (!tensor_cores) {
    const bool masked = m.present();
    const Masks<Act> masks = masked ? masks_of(s, m) : Masks<Act>{};
    if (s.Tk > 0) {
      const dim3 grid = grid_of(ceil_div(s.Tk, kBc), s.KVH, s.B);
      const size_t bytes = backward_kv_bytes(s.HD, masked);
      if (masked) {
        attention_backward_kv_kernel<Act, true>
            <<<grid, kThreads, bytes, stream>>>(dkv, dout, lse, row_dots, q, kv, d, masks);
      } else {
        attention_backward_kv_kernel<Act, false>
            <<<grid, kThreads, bytes, stream>>>(dkv, dout, lse, row_dots, q, kv, d, masks);
      }
      AX_CUDA_CHECK_LAUNCH();
    }
    const dim3 grid = grid_of(ceil_div(s.Tq, kBr), s.NH, plan.chunks);
    const size_t bytes = backward_q_bytes(s.HD);
    if (masked) {
      attention_backward_q_kernel<Act, true><<<grid, kThreads, bytes, stream>>>(
          dq, dout, lse, row_dots, q, kv, d, masks, out_db, s.B);
    } else {
      attention_backward_q_kernel<Act, false><<<grid, kThreads, bytes, stream>>>(
          dq, dout, lse, row_dots, q, kv, d, masks, out_db, s.B);
    }
    AX_CUDA_CHECK_LAUNCH();
  }
  if (out_db.assign) {
    attention_dbias_sum_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(dbias, out_db.out,
                                                                               plan.chunks, n, d);
    AX_CUDA_CHECK_LAUNCH();
  }
}

// The launchers for both activation types (cuda_kernels.h).
#define AX_ATTENTION_LAUNCHERS(Act)                                                          \
  template void attention_forward(Act*, float*, const Act*, const Act*, const AttnShape&,    \
                                  const AttnMasks<Act>&, cudaStream_t);                      \
  template void attention_backward(Act*, Act*, float*, const Act*, const Act*, const float*, \
                                   const Act*, const Act*, float*, const AttnShape&,         \
                                   const AttnMasks<Act>&, cudaStream_t);
AX_ATTENTION_LAUNCHERS(bf16)
AX_ATTENTION_LAUNCHERS(float)
#undef AX_ATTENTION_LAUNCHERS

}  // namespace ax::train::cuda
