// Scaled dot-product attention over a packed qkv, one (batch, head) at a time, in blocks of
// query rows: S = scale · Q Kᵀ and O = P V (and the five products of the backward pass) are
// GEMMs on strided views of qkv, so nothing is copied and at most one block of scores per thread
// (kBlockRows × T floats) exists at a time. Causal blocks stop at their last row's key, skipping
// the masked upper triangle. The backward pass recomputes P from the saved log-sum-exp.
#include <cmath>

#include "cpu_backend.h"
#include "cpu_math.h"

namespace ax::train::cpu {
namespace {

constexpr int64_t kBlockRows = 64;

struct AttnDims {
  int64_t B, T, NH, KVH, HD;
  int64_t R;      // qkv row: (NH + 2·KVH)·HD
  int64_t OC;     // out row: NH·HD
  int64_t group;  // query heads per key/value head
  float scale;
};

AttnDims attention_dims(HeadDims h, int num_heads, int num_kv_heads) {
  AttnDims d;
  d.B = h.B;
  d.T = h.T;
  d.NH = num_heads;
  d.KVH = num_kv_heads;
  d.R = h.R;
  d.HD = h.HD;
  d.OC = d.NH * d.HD;
  d.group = d.NH / d.KVH;
  d.scale = 1.0f / std::sqrt(static_cast<float>(d.HD));
  return d;
}

// Keys visible to row `t`: all of them, or [0, t] when causal.
inline int64_t visible_keys(int64_t t, int64_t keys, bool causal) {
  return causal ? std::min(keys, t + 1) : keys;
}

// S (rows, keys) holds scaled scores of query rows r0.. on entry and their softmax on exit
// (zero on masked keys); lse gets each row's log-sum-exp.
AX_CPU_KERNEL
void softmax_rows(float* S, int64_t rows, int64_t keys, int64_t r0, bool causal, float* lse) {
  for (int64_t i = 0; i < rows; ++i) {
    float* s = S + i * keys;
    int64_t valid = visible_keys(r0 + i, keys, causal);
    float m = max_f32(s, valid);
    float sum = exp_in_place_sum(s, m, valid);
    float inv = 1.0f / sum;
    for (int64_t j = 0; j < valid; ++j) s[j] *= inv;
    for (int64_t j = valid; j < keys; ++j) s[j] = 0;
    lse[i] = m + std::log(sum);
  }
}

// On entry P holds scaled scores and dP = dO Vᵀ; on exit P = exp(S - lse) and
// dP = P · (dP - D) · scale (the gradient of the unscaled scores), zero on masked keys.
AX_CPU_KERNEL
void softmax_grad_rows(float* P, float* dP, int64_t rows, int64_t keys, int64_t r0, bool causal,
                       const float* lse, const float* D, float scale) {
  for (int64_t i = 0; i < rows; ++i) {
    float* p = P + i * keys;
    float* dp = dP + i * keys;
    int64_t valid = visible_keys(r0 + i, keys, causal);
    float l = lse[i], di = D[i];
    for (int64_t j = 0; j < valid; ++j) {
      float e = exp_f32(p[j] - l);
      p[j] = e;
      dp[j] = e * (dp[j] - di) * scale;
    }
    for (int64_t j = valid; j < keys; ++j) {
      p[j] = 0;
      dp[j] = 0;
    }
  }
}

}  // namespace

void CpuBackend::attention_forward(Tensor out, Tensor lse, Tensor qkv, int num_heads,
                                   int num_kv_heads, bool causal) {
  // out (B, T, NH·HD), lse (B, NH, T), qkv (B, T, (NH + 2·KVH)·HD).
  AttnDims d = attention_dims(
      check_attention_forward(kPlan, out, lse, qkv, num_heads, num_kv_heads), num_heads,
      num_kv_heads);
  const float* x = qkv.as<float>();
  float* o = out.as<float>();
  float* l = lse.as<float>();
  pool_.run(d.B * d.NH, [&](int64_t task, int thread) {
    int64_t b = task / d.NH, h = task % d.NH, g = h / d.group;
    const float* q = x + b * d.T * d.R + h * d.HD;  // (T, HD), row stride R
    const float* k = x + b * d.T * d.R + (d.NH + g) * d.HD;
    const float* v = k + d.KVH * d.HD;
    float* ob = o + b * d.T * d.OC + h * d.HD;     // (T, HD), row stride OC
    float* lb = l + (b * d.NH + h) * d.T;          // (T)
    float* S = scratch(thread, kBlockRows * d.T);  // (rows, keys)
    for (int64_t r0 = 0; r0 < d.T; r0 += kBlockRows) {
      int64_t rows = std::min(kBlockRows, d.T - r0);
      int64_t keys = causal ? r0 + rows : d.T;
      gemm_({Trans::kNo, Trans::kYes, rows, keys, d.HD, d.scale, q + r0 * d.R, d.R, k, d.R, 0, S,
             keys});
      softmax_rows(S, rows, keys, r0, causal, lb + r0);
      gemm_(
          {Trans::kNo, Trans::kNo, rows, d.HD, keys, 1, S, keys, v, d.R, 0, ob + r0 * d.OC, d.OC});
    }
  });
}

void CpuBackend::attention_backward(Tensor dqkv, Tensor dout, Tensor out, Tensor lse, Tensor qkv,
                                    int num_heads, int num_kv_heads, bool causal) {
  // dqkv (B, T, (NH + 2·KVH)·HD), dout (B, T, NH·HD), out (B, T, NH·HD), lse (B, NH, T),
  // qkv (B, T, (NH + 2·KVH)·HD).
  AttnDims d = attention_dims(
      check_attention_backward(kPlan, dqkv, dout, out, lse, qkv, num_heads, num_kv_heads),
      num_heads, num_kv_heads);
  const float* x = qkv.as<float>();
  const float* o = out.as<float>();
  const float* dy = dout.as<float>();
  const float* l = lse.as<float>();
  float* dx = dqkv.as<float>();
  // One task per (batch, kv head): it owns dK and dV of that head, shared by its query heads.
  pool_.run(d.B * d.KVH, [&](int64_t task, int thread) {
    int64_t b = task / d.KVH, g = task % d.KVH;
    const float* k = x + b * d.T * d.R + (d.NH + g) * d.HD;  // (T, HD), row stride R
    const float* v = k + d.KVH * d.HD;
    float* dk = dx + b * d.T * d.R + (d.NH + g) * d.HD;
    float* dv = dk + d.KVH * d.HD;
    float* P = scratch(thread, (2 * d.T + 1) * kBlockRows);  // (rows, keys)
    float* dP = P + kBlockRows * d.T;                        // (rows, keys)
    float* D = dP + kBlockRows * d.T;                        // (rows)
    for (int64_t h = g * d.group; h < (g + 1) * d.group; ++h) {
      const float* q = x + b * d.T * d.R + h * d.HD;
      float* dq = dx + b * d.T * d.R + h * d.HD;
      const float* ob = o + b * d.T * d.OC + h * d.HD;  // (T, HD), row stride OC
      const float* dob = dy + b * d.T * d.OC + h * d.HD;
      const float* lb = l + (b * d.NH + h) * d.T;
      for (int64_t r0 = 0; r0 < d.T; r0 += kBlockRows) {
        int64_t rows = std::min(kBlockRows, d.T - r0);
        int64_t keys = causal ? r0 + rows : d.T;
        gemm_({Trans::kNo, Trans::kYes, rows, keys, d.HD, d.scale, q + r0 * d.R, d.R, k, d.R, 0, P,
               keys});
        gemm_({Trans::kNo, Trans::kYes, rows, keys, d.HD, 1, dob + r0 * d.OC, d.OC, v, d.R, 0, dP,
               keys});
        for (int64_t i = 0; i < rows; ++i) {
          D[i] = dot_f32(dob + (r0 + i) * d.OC, ob + (r0 + i) * d.OC, d.HD);
        }
        softmax_grad_rows(P, dP, rows, keys, r0, causal, lb + r0, D, d.scale);
        // dQ += dS K, dK += dSᵀ Q, dV += Pᵀ dO.
        gemm_(
            {Trans::kNo, Trans::kNo, rows, d.HD, keys, 1, dP, keys, k, d.R, 1, dq + r0 * d.R, d.R});
        gemm_({Trans::kYes, Trans::kNo, keys, d.HD, rows, 1, dP, keys, q + r0 * d.R, d.R, 1, dk,
               d.R});
        gemm_({Trans::kYes, Trans::kNo, keys, d.HD, rows, 1, P, keys, dob + r0 * d.OC, d.OC, 1, dv,
               d.R});
      }
    }
  });
}

}  // namespace ax::train::cpu
