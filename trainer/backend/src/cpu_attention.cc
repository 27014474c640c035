// Dot-product attention, one (batch, head) at a time, in blocks of query rows: S = scale · Q Kᵀ
// (+ bias, masked by segments) and O = P V (and the five products of the backward pass) are GEMMs
// on strided views of q and kv, so nothing is copied and at most one block of scores per thread
// (kBlockRows × Tk floats) exists at a time. Causal blocks stop at their last row's key, skipping
// the masked upper triangle; with first positions (a slice of a row against the whole row's keys)
// row t's last key is t + shift, shift = q_first_position - k_first_position. The backward pass
// recomputes P from the saved log-sum-exp. Without a bias and segments the arithmetic is the same,
// operation for operation, whatever q and kv are.
#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu_backend.h"
#include "cpu_math.h"

namespace ax::train::cpu {
namespace {

constexpr int64_t kBlockRows = 64;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Strided views of one (batch row, query head) and its key/value head.
struct HeadViews {
  const float* q;        // (Tq, HD), row stride Rq
  const float* k;        // (Tk, HD), row stride Rkv
  const float* v;        // (Tk, HD), row stride Rkv
  const float* bias;     // (Tq, Tk) or null
  const int32_t* q_seg;  // (Tq) or null
  const int32_t* k_seg;  // (Tk) or null
};

HeadViews head_views(const AttentionDims& d, const AttentionSpec& s, const float* q,
                     const float* kv, int64_t b, int64_t h) {
  const int64_t g = h / (d.NH / d.KVH);
  HeadViews v;
  v.q = q + b * d.Tq * d.Rq + h * d.HD;
  v.k = kv + b * d.Tk * d.Rkv + s.k_offset + g * d.HD;
  v.v = v.k + d.KVH * d.HD;
  v.bias = nullptr;
  if (d.bias_batch > 0) {
    const int64_t bb = d.bias_batch == 1 ? 0 : b;
    v.bias = s.bias.as<float>() + (bb * d.NH + h) * d.Tq * d.Tk;
  }
  v.q_seg = d.segments ? s.q_segments.as<int32_t>() + b * d.Tq : nullptr;
  v.k_seg = d.segments ? s.k_segments.as<int32_t>() + b * d.Tk : nullptr;
  return v;
}

// Keys visible to row `t`: all of them, or [0, t + shift] when causal (none when that is empty).
inline int64_t visible_keys(int64_t t, int64_t keys, bool causal, int64_t shift) {
  return causal ? std::clamp<int64_t>(t + shift + 1, 0, keys) : keys;
}

// The keys a block of query rows r0.. (`rows` of them) computes scores for: up to its last
// row's last visible key when causal.
inline int64_t block_keys(int64_t r0, int64_t rows, int64_t Tk, bool causal, int64_t shift) {
  return causal ? std::clamp<int64_t>(r0 + rows + shift, 0, Tk) : Tk;
}

// Adds the bias and masks keys of other segments in the scaled scores S (rows, keys) of query
// rows r0.. (only over each row's visible keys).
void bias_and_mask(float* S, int64_t rows, int64_t keys, int64_t r0, int64_t Tk, bool causal,
                   int64_t shift, const HeadViews& v) {
  for (int64_t i = 0; i < rows; ++i) {
    float* s = S + i * keys;
    const int64_t valid = visible_keys(r0 + i, keys, causal, shift);
    if (v.bias != nullptr) {
      const float* bias = v.bias + (r0 + i) * Tk;
      for (int64_t j = 0; j < valid; ++j) s[j] += bias[j];
    }
    if (v.q_seg != nullptr) {
      const int32_t segment = v.q_seg[r0 + i];
      for (int64_t j = 0; j < valid; ++j) s[j] = v.k_seg[j] == segment ? s[j] : kNegInf;
    }
  }
}

// S (rows, keys) holds scaled scores of query rows r0.. on entry and their softmax on exit
// (zero on masked keys); lse gets each row's log-sum-exp (-inf for a row that sees no key).
AX_CPU_KERNEL
void softmax_rows(float* S, int64_t rows, int64_t keys, int64_t r0, bool causal, int64_t shift,
                  float* lse) {
  for (int64_t i = 0; i < rows; ++i) {
    float* s = S + i * keys;
    int64_t valid = visible_keys(r0 + i, keys, causal, shift);
    float m = max_f32(s, valid);
    float sum = exp_in_place_sum(s, m, valid);
    if (sum == 0) {  // every key masked: no attention, a zero output
      for (int64_t j = 0; j < keys; ++j) s[j] = 0;
      lse[i] = kNegInf;
      continue;
    }
    float inv = 1.0f / sum;
    for (int64_t j = 0; j < valid; ++j) s[j] *= inv;
    for (int64_t j = valid; j < keys; ++j) s[j] = 0;
    lse[i] = m + std::log(sum);
  }
}

// On entry P holds scaled scores and dP = dO Vᵀ; on exit P = exp(S - lse) and
// dP = P · (dP - D) · scale (the gradient of the unscaled scores), zero on masked keys. dS, when
// not null, += P · (dP - D): the gradient of the scores the bias was added to.
AX_CPU_KERNEL
void softmax_grad_rows(float* P, float* dP, int64_t rows, int64_t keys, int64_t r0, bool causal,
                       int64_t shift, const float* lse, const float* D, float scale, float* dS,
                       int64_t ds_stride) {
  for (int64_t i = 0; i < rows; ++i) {
    float* p = P + i * keys;
    float* dp = dP + i * keys;
    int64_t valid = visible_keys(r0 + i, keys, causal, shift);
    float l = lse[i], di = D[i];
    if (l == kNegInf) valid = 0;  // a row that saw no key has no gradient
    float* ds = dS == nullptr ? nullptr : dS + i * ds_stride;
    for (int64_t j = 0; j < valid; ++j) {
      float e = exp_f32(p[j] - l);
      p[j] = e;
      const float g = e * (dp[j] - di);
      if (ds != nullptr) ds[j] += g;
      dp[j] = g * scale;
    }
    for (int64_t j = valid; j < keys; ++j) {
      p[j] = 0;
      dp[j] = 0;
    }
  }
}

}  // namespace

void CpuBackend::attention_forward(Tensor out, Tensor lse, Tensor q, Tensor kv,
                                   const AttentionSpec& spec) {
  // out (B, Tq, NH·HD), lse (B, NH, Tq), q (B, Tq, Rq), kv (B, Tk, Rkv).
  const AttentionDims d = check_attention_forward(kPlan, out, lse, q, kv, spec);
  const int64_t OC = d.NH * d.HD;
  const bool masked = d.bias_batch > 0 || d.segments;
  const int64_t shift = spec.q_first_position - spec.k_first_position;
  const float* xq = q.as<float>();
  const float* xkv = kv.as<float>();
  float* o = out.as<float>();
  float* l = lse.as<float>();
  pool_.run(d.B * d.NH, [&](int64_t task, int thread) {
    const int64_t b = task / d.NH, h = task % d.NH;
    const HeadViews v = head_views(d, spec, xq, xkv, b, h);
    float* ob = o + b * d.Tq * OC + h * d.HD;       // (Tq, HD), row stride OC
    float* lb = l + (b * d.NH + h) * d.Tq;          // (Tq)
    float* S = scratch(thread, kBlockRows * d.Tk);  // (rows, keys)
    for (int64_t r0 = 0; r0 < d.Tq; r0 += kBlockRows) {
      const int64_t rows = std::min(kBlockRows, d.Tq - r0);
      const int64_t keys = block_keys(r0, rows, d.Tk, spec.causal, shift);
      if (keys == 0) {  // every row before the first key: no attention, a zero output
        for (int64_t i = 0; i < rows; ++i) {
          std::fill_n(ob + (r0 + i) * OC, d.HD, 0.0f);
          lb[r0 + i] = kNegInf;
        }
        continue;
      }
      gemm_({Trans::kNo, Trans::kYes, rows, keys, d.HD, spec.scale, v.q + r0 * d.Rq, d.Rq, v.k,
             d.Rkv, 0, S, keys});
      if (masked) bias_and_mask(S, rows, keys, r0, d.Tk, spec.causal, shift, v);
      softmax_rows(S, rows, keys, r0, spec.causal, shift, lb + r0);
      gemm_(
          {Trans::kNo, Trans::kNo, rows, d.HD, keys, 1, S, keys, v.v, d.Rkv, 0, ob + r0 * OC, OC});
    }
  });
}

void CpuBackend::attention_backward(Tensor dq, Tensor dkv, Tensor dbias, Tensor dout, Tensor out,
                                    Tensor lse, Tensor q, Tensor kv, const AttentionSpec& spec) {
  // dq (B, Tq, Rq), dkv (B, Tk, Rkv), dbias (Bb, NH, Tq, Tk) or empty, dout and out
  // (B, Tq, NH·HD), lse (B, NH, Tq), q (B, Tq, Rq), kv (B, Tk, Rkv).
  const AttentionDims d =
      check_attention_backward(kPlan, dq, dkv, dbias, dout, out, lse, q, kv, spec);
  const int64_t OC = d.NH * d.HD, group = d.NH / d.KVH;
  const bool masked = d.bias_batch > 0 || d.segments;
  const int64_t shift = spec.q_first_position - spec.k_first_position;
  const float* xq = q.as<float>();
  const float* xkv = kv.as<float>();
  const float* o = out.as<float>();
  const float* dy = dout.as<float>();
  const float* l = lse.as<float>();
  float* dxq = dq.as<float>();
  float* dxkv = dkv.as<float>();
  float* db = dbias.empty() ? nullptr : dbias.as<float>();
  // A task owns dK and dV of one (batch row, kv head), shared by its query heads. A bias shared
  // by the whole batch (Bb = 1) gets its gradient from every batch row: then one task per kv head
  // walks the batch rows in order, so no two tasks add into the same dbias.
  const bool shared_dbias = db != nullptr && d.bias_batch == 1;
  const int64_t tasks = shared_dbias ? d.KVH : d.B * d.KVH;
  pool_.run(tasks, [&](int64_t task, int thread) {
    const int64_t g = task % d.KVH;
    const int64_t b_begin = shared_dbias ? 0 : task / d.KVH;
    const int64_t b_end = shared_dbias ? d.B : b_begin + 1;
    float* P = scratch(thread, (2 * d.Tk + 1) * kBlockRows);  // (rows, keys)
    float* dP = P + kBlockRows * d.Tk;                        // (rows, keys)
    float* D = dP + kBlockRows * d.Tk;                        // (rows)
    for (int64_t b = b_begin; b < b_end; ++b) {
      float* dk = dxkv + b * d.Tk * d.Rkv + spec.k_offset + g * d.HD;  // row stride Rkv
      float* dv = dk + d.KVH * d.HD;
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        const HeadViews v = head_views(d, spec, xq, xkv, b, h);
        float* dqh = dxq + b * d.Tq * d.Rq + h * d.HD;
        const float* ob = o + b * d.Tq * OC + h * d.HD;  // (Tq, HD), row stride OC
        const float* dob = dy + b * d.Tq * OC + h * d.HD;
        const float* lb = l + (b * d.NH + h) * d.Tq;
        float* dbh =
            db == nullptr ? nullptr : db + ((d.bias_batch == 1 ? 0 : b) * d.NH + h) * d.Tq * d.Tk;
        for (int64_t r0 = 0; r0 < d.Tq; r0 += kBlockRows) {
          const int64_t rows = std::min(kBlockRows, d.Tq - r0);
          const int64_t keys = block_keys(r0, rows, d.Tk, spec.causal, shift);
          if (keys == 0) continue;  // rows that see no key have no gradient
          gemm_({Trans::kNo, Trans::kYes, rows, keys, d.HD, spec.scale, v.q + r0 * d.Rq, d.Rq, v.k,
                 d.Rkv, 0, P, keys});
          if (masked) bias_and_mask(P, rows, keys, r0, d.Tk, spec.causal, shift, v);
          gemm_({Trans::kNo, Trans::kYes, rows, keys, d.HD, 1, dob + r0 * OC, OC, v.v, d.Rkv, 0, dP,
                 keys});
          for (int64_t i = 0; i < rows; ++i) {
            D[i] = dot_f32(dob + (r0 + i) * OC, ob + (r0 + i) * OC, d.HD);
          }
          softmax_grad_rows(P, dP, rows, keys, r0, spec.causal, shift, lb + r0, D, spec.scale,
                            dbh == nullptr ? nullptr : dbh + r0 * d.Tk, d.Tk);
          // dQ += dS K, dK += dSᵀ Q, dV += Pᵀ dO.
          gemm_({Trans::kNo, Trans::kNo, rows, d.HD, keys, 1, dP, keys, v.k, d.Rkv, 1,
                 dqh + r0 * d.Rq, d.Rq});
          gemm_({Trans::kYes, Trans::kNo, keys, d.HD, rows, 1, dP, keys, v.q + r0 * d.Rq, d.Rq, 1,
                 dk, d.Rkv});
          gemm_({Trans::kYes, Trans::kNo, keys, d.HD, rows, 1, P, keys, dob + r0 * OC, OC, 1, dv,
                 d.Rkv});
        }
      }
    }
  });
}

}  // namespace ax::train::cpu
