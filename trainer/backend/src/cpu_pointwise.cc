// GELU, the gated linear units (SwiGLU, GeGLU), RoPE and the softmax cross-entropy (with T5x's
// z-loss): element- and row-wise ops split over rows.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "ax/trainer/backend/dropout_mask.h"
#include "cpu_backend.h"
#include "cpu_math.h"

namespace ax::train::cpu {
namespace {

constexpr int64_t kGrain = 1 << 14;          // elements per parallel chunk, at least
constexpr float kGeluScale = 0.7978845608f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

int64_t rows_per_chunk(int64_t cols) {
  return std::max<int64_t>(1, kGrain / std::max<int64_t>(cols, 1));
}

// GELU with the tanh approximation and its derivative: gelu_* and GeGLU's gate.
inline float gelu_f32(float x) {
  float u = kGeluScale * (x + kGeluCubic * x * x * x);
  return 0.5f * x * (1.0f + tanh_f32(u));
}

inline float gelu_grad_f32(float x) {
  float u = kGeluScale * (x + kGeluCubic * x * x * x);
  float th = tanh_f32(u);
  float du = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
  return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
}

AX_CPU_KERNEL
void gelu_forward_kernel(float* out, const float* inp, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gelu_f32(inp[i]);
}

AX_CPU_KERNEL
void gelu_backward_kernel(float* dinp, const float* dout, const float* inp, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dinp[i] += gelu_grad_f32(inp[i]) * dout[i];
}

// out (rows, F) = silu(inp[:, :F]) · inp[:, F:], inp (rows, 2F).
AX_CPU_KERNEL
void swiglu_forward_rows(float* out, const float* inp, int64_t n0, int64_t n1, int64_t F) {
  for (int64_t n = n0; n < n1; ++n) {
    const float* gate = inp + n * 2 * F;
    const float* up = gate + F;
    float* y = out + n * F;
    for (int64_t f = 0; f < F; ++f) y[f] = gate[f] * sigmoid_f32(gate[f]) * up[f];
  }
}

AX_CPU_KERNEL
void swiglu_backward_rows(float* dinp, const float* dout, const float* inp, int64_t n0, int64_t n1,
                          int64_t F) {
  for (int64_t n = n0; n < n1; ++n) {
    const float* gate = inp + n * 2 * F;
    const float* up = gate + F;
    const float* dy = dout + n * F;
    float* dgate = dinp + n * 2 * F;
    float* dup = dgate + F;
    for (int64_t f = 0; f < F; ++f) {
      float a = gate[f], sig = sigmoid_f32(a);
      dgate[f] += dy[f] * up[f] * (sig * (1.0f + a * (1.0f - sig)));
      dup[f] += dy[f] * a * sig;
    }
  }
}

// The same with GELU (tanh) for the gate: GeGLU.
AX_CPU_KERNEL
void geglu_forward_rows(float* out, const float* inp, int64_t n0, int64_t n1, int64_t F) {
  for (int64_t n = n0; n < n1; ++n) {
    const float* gate = inp + n * 2 * F;
    const float* up = gate + F;
    float* y = out + n * F;
    for (int64_t f = 0; f < F; ++f) y[f] = gelu_f32(gate[f]) * up[f];
  }
}

AX_CPU_KERNEL
void geglu_backward_rows(float* dinp, const float* dout, const float* inp, int64_t n0, int64_t n1,
                         int64_t F) {
  for (int64_t n = n0; n < n1; ++n) {
    const float* gate = inp + n * 2 * F;
    const float* up = gate + F;
    const float* dy = dout + n * F;
    float* dgate = dinp + n * 2 * F;
    float* dup = dgate + F;
    for (int64_t f = 0; f < F; ++f) {
      dgate[f] += dy[f] * up[f] * gelu_grad_f32(gate[f]);
      dup[f] += dy[f] * gelu_f32(gate[f]);
    }
  }
}

// z_loss = 0 skips the z-loss term, so the loss has the bits it had before the term existed.
AX_CPU_KERNEL
void cross_entropy_forward_rows(float* losses, const float* logits, const int32_t* targets,
                                int64_t n0, int64_t n1, int64_t V, int64_t Vp, float z_loss) {
  for (int64_t n = n0; n < n1; ++n) {
    if (targets[n] < 0) {
      losses[n] = 0;
      continue;
    }
    const float* x = logits + n * Vp;
    float m = max_f32(x, V);
    float lse = m + std::log(sum_exp_f32(x, m, V));
    float loss = lse - x[targets[n]];
    if (z_loss != 0) loss += z_loss * lse * lse;
    losses[n] = loss;
  }
}

// Row by row; d may be x (in place) or a separate buffer. The z-loss scales the softmax by
// 1 + 2·z_loss·lse (skipped when z_loss = 0, as in the forward pass).
AX_CPU_KERNEL
void cross_entropy_backward_rows(float* dlogits, const float* logits, const int32_t* targets,
                                 int64_t n0, int64_t n1, int64_t V, int64_t Vp, float dloss,
                                 float z_loss) {
  for (int64_t n = n0; n < n1; ++n) {
    float* d = dlogits + n * Vp;
    int32_t target = targets[n];
    if (target < 0) {
      std::fill(d, d + Vp, 0.0f);
      continue;
    }
    // One pointer from here on, so the loops vectorise without alias checks.
    if (d != logits + n * Vp) std::memcpy(d, logits + n * Vp, V * sizeof(float));
    float m = max_f32(d, V);
    float sum = exp_in_place_sum(d, m, V);
    float scale = dloss / sum;
    if (z_loss != 0) scale = dloss * (1.0f + 2.0f * z_loss * (m + std::log(sum))) / sum;
    for (int64_t i = 0; i < V; ++i) d[i] *= scale;
    d[target] -= dloss;
    std::fill(d + V, d + Vp, 0.0f);
  }
}

// Rotates pairs (j, j + HD/2) of `heads` heads of HD values by the angles of one position:
// y = (x0 c - x1 s, x0 s + x1 c); `inverse` rotates by minus the angle (the backward pass) and
// accumulates into y.
void rope_rotate(float* y, const float* x, const float* cos_t, const float* sin_t, int64_t heads,
                 int64_t HD, bool inverse) {
  int64_t half = HD / 2;
  for (int64_t h = 0; h < heads; ++h) {
    const float* xh = x + h * HD;
    float* yh = y + h * HD;
    if (!inverse) {
      for (int64_t j = 0; j < half; ++j) {
        float x0 = xh[j], x1 = xh[j + half];
        yh[j] = x0 * cos_t[j] - x1 * sin_t[j];
        yh[j + half] = x0 * sin_t[j] + x1 * cos_t[j];
      }
    } else {
      for (int64_t j = 0; j < half; ++j) {
        float x0 = xh[j], x1 = xh[j + half];
        yh[j] += x0 * cos_t[j] + x1 * sin_t[j];
        yh[j + half] += x1 * cos_t[j] - x0 * sin_t[j];
      }
    }
  }
}

}  // namespace

void CpuBackend::gelu_forward(Tensor out, Tensor inp) {
  check_gelu_forward(kPlan, out, inp);
  pool_.parallel_for(inp.numel(), kGrain, [&](int64_t i0, int64_t i1) {
    gelu_forward_kernel(out.as<float>() + i0, inp.as<float>() + i0, i1 - i0);
  });
}

void CpuBackend::gelu_backward(Tensor dinp, Tensor dout, Tensor inp) {
  check_gelu_backward(kPlan, dinp, dout, inp);
  pool_.parallel_for(inp.numel(), kGrain, [&](int64_t i0, int64_t i1) {
    gelu_backward_kernel(dinp.as<float>() + i0, dout.as<float>() + i0, inp.as<float>() + i0,
                         i1 - i0);
  });
}

void CpuBackend::glu_forward(Tensor out, Tensor inp, Glu glu) {
  // out (N, F), inp (N, 2F).
  auto [N, F] = check_glu_forward(kPlan, out, inp, glu);
  pool_.parallel_for(N, rows_per_chunk(F), [&](int64_t n0, int64_t n1) {
    if (glu == Glu::kSwiGlu) {
      swiglu_forward_rows(out.as<float>(), inp.as<float>(), n0, n1, F);
    } else {
      geglu_forward_rows(out.as<float>(), inp.as<float>(), n0, n1, F);
    }
  });
}

void CpuBackend::glu_backward(Tensor dinp, Tensor dout, Tensor inp, Glu glu) {
  // dinp (N, 2F), dout (N, F), inp (N, 2F).
  auto [N, F] = check_glu_backward(kPlan, dinp, dout, inp, glu);
  pool_.parallel_for(N, rows_per_chunk(F), [&](int64_t n0, int64_t n1) {
    if (glu == Glu::kSwiGlu) {
      swiglu_backward_rows(dinp.as<float>(), dout.as<float>(), inp.as<float>(), n0, n1, F);
    } else {
      geglu_backward_rows(dinp.as<float>(), dout.as<float>(), inp.as<float>(), n0, n1, F);
    }
  });
}

void CpuBackend::dropout_forward(Tensor out, Tensor inp, Tensor row_keys, const DropoutSpec& spec) {
  // out, inp (N, F), row_keys (N) i32.
  auto [N, F] = check_dropout_forward(kPlan, out, inp, row_keys, spec);
  const auto* keys = row_keys.as<int32_t>();
  pool_.parallel_for(N, rows_per_chunk(F), [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const auto key = static_cast<uint32_t>(keys[n]);
      const float* x = inp.as<float>() + n * F;
      float* y = out.as<float>() + n * F;
      for (int64_t f = 0; f < F; ++f) {
        const auto feature = static_cast<uint32_t>(spec.feature_offset + f);
        y[f] = dropout_keep(spec.seed, key, feature, spec.threshold) ? x[f] * spec.scale : 0.0f;
      }
    }
  });
}

