// Attention on tensor cores (bf16 products, f32 accumulation): the block programs of the forward
// pass and of both backward kernels, written once against a context `C` that supplies the
// threads, the barrier and a 16×16 tile product. cuda_attention_tc.cu runs them with a device
// context (CUDA threads, __syncthreads, nvcuda::wmma); tests/trainer/backend/attention_tc_test.cc
// runs the same code on the CPU with a context that emulates the tile product and checks the
// alignment rules wmma imposes, so the tiling, masking and online softmax are tested without a
// GPU (docs/cuda-backend.md "Attention kernels").
//
// Shapes it takes (tc::eligible): bf16 activations, head size a multiple of 16 up to 128, 16-byte
// aligned rows (row pitches, key column and base pointers in multiples of 8 elements). Causal or
// not, GQA, segment ids, an additive bias (T5's relative position bias, shared by the batch or
// per row) with its gradient, any Tq and Tk. Everything else runs the f32 kernels of
// cuda_attention.cu.
//
// Every phase of a block program is a loop over work items (`for_each`: one per thread;
// `for_each_warp`: one 16×16 output tile per warp) that reads only what earlier phases wrote and
// writes only its own items; phases are separated by `sync`. State that lives across phases
// (running max and sum, the O, dK, dV and dQ accumulators) lives in shared memory, so a phase is
// the same computation whatever the thread that runs an item.
//
// Forward (grid: query tiles × heads × batch): per key tile, S = Q·Kᵀ (f32), the online softmax
// over the tile's scores (row max from 4 partial maxima per row; P = exp(S - m) rounded to bf16;
// O rescaled by exp(m_old - m)), O += P·V. lse = m + log(l); a row that sees no key gets zeros
// and lse = -inf. Backward as FlashAttention-2 with its two halves split so nothing is atomic:
// per key tile (dK, dV over the group's query heads and query tiles; dV += Pᵀ·dO, dK += dSᵀ·Q)
// and per query tile (dQ += dS·K); both recompute S and dP = dO·Vᵀ from the saved lse and
// D = Σ dO·O. P and dS enter the products rounded to bf16. The bias gradient is dS before the
// scale, f32, written by the dQ program (which sees each score once): a block walks a chunk of
// batch rows in order and adds into one slot (attention_plan.h), so no sum is atomic.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define AX_TC_FN __device__ __forceinline__
#define AX_TC_HD __host__ __device__ inline
#else
#include <cmath>
#define AX_TC_FN inline
#define AX_TC_HD inline
#endif