void CpuBackend::dropout_backward(Tensor dinp, Tensor dout, Tensor row_keys,
                                  const DropoutSpec& spec) {
  // dinp, dout (N, F), row_keys (N) i32.
  auto [N, F] = check_dropout_backward(kPlan, dinp, dout, row_keys, spec);
  const auto* keys = row_keys.as<int32_t>();
  pool_.parallel_for(N, rows_per_chunk(F), [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const auto key = static_cast<uint32_t>(keys[n]);
      const float* dy = dout.as<float>() + n * F;
      float* dx = dinp.as<float>() + n * F;
      for (int64_t f = 0; f < F; ++f) {
        const auto feature = static_cast<uint32_t>(spec.feature_offset + f);
        if (dropout_keep(spec.seed, key, feature, spec.threshold)) dx[f] += dy[f] * spec.scale;
      }
    }
  });
}

void CpuBackend::update_rope_table(int64_t T, int64_t head_dim, const RopeSpec& rope) {
  const bool same = head_dim == rope_head_dim_ && rope == rope_;
  if (same && T <= rope_T_) return;
  // A longer table for the same rotation grows geometrically: decoding asks for one position more
  // at every token, and an entry does not depend on the table's length.
  if (same) T = std::max(T, 2 * rope_T_);
  const std::vector<double> inv_freq = rope_inv_freq(rope, head_dim);
  const int64_t half = head_dim / 2;
  rope_cos_.resize(T * half);
  rope_sin_.resize(T * half);
  for (int64_t j = 0; j < half; ++j) {
    for (int64_t t = 0; t < T; ++t) {
      double angle = static_cast<double>(t) * inv_freq[j];
      rope_cos_[t * half + j] = static_cast<float>(std::cos(angle));
      rope_sin_[t * half + j] = static_cast<float>(std::sin(angle));
    }
  }
  rope_T_ = T;
  rope_head_dim_ = head_dim;
  rope_ = rope;
}