namespace ax::train::cuda::tc {

inline constexpr int kTile = 64;  // query rows and keys per tile
inline constexpr int kWarps = 8;
inline constexpr int kThreads = kWarps * 32;
inline constexpr int kMaxHeadDim = 128;
inline constexpr int kPad = 8;  // elements past each bf16 row (bank spread, 16-byte rows)

struct Shape {
  int64_t B, Tq, Tk, NH, KVH, HD, Rq, Rkv, OC, group;
  int64_t k_col;  // column of key head 0 in a kv row; value head 0 is KVH·HD after it
  float scale;
  bool causal;
  // Causal: query i sees keys j <= i + shift (AttentionSpec's q_first_position minus
  // k_first_position; 0 for self-attention over a whole row).
  int64_t shift;
};

// Row pitches (elements) and byte offsets of a block's shared-memory regions.
struct Layout {
  int ld_e;  // bf16 head tiles (kTile, HD + kPad)
  int ld_s;  // f32 score tiles (kTile, kTile + 4)
  int ld_p;  // bf16 score tiles (kTile, kTile + kPad)
  int ld_a;  // f32 accumulators (kTile, HD + 4)
  size_t q, k, v, dout, s, dp, p, ds, acc, acc2, rows, bytes;
};

AX_TC_HD size_t align128(size_t n) { return (n + 127) / 128 * 128; }

enum class Kernel { kForward, kBackwardKV, kBackwardQ };

// One block's regions for a kernel: rows holds 13 floats and 2 ints per tile row (Rows).
AX_TC_HD Layout layout_for(Kernel kernel, int64_t HD) {
  Layout l{};
  l.ld_e = static_cast<int>(HD) + kPad;
  l.ld_s = kTile + 4;
  l.ld_p = kTile + kPad;
  l.ld_a = static_cast<int>(HD) + 4;
  const size_t e_tile = align128(size_t{kTile} * l.ld_e * 2);
  const size_t s_tile = align128(size_t{kTile} * l.ld_s * 4);
  const size_t p_tile = align128(size_t{kTile} * l.ld_p * 2);
  const size_t a_tile = align128(size_t{kTile} * l.ld_a * 4);
  const bool fwd = kernel == Kernel::kForward, kv = kernel == Kernel::kBackwardKV;
  size_t at = 0;
  auto take = [&at](size_t n) {
    const size_t o = at;
    at += n;
    return o;
  };
  l.q = take(e_tile);
  l.k = take(e_tile);
  l.v = take(e_tile);
  l.dout = fwd ? 0 : take(e_tile);
  l.s = take(s_tile);
  l.dp = fwd ? 0 : take(s_tile);
  l.p = fwd || kv ? take(p_tile) : 0;
  l.ds = fwd ? 0 : take(p_tile);
  l.acc = take(a_tile);
  l.acc2 = kv ? take(a_tile) : 0;
  l.rows = take(align128(size_t{kTile} * (13 * 4 + 2 * 4)));
  l.bytes = at;
  return l;
}

// Shared memory the largest of the three block programs needs for a head size.
AX_TC_HD size_t shared_bytes(int64_t HD) {
  const size_t f = layout_for(Kernel::kForward, HD).bytes;
  const size_t kv = layout_for(Kernel::kBackwardKV, HD).bytes;
  const size_t q = layout_for(Kernel::kBackwardQ, HD).bytes;
  return f > kv ? (f > q ? f : q) : (kv > q ? kv : q);
}

// Whether the tensor-core kernels take a call: bf16 activations, HD a multiple of 16 up to
// kMaxHeadDim, row pitches and the key column multiples of 8 elements, the addresses of q, kv
// and the rows they move 16 bytes at a time (`ptrs`) 16-byte aligned, and shared_bytes(HD)
// within the device's limit.
AX_TC_HD bool eligible(const Shape& d, bool bf16, const void* const* ptrs, int n_ptrs,
                       size_t max_shared) {
  if (!bf16 || d.HD % 16 != 0 || d.HD > kMaxHeadDim || d.Rq % 8 != 0 || d.Rkv % 8 != 0 ||
      d.k_col % 8 != 0 || shared_bytes(d.HD) > max_shared) {
    return false;
  }
  for (int i = 0; i < n_ptrs; ++i) {
    if (reinterpret_cast<uintptr_t>(ptrs[i]) % 16 != 0) return false;
  }
  return true;
}

// The per-row scratch of a block (in `rows`): f32 vectors of kTile, then the segment ids.
struct Rows {
  float *m, *l, *m_new, *lse, *D;
  float *part_max, *part_sum;  // (kTile, 4)
  int32_t *q_seg, *k_seg;
};

AX_TC_FN Rows rows_of(unsigned char* smem, const Layout& l) {
  float* f = reinterpret_cast<float*>(smem + l.rows);
  Rows r;
  r.m = f;
  r.l = f + kTile;
  r.m_new = f + 2 * kTile;
  r.lse = f + 3 * kTile;
  r.D = f + 4 * kTile;
  r.part_max = f + 5 * kTile;
  r.part_sum = f + 9 * kTile;
  r.q_seg = reinterpret_cast<int32_t*>(f + 13 * kTile);
  r.k_seg = r.q_seg + kTile;
  return r;
}

// A block's shared-memory regions as typed pointers (Layout's offsets); a region the kernel's
// layout does not have points at the start of shared memory and is not used.
template <class E>
struct Regions {
  E *q, *k, *v, *dout, *p, *ds;  // bf16 tiles
  float *s, *dp, *acc, *acc2;    // f32 tiles
};

template <class E>
AX_TC_FN Regions<E> regions_of(unsigned char* smem, const Layout& l) {
  auto e = [&](size_t at) { return reinterpret_cast<E*>(smem + at); };
  auto f = [&](size_t at) { return reinterpret_cast<float*>(smem + at); };
  return {e(l.q), e(l.k), e(l.v), e(l.dout), e(l.p), e(l.ds), f(l.s), f(l.dp), f(l.acc), f(l.acc2)};
}

// The end of the keys a query tile from q0 sees: causal tiles stop at the (shifted) diagonal; a
// tile before the first key sees none (0).
AX_TC_FN int64_t key_end(const Shape& d, int64_t q0) {
  if (!d.causal) return d.Tk;
  const int64_t end = q0 + kTile + d.shift;
  return end < 0 ? 0 : (d.Tk < end ? d.Tk : end);
}

// The first query tile that sees key k0 (causal: from query k0 - shift on; tiles start at
// multiples of kTile), 0 when not causal.
AX_TC_FN int64_t first_query_tile(const Shape& d, int64_t k0, int64_t tile) {
  const int64_t first = k0 - d.shift;
  return d.causal && first > 0 ? first / tile * tile : 0;
}

// The optional additive bias, (Bb, NH, Tq, Tk) in the activation type: null, or shared by the
// batch (batch_stride 0) or one per row (batch_stride NH·Tq·Tk).
template <class E>
struct Bias {
  const E* values;
  int64_t batch_stride;
};

// The (Tq, Tk) bias of head h of batch row b, or null.
template <class E>
AX_TC_FN const E* head_bias(const Bias<E>& bias, const Shape& d, int64_t b, int64_t h) {
  return bias.values == nullptr ? nullptr : bias.values + b * bias.batch_stride + h * d.Tq * d.Tk;
}

AX_TC_FN bool visible(int64_t query, int64_t key, const Shape& d) {
  return query < d.Tq && key < d.Tk && (!d.causal || key <= query + d.shift);
}

// kTile rows of a head (HD columns) from a (T, stride) matrix into a shared tile of pitch ld,
// 8 elements (16 bytes) per item; rows past T are zero.
template <class C, class E>
AX_TC_FN void load_rows(const C& c, E* dst, int ld, const E* src, int64_t stride, int64_t t0,
                        int64_t T, int64_t HD) {
  const int per_row = static_cast<int>(HD / 8);
  c.for_each(kTile * per_row, [&](int i) {
    const int r = i / per_row, col = i % per_row * 8;
    if (t0 + r < T) {
      C::copy8(dst + r * ld + col, src + (t0 + r) * stride + col);
    } else {
      C::zero8(dst + r * ld + col);
    }
  });
}

// The segment ids of kTile positions from t0 into dst (0 past T: never visible), when present.
template <class C>
AX_TC_FN void load_segments(const C& c, int32_t* dst, const int32_t* seg, int64_t t0, int64_t T) {
  if (seg == nullptr) return;
  c.for_each(kTile, [&](int i) { dst[i] = t0 + i < T ? seg[t0 + i] : 0; });
}

// Tile `tile` (of 16) of a kTile × kTile f32 output (pitch ldc) = A·Bᵀ over HD, A and B bf16 head
// tiles of pitch ld.
template <class C, class E>
AX_TC_FN void scores(const C& c, int tile, float* out, int ldc, const E* a, const E* b, int ld,
                     int64_t HD) {
  const int i = tile / (kTile / 16), j = tile % (kTile / 16);
  c.template mma16<false, true>(out + i * 16 * ldc + j * 16, ldc, false, a + i * 16 * ld, ld,
                                b + j * 16 * ld, ld, static_cast<int>(HD));
}

// acc (kTile × HD, f32, pitch lda) += op(A)·B with A a kTile × kTile bf16 tile (transposed when
// kTransA) and B kTile × HD bf16 rows; `tile` indexes the 16×16 output tiles.
template <bool kTransA, class C, class E>
AX_TC_FN void accumulate(const C& c, int tile, float* acc, int lda, const E* a, int ldp, const E* b,
                         int ld, int64_t HD) {
  const int col_tiles = static_cast<int>(HD / 16);
  const int i = tile / col_tiles, j = tile % col_tiles;
  const E* a_tile = kTransA ? a + i * 16 : a + i * 16 * ldp;
  c.template mma16<kTransA, false>(acc + i * 16 * lda + j * 16, lda, true, a_tile, ldp, b + j * 16,
                                   ld, kTile);
}

template <class C>
AX_TC_FN void zero_f32(const C& c, float* dst, int n) {
  c.for_each(n, [&](int i) { dst[i] = 0.0f; });
}

// One forward block: kTile query rows from q0 of head h of batch row b. out (B, Tq, OC),
// lse (B, NH, Tq).
template <class C, class E>
AX_TC_FN void forward_block(const C& c, unsigned char* smem, E* out, float* lse, const E* q,
                            const E* kv, const int32_t* q_seg, const int32_t* k_seg,
                            const Bias<E>& bias, const Shape& d, int64_t q0, int64_t h, int64_t b) {
  const Layout L = layout_for(Kernel::kForward, d.HD);
  const Regions<E> M = regions_of<E>(smem, L);
  const Rows R = rows_of(smem, L);
  const int64_t HD = d.HD;
  const int hd = static_cast<int>(HD);
  const bool segs = q_seg != nullptr;
  const E* kb = kv + b * d.Tk * d.Rkv + d.k_col + h / d.group * HD;
  const E* hb = head_bias(bias, d, b, h);

  load_rows(c, M.q, L.ld_e, q + b * d.Tq * d.Rq + h * HD, d.Rq, q0, d.Tq, HD);
  if (segs) load_segments(c, R.q_seg, q_seg + b * d.Tq, q0, d.Tq);
  c.for_each(kTile * L.ld_a, [&](int i) { M.acc[i] = 0.0f; });
  c.for_each(kTile, [&](int r) {
    R.m[r] = -INFINITY;
    R.l[r] = 0.0f;
  });
  const int64_t keys = key_end(d, q0);
  for (int64_t k0 = 0; k0 < keys; k0 += kTile) {
    c.sync();
    load_rows(c, M.k, L.ld_e, kb, d.Rkv, k0, d.Tk, HD);
    load_rows(c, M.v, L.ld_e, kb + d.KVH * HD, d.Rkv, k0, d.Tk, HD);
    if (segs) load_segments(c, R.k_seg, k_seg + b * d.Tk, k0, d.Tk);
    c.sync();
    c.for_each_warp(16, [&](int t) { scores(c, t, M.s, L.ld_s, M.q, M.k, L.ld_e, HD); });
    c.sync();
    // Scale, bias and mask the scores in place; a partial maximum per quarter of a row (keys
    // part, part + 4, ...).
    c.for_each(kTile * 4, [&](int i) {
      const int r = i / 4, part = i % 4;
      float mx = -INFINITY;
      for (int j = part; j < kTile; j += 4) {
        bool ok = visible(q0 + r, k0 + j, d);
        if (segs) ok = ok && R.q_seg[r] == R.k_seg[j];
        float s = -INFINITY;
        if (ok) {
          s = C::mul(M.s[r * L.ld_s + j], d.scale);  // rounded alone, as the backward's
          if (hb != nullptr) s += C::f32(hb[(q0 + r) * d.Tk + k0 + j]);
        }
        M.s[r * L.ld_s + j] = s;
        mx = s > mx ? s : mx;
      }
      R.part_max[i] = mx;
    });
    c.sync();
    // P = exp(S - m_new), partial sums, and O's rows rescaled by exp(m_old - m_new).
    c.for_each(kTile * 4, [&](int i) {
      const int r = i / 4, part = i % 4;
      const float m_old = R.m[r];
      float m_new = m_old;
      for (int p = 0; p < 4; ++p) {
        const float x = R.part_max[r * 4 + p];
        m_new = x > m_new ? x : m_new;
      }
      const bool empty = m_new == -INFINITY;  // no visible key yet
      const float alpha = empty ? 1.0f : C::exp(m_old - m_new);
      float sum = 0.0f;
      for (int j = part; j < kTile; j += 4) {
        const float p = empty ? 0.0f : C::exp(M.s[r * L.ld_s + j] - m_new);
        M.p[r * L.ld_p + j] = C::round(p);
        sum += p;
      }
      R.part_sum[i] = sum;
      if (part == 0) R.m_new[r] = m_new;
      for (int col = part; col < hd; col += 4) M.acc[r * L.ld_a + col] *= alpha;
    });
    c.sync();
    c.for_each_warp(4 * hd / 16, [&](int t) {
      accumulate<false>(c, t, M.acc, L.ld_a, M.p, L.ld_p, M.v, L.ld_e, HD);
    });
    c.for_each(kTile, [&](int r) {
      const float m_new = R.m_new[r];
      const float alpha = m_new == -INFINITY ? 1.0f : C::exp(R.m[r] - m_new);
      const float* ps = R.part_sum + r * 4;
      R.l[r] = R.l[r] * alpha + ((ps[0] + ps[1]) + (ps[2] + ps[3]));
      R.m[r] = m_new;
    });
  }
  c.sync();
  const int per_row = hd / 8;
  c.for_each(kTile * per_row, [&](int i) {
    const int r = i / per_row, col = i % per_row * 8;
    const int64_t t = q0 + r;
    if (t >= d.Tq) return;
    const float l = R.l[r];
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;  // 0: every key masked (or Tk = 0)
    float v[8];
    for (int e = 0; e < 8; ++e) v[e] = M.acc[r * L.ld_a + col + e] * inv;
    C::store8(out + (b * d.Tq + t) * d.OC + h * HD + col, v);
  });
  c.for_each(kTile, [&](int r) {
    const int64_t t = q0 + r;
    if (t >= d.Tq) return;
    const float l = R.l[r];
    lse[(b * d.NH + h) * d.Tq + t] = l > 0.0f ? R.m[r] + C::log(l) : -INFINITY;
  });
}

// Where the dQ program writes the bias gradient of a head: (Tq, Tk) f32, written (`assign`) or
// added; out null: none.
struct BiasGrad {
  float* out;
  bool assign;
};

// P and dS of a (query tile q0, key tile k0) pair from S and dP (f32, in shared memory):
// P = exp(scale·S + bias - lse) where visible, dS = P·(dP - D)·scale; a row with lse = -inf has
// none. The bias gradient P·(dP - D) goes to db for the pair's scores inside (Tq, Tk).
template <class C, class E>
AX_TC_FN void probabilities(const C& c, const Layout& L, const Rows& R, const float* S,
                            const float* dP, E* P, E* dS, bool segs, const E* hb, BiasGrad db,
                            const Shape& d, int64_t q0, int64_t k0) {
  c.for_each(kTile * kTile, [&](int i) {
    const int r = i / kTile, j = i % kTile;
    bool ok = visible(q0 + r, k0 + j, d) && R.lse[r] != -INFINITY;
    if (segs) ok = ok && R.q_seg[r] == R.k_seg[j];
    float p = 0.0f, ds = 0.0f;  // ds: the gradient of the biased score, then of Q·Kᵀ
    if (ok) {
      float s = C::mul(S[r * L.ld_s + j], d.scale);  // as the forward's, never fused
      if (hb != nullptr) s += C::f32(hb[(q0 + r) * d.Tk + k0 + j]);
      p = C::exp(s - R.lse[r]);
      ds = p * (dP[r * L.ld_s + j] - R.D[r]);
    }
    if (db.out != nullptr && q0 + r < d.Tq && k0 + j < d.Tk) {
      float* e = db.out + (q0 + r) * d.Tk + k0 + j;
      *e = db.assign ? ds : *e + ds;
    }
    ds *= d.scale;
    if (P != nullptr) P[r * L.ld_p + j] = C::round(p);
    dS[r * L.ld_p + j] = C::round(ds);
  });
}

// lse and D of kTile query rows from q0 of head h (0 past Tq).
template <class C>
AX_TC_FN void load_row_stats(const C& c, const Rows& R, const float* lse, const float* D,
                             const Shape& d, int64_t q0, int64_t h, int64_t b) {
  c.for_each(kTile, [&](int r) {
    const int64_t t = q0 + r;
    const int64_t at = (b * d.NH + h) * d.Tq + t;
    R.lse[r] = t < d.Tq ? lse[at] : 0.0f;
    R.D[r] = t < d.Tq ? D[at] : 0.0f;
  });
}

// acc's first kTile rows (f32) added to kTile rows of a (T, stride) bf16 matrix from t0.
template <class C, class E>
AX_TC_FN void add_rows(const C& c, E* dst, int64_t stride, int64_t t0, int64_t T, const float* acc,
                       int lda, int64_t HD) {
  const int per_row = static_cast<int>(HD / 8);
  c.for_each(kTile * per_row, [&](int i) {
    const int r = i / per_row, col = i % per_row * 8;
    if (t0 + r < T) C::add8(dst + (t0 + r) * stride + col, acc + r * lda + col);
  });
}

// The query side of a backward tile pair: Q and dO rows from q0 of head h of batch row b, their
// lse and D, and their segment ids (when present).
template <class C, class E>
AX_TC_FN void load_query_tile(const C& c, const Layout& L, const Regions<E>& M, const Rows& R,
                              const E* q, const E* dout, const float* lse, const float* D,
                              const int32_t* q_seg, const Shape& d, int64_t q0, int64_t h,
                              int64_t b) {
  load_rows(c, M.q, L.ld_e, q + b * d.Tq * d.Rq + h * d.HD, d.Rq, q0, d.Tq, d.HD);
  load_rows(c, M.dout, L.ld_e, dout + b * d.Tq * d.OC + h * d.HD, d.OC, q0, d.Tq, d.HD);
  load_row_stats(c, R, lse, D, d, q0, h, b);
  if (q_seg != nullptr) load_segments(c, R.q_seg, q_seg + b * d.Tq, q0, d.Tq);
}

// S = Q·Kᵀ and dP = dO·Vᵀ of a tile pair, one phase of 32 warp tiles.
template <class C, class E>
AX_TC_FN void scores_and_dp(const C& c, const Layout& L, const Regions<E>& M, int64_t HD) {
  c.for_each_warp(32, [&](int t) {
    if (t < 16) {
      scores(c, t, M.s, L.ld_s, M.q, M.k, L.ld_e, HD);
    } else {
      scores(c, t - 16, M.dp, L.ld_s, M.dout, M.v, L.ld_e, HD);
    }
  });
}

// dK and dV of kTile keys from k0 of key/value head g of batch row b, over the group's query
// heads; added into dkv's key and value columns. D (B, NH, Tq) = Σ dO·O per row.
template <class C, class E>
AX_TC_FN void backward_kv_block(const C& c, unsigned char* smem, E* dkv, const E* dout,
                                const float* lse, const float* D, const E* q, const E* kv,
                                const int32_t* q_seg, const int32_t* k_seg, const Bias<E>& bias,
                                const Shape& d, int64_t k0, int64_t g, int64_t b) {
  const Layout L = layout_for(Kernel::kBackwardKV, d.HD);
  const Regions<E> M = regions_of<E>(smem, L);
  const Rows R = rows_of(smem, L);
  const int64_t HD = d.HD;
  const int hd = static_cast<int>(HD);
  const bool segs = q_seg != nullptr;
  const int64_t kv_offset = b * d.Tk * d.Rkv + d.k_col + g * HD;

  load_rows(c, M.k, L.ld_e, kv + kv_offset, d.Rkv, k0, d.Tk, HD);
  load_rows(c, M.v, L.ld_e, kv + kv_offset + d.KVH * HD, d.Rkv, k0, d.Tk, HD);
  if (segs) load_segments(c, R.k_seg, k_seg + b * d.Tk, k0, d.Tk);
  zero_f32(c, M.acc, kTile * L.ld_a);
  zero_f32(c, M.acc2, kTile * L.ld_a);
  const int64_t q_begin = first_query_tile(d, k0, kTile);
  const int acc_tiles = 4 * hd / 16;
  for (int64_t h = g * d.group; h < (g + 1) * d.group; ++h) {
    for (int64_t q0 = q_begin; q0 < d.Tq; q0 += kTile) {
      c.sync();
      load_query_tile(c, L, M, R, q, dout, lse, D, q_seg, d, q0, h, b);
      c.sync();
      scores_and_dp(c, L, M, HD);
      c.sync();
      probabilities(c, L, R, M.s, M.dp, M.p, M.ds, segs, head_bias(bias, d, b, h),
                    BiasGrad{nullptr, false}, d, q0, k0);
      c.sync();
      // dV (acc2) += Pᵀ·dO and dK (acc) += dSᵀ·Q (rows: keys; the products run over the tile's
      // queries).
      c.for_each_warp(2 * acc_tiles, [&](int t) {
        if (t < acc_tiles) {
          accumulate<true>(c, t, M.acc2, L.ld_a, M.p, L.ld_p, M.dout, L.ld_e, HD);
        } else {
          accumulate<true>(c, t - acc_tiles, M.acc, L.ld_a, M.ds, L.ld_p, M.q, L.ld_e, HD);
        }
      });
    }
  }
  c.sync();
  add_rows(c, dkv + kv_offset, d.Rkv, k0, d.Tk, M.acc, L.ld_a, HD);
  add_rows(c, dkv + kv_offset + d.KVH * HD, d.Rkv, k0, d.Tk, M.acc2, L.ld_a, HD);
}

// dQ of kTile query rows from q0 of head h of batch row b, added into dq's query columns, and
// the bias gradient of those rows into db.
template <class C, class E>
AX_TC_FN void backward_q_block(const C& c, unsigned char* smem, E* dq, const E* dout,
                               const float* lse, const float* D, const E* q, const E* kv,
                               const int32_t* q_seg, const int32_t* k_seg, const Bias<E>& bias,
                               BiasGrad db, const Shape& d, int64_t q0, int64_t h, int64_t b) {
  const Layout L = layout_for(Kernel::kBackwardQ, d.HD);
  const Regions<E> M = regions_of<E>(smem, L);
  const Rows R = rows_of(smem, L);
  const int64_t HD = d.HD;
  const int hd = static_cast<int>(HD);
  const bool segs = q_seg != nullptr;
  const E* kb = kv + b * d.Tk * d.Rkv + d.k_col + h / d.group * HD;

  load_query_tile(c, L, M, R, q, dout, lse, D, q_seg, d, q0, h, b);
  zero_f32(c, M.acc, kTile * L.ld_a);
  const int64_t keys = key_end(d, q0);
  for (int64_t k0 = 0; k0 < keys; k0 += kTile) {
    c.sync();
    load_rows(c, M.k, L.ld_e, kb, d.Rkv, k0, d.Tk, HD);
    load_rows(c, M.v, L.ld_e, kb + d.KVH * HD, d.Rkv, k0, d.Tk, HD);
    if (segs) load_segments(c, R.k_seg, k_seg + b * d.Tk, k0, d.Tk);
    c.sync();
    scores_and_dp(c, L, M, HD);
    c.sync();
    probabilities<C, E>(c, L, R, M.s, M.dp, nullptr, M.ds, segs, head_bias(bias, d, b, h), db, d,
                        q0, k0);
    c.sync();
    c.for_each_warp(4 * hd / 16, [&](int t) {
      accumulate<false>(c, t, M.acc, L.ld_a, M.ds, L.ld_p, M.k, L.ld_e, HD);
    });
  }
  c.sync();
  add_rows(c, dq + b * d.Tq * d.Rq + h * HD, d.Rq, q0, d.Tq, M.acc, L.ld_a, HD);
}

// The dQ program over batch rows [b_begin, b_end) in order for query tile q0 of head h; the bias
// gradient of head h goes to `slot` ((Tq, Tk) f32; null: none), written by the first row when
// `assign` (scratch partials), else added.
template <class C, class E>
AX_TC_FN void backward_q_rows(const C& c, unsigned char* smem, E* dq, const E* dout,
                              const float* lse, const float* D, const E* q, const E* kv,
                              const int32_t* q_seg, const int32_t* k_seg, const Bias<E>& bias,
                              float* slot, bool assign, const Shape& d, int64_t q0, int64_t h,
                              int64_t b_begin, int64_t b_end) {
  for (int64_t b = b_begin; b < b_end; ++b) {
    if (b != b_begin) c.sync();  // the previous row's last reads of shared memory
    backward_q_block(c, smem, dq, dout, lse, D, q, kv, q_seg, k_seg, bias,
                     BiasGrad{slot, assign && b == b_begin}, d, q0, h, b);
  }
}

}  // namespace ax::train::cuda::tc