void CpuBackend::rope_forward(Tensor out, Tensor inp, int num_heads, int num_kv_heads,
                              const RopeSpec& rope, int64_t first_position) {
  // out, inp (B, T, (NH + 2·KVH)·HD): query and key heads rotated, value heads copied.
  auto d = check_rope(kPlan, out, inp, num_heads, num_kv_heads, "rope_forward", "out", "inp");
  AX_CHECK_GE(first_position, 0) << "rope_forward";
  update_rope_table(first_position + d.T, d.HD, rope);
  int64_t rotated = num_heads + num_kv_heads, half = d.HD / 2;
  const float* x = inp.as<float>();
  float* y = out.as<float>();
  pool_.parallel_for(d.B * d.T, rows_per_chunk(d.R), [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      int64_t t = first_position + n % d.T;
      rope_rotate(y + n * d.R, x + n * d.R, &rope_cos_[t * half], &rope_sin_[t * half], rotated,
                  d.HD, false);
      if (y != x) {
        std::memcpy(y + n * d.R + rotated * d.HD, x + n * d.R + rotated * d.HD,
                    num_kv_heads * d.HD * sizeof(float));
      }
    }
  });
}

void CpuBackend::rope_backward(Tensor dinp, Tensor dout, int num_heads, int num_kv_heads,
                               const RopeSpec& rope, int64_t first_position) {
  // dinp, dout (B, T, (NH + 2·KVH)·HD).
  auto d = check_rope(kPlan, dinp, dout, num_heads, num_kv_heads, "rope_backward", "dinp", "dout");
  AX_CHECK_GE(first_position, 0) << "rope_backward";
  update_rope_table(first_position + d.T, d.HD, rope);
  int64_t rotated = num_heads + num_kv_heads, half = d.HD / 2;
  const float* dy = dout.as<float>();
  float* dx = dinp.as<float>();
  pool_.parallel_for(d.B * d.T, rows_per_chunk(d.R), [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      int64_t t = first_position + n % d.T;
      rope_rotate(dx + n * d.R, dy + n * d.R, &rope_cos_[t * half], &rope_sin_[t * half], rotated,
                  d.HD, true);
      for (int64_t i = rotated * d.HD; i < d.R; ++i) dx[n * d.R + i] += dy[n * d.R + i];
    }
  });
}

void CpuBackend::cross_entropy_forward(Tensor losses, Tensor logits, Tensor targets, int64_t V,
                                       float z_loss) {
  // losses (N), logits (N, Vp), targets (N) i32.
  constexpr const char* kOp = "cross_entropy_forward";
  auto [N, Vp] = check_cross_entropy_forward(kPlan, losses, logits, targets, V, z_loss);
  const int32_t* tgt = targets.as<int32_t>();
  for (int64_t n = 0; n < N; ++n) AX_CHECK_LT(tgt[n], V) << kOp << ": target of row " << n;
  pool_.parallel_for(N, rows_per_chunk(V), [&](int64_t n0, int64_t n1) {
    cross_entropy_forward_rows(losses.as<float>(), logits.as<float>(), tgt, n0, n1, V, Vp, z_loss);
  });
}

void CpuBackend::cross_entropy_backward(Tensor dlogits, Tensor logits, Tensor targets, int64_t V,
                                        float dloss, float z_loss) {
  // dlogits (N, Vp) (may be logits itself), logits (N, Vp), targets (N) i32.
  constexpr const char* kOp = "cross_entropy_backward";
  auto [N, Vp] = check_cross_entropy_backward(kPlan, dlogits, logits, targets, V, z_loss);
  const int32_t* tgt = targets.as<int32_t>();
  for (int64_t n = 0; n < N; ++n) AX_CHECK_LT(tgt[n], V) << kOp << ": target of row " << n;
  pool_.parallel_for(N, rows_per_chunk(V), [&](int64_t n0, int64_t n1) {
    cross_entropy_backward_rows(dlogits.as<float>(), logits.as<float>(), tgt, n0, n1, V, Vp, dloss,
                                z_loss);
  });
}

// ---- Vocabulary-parallel cross-entropy (one shard of the columns) ----

void CpuBackend::ce_shard_max(Tensor rowmax, Tensor logits, int64_t v_count) {
  auto [N, Vl] = check_ce_shard_max(kPlan, rowmax, logits, v_count);
  const float* x = logits.as<float>();
  float* m = rowmax.as<float>();
  pool_.parallel_for(N, rows_per_chunk(std::max<int64_t>(v_count, 1)), [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      m[n] = v_count == 0 ? -std::numeric_limits<float>::infinity() : max_f32(x + n * Vl, v_count);
    }
  });
}

void CpuBackend::ce_shard_sums(Tensor sums, Tensor logits, Tensor rowmax, Tensor targets,
                               int64_t v_begin, int64_t v_count) {
  auto [N, Vl] = check_ce_shard_sums(kPlan, sums, logits, rowmax, targets, v_count);
  const float* x = logits.as<float>();
  const float* m = rowmax.as<float>();
  const int32_t* tgt = targets.as<int32_t>();
  float* out = sums.as<float>();
  pool_.parallel_for(N, rows_per_chunk(std::max<int64_t>(v_count, 1)), [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const float* row = x + n * Vl;
      out[2 * n] = v_count == 0 ? 0.0f : sum_exp_f32(row, m[n], v_count);
      int64_t local = static_cast<int64_t>(tgt[n]) - v_begin;
      out[2 * n + 1] = (tgt[n] >= 0 && local >= 0 && local < v_count) ? row[local] : 0.0f;
    }
  });
}

void CpuBackend::ce_shard_backward(Tensor dlogits, Tensor logits, Tensor lse, Tensor targets,
                                   int64_t v_begin, int64_t v_count, float dloss, float z_loss) {
  auto [N, Vl] = check_ce_shard_backward(kPlan, dlogits, logits, lse, targets, v_count, z_loss);
  const float* x = logits.as<float>();
  const float* l = lse.as<float>();
  const int32_t* tgt = targets.as<int32_t>();
  float* d = dlogits.as<float>();
  pool_.parallel_for(N, rows_per_chunk(Vl), [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const float* xr = x + n * Vl;
      float* dr = d + n * Vl;
      if (tgt[n] < 0) {
        std::fill(dr, dr + Vl, 0.0f);
        continue;
      }
      // The softmax's factor: dloss, times 1 + 2·z_loss·lse with a z-loss.
      const float g = z_loss != 0 ? dloss * (1.0f + 2.0f * z_loss * l[n]) : dloss;
      for (int64_t i = 0; i < v_count; ++i) dr[i] = exp_f32(xr[i] - l[n]) * g;
      std::fill(dr + v_count, dr + Vl, 0.0f);
      int64_t local = static_cast<int64_t>(tgt[n]) - v_begin;
      if (local >= 0 && local < v_count) dr[local] -= dloss;
    }
  });
}

}  // namespace ax::train::cpu
