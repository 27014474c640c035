// Embedding lookup, LayerNorm and RMSNorm. Row-wise passes are split over rows; reductions over
// rows (weight and bias gradients, embedding scatter) are split over column blocks instead, so
// every sum runs over the rows in order and the result does not depend on the thread count.
#include <cmath>
#include <cstring>

#include "cpu_backend.h"
#include "cpu_math.h"

namespace ax::train::cpu {
namespace {

constexpr int64_t kRowElems = 1 << 14;  // elements per parallel chunk, at least
constexpr int64_t kColBlock = 64;       // columns per chunk of a column-block pass

int64_t rows_per_chunk(int64_t C) {
  return std::max<int64_t>(1, kRowElems / std::max<int64_t>(C, 1));
}

AX_CPU_KERNEL
void layernorm_forward_rows(float* out, float* mean, float* rstd, const float* inp,
                            const float* weight, const float* bias, int64_t n0, int64_t n1,
                            int64_t C, float eps) {
  for (int64_t n = n0; n < n1; ++n) {
    const float* x = inp + n * C;
    float* y = out + n * C;
    float m = sum_f32(x, C) / static_cast<float>(C);
    float var = sum_sq_dev_f32(x, m, C) / static_cast<float>(C);
    float s = 1.0f / std::sqrt(var + eps);
    for (int64_t c = 0; c < C; ++c) {
      float v = (x[c] - m) * s * weight[c];
      y[c] = bias != nullptr ? v + bias[c] : v;
    }
    mean[n] = m;
    rstd[n] = s;
  }
}

// dinp += (dnorm - mean(dnorm) - norm · mean(dnorm · norm)) · rstd, dnorm = dout · weight.
AX_CPU_KERNEL
void layernorm_backward_rows(float* dinp, const float* dout, const float* inp, const float* weight,
                             const float* mean, const float* rstd, int64_t n0, int64_t n1,
                             int64_t C) {
  for (int64_t n = n0; n < n1; ++n) {
    const float* x = inp + n * C;
    const float* dy = dout + n * C;
    float* dx = dinp + n * C;
    float m = mean[n], s = rstd[n];
    float acc_d[kLanes] = {}, acc_dn[kLanes] = {};
    int64_t c = 0;
    for (; c + kLanes <= C; c += kLanes) {
      for (int l = 0; l < kLanes; ++l) {
        float dnorm = dy[c + l] * weight[c + l];
        acc_d[l] += dnorm;
        acc_dn[l] += dnorm * ((x[c + l] - m) * s);
      }
    }
    float sum_d = 0, sum_dn = 0;
    for (int l = 0; l < kLanes; ++l) {
      sum_d += acc_d[l];
      sum_dn += acc_dn[l];
    }
    for (; c < C; ++c) {
      float dnorm = dy[c] * weight[c];
      sum_d += dnorm;
      sum_dn += dnorm * ((x[c] - m) * s);
    }
    float mean_d = sum_d / static_cast<float>(C), mean_dn = sum_dn / static_cast<float>(C);
    for (c = 0; c < C; ++c) {
      float norm = (x[c] - m) * s;
      dx[c] += (dy[c] * weight[c] - mean_d - norm * mean_dn) * s;
    }
  }
}

// dweight[c0:c1] += Σ_n dout · norm, dbias[c0:c1] += Σ_n dout (rows in order). For RMSNorm
// mean is null (norm = x · rstd) and dbias is null.
AX_CPU_KERNEL
void norm_param_grads(float* dweight, float* dbias, const float* dout, const float* inp,
                      const float* mean, const float* rstd, int64_t N, int64_t C, int64_t c0,
                      int64_t c1) {
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;
    const float* dy = dout + n * C;
    float m = mean != nullptr ? mean[n] : 0.0f, s = rstd[n];
    for (int64_t c = c0; c < c1; ++c) dweight[c] += dy[c] * ((x[c] - m) * s);
    if (dbias != nullptr) {
      for (int64_t c = c0; c < c1; ++c) dbias[c] += dy[c];
    }
  }
}

AX_CPU_KERNEL
void rmsnorm_forward_rows(float* out, float* rstd, const float* inp, const float* weight,
                          int64_t n0, int64_t n1, int64_t C, float eps) {
  for (int64_t n = n0; n < n1; ++n) {
    const float* x = inp + n * C;
    float* y = out + n * C;
    float s = 1.0f / std::sqrt(dot_f32(x, x, C) / static_cast<float>(C) + eps);
    for (int64_t c = 0; c < C; ++c) y[c] = x[c] * s * weight[c];
    rstd[n] = s;
  }
}

// dinp += (dnorm - norm · mean(dnorm · norm)) · rstd.
AX_CPU_KERNEL
void rmsnorm_backward_rows(float* dinp, const float* dout, const float* inp, const float* weight,
                           const float* rstd, int64_t n0, int64_t n1, int64_t C) {
  for (int64_t n = n0; n < n1; ++n) {
    const float* x = inp + n * C;
    const float* dy = dout + n * C;
    float* dx = dinp + n * C;
    float s = rstd[n];
    float acc[kLanes] = {};
    int64_t c = 0;
    for (; c + kLanes <= C; c += kLanes) {
      for (int l = 0; l < kLanes; ++l) acc[l] += dy[c + l] * weight[c + l] * (x[c + l] * s);
    }
    float sum_dn = 0;
    for (int l = 0; l < kLanes; ++l) sum_dn += acc[l];
    for (; c < C; ++c) sum_dn += dy[c] * weight[c] * (x[c] * s);
    float mean_dn = sum_dn / static_cast<float>(C);
    for (c = 0; c < C; ++c) dx[c] += (dy[c] * weight[c] - (x[c] * s) * mean_dn) * s;
  }
}

}  // namespace

void CpuBackend::embedding_forward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe) {
  // out (B, T, C), tokens (B, T) i32, wte (Vp, C), wpe (maxT, C) or empty.
  constexpr const char* kOp = "embedding_forward";
  auto [B, T, Vp, C] = check_embedding_forward(kPlan, out, tokens, wte, wpe);
  const float* pos = wpe.empty() ? nullptr : wpe.as<float>();
  const int32_t* tok = tokens.as<int32_t>();
  const float* table = wte.as<float>();
  float* o = out.as<float>();
  pool_.parallel_for(B * T, rows_per_chunk(C), [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      int32_t id = tok[n];
      AX_CHECK(id < Vp) << kOp << ": token " << id << " outside [0, " << Vp << ")";
      float* y = o + n * C;
      const float* p = pos == nullptr ? nullptr : pos + (n % T) * C;
      if (id < 0) {  // another vocabulary shard's token: a zero row (plus the position)
        if (p == nullptr) {
          std::memset(y, 0, C * sizeof(float));
        } else {
          std::memcpy(y, p, C * sizeof(float));
        }
        continue;
      }
      const float* e = table + id * C;
      if (p == nullptr) {
        std::memcpy(y, e, C * sizeof(float));
      } else {
        for (int64_t c = 0; c < C; ++c) y[c] = e[c] + p[c];
      }
    }
  });
}

void CpuBackend::embedding_backward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens) {
  // dwte (Vp, C), dwpe (maxT, C) or empty, dout (B, T, C), tokens (B, T) i32.
  constexpr const char* kOp = "embedding_backward";
  auto [B, T, Vp, C] = check_embedding_backward(kPlan, dwte, dwpe, dout, tokens);
  const int32_t* tok = tokens.as<int32_t>();
  const float* dy = dout.as<float>();
  float* dtable = dwte.as<float>();
  // Tokens repeat, so rows of dwte are shared: split by column blocks instead of rows.
  pool_.parallel_for(C, kColBlock, [&](int64_t c0, int64_t c1) {
    for (int64_t n = 0; n < B * T; ++n) {
      int32_t id = tok[n];
      AX_CHECK(id < Vp) << kOp << ": token " << id << " outside [0, " << Vp << ")";
      if (id < 0) continue;  // another vocabulary shard's token
      float* d = dtable + id * C;
      const float* g = dy + n * C;
      for (int64_t c = c0; c < c1; ++c) d[c] += g[c];
    }
  });
  if (dwpe.empty()) return;
  float* dpos = dwpe.as<float>();
  pool_.parallel_for(T, rows_per_chunk(C * B), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t b = 0; b < B; ++b) {
        const float* g = dy + (b * T + t) * C;
        for (int64_t c = 0; c < C; ++c) dpos[t * C + c] += g[c];
      }
    }
  });
}

void CpuBackend::layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight,
                                   Tensor bias, float eps) {
  // out (N, C), mean (N), rstd (N), inp (N, C), weight (C), bias (C) or empty.
  auto [N, C] = check_layernorm_forward(kPlan, out, mean, rstd, inp, weight, bias);
  const float* b = bias.empty() ? nullptr : bias.as<float>();
  pool_.parallel_for(N, rows_per_chunk(C), [&](int64_t n0, int64_t n1) {
    layernorm_forward_rows(out.as<float>(), mean.as<float>(), rstd.as<float>(), inp.as<float>(),
                           weight.as<float>(), b, n0, n1, C, eps);
  });
}

void CpuBackend::layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout,
                                    Tensor inp, Tensor weight, Tensor mean, Tensor rstd) {
  // dinp (N, C), dweight (C), dbias (C) or empty, dout (N, C), inp (N, C), weight (C),
  // mean (N), rstd (N).
  auto [N, C] =
      check_layernorm_backward(kPlan, dinp, dweight, dbias, dout, inp, weight, mean, rstd);
  float* db = dbias.empty() ? nullptr : dbias.as<float>();
  pool_.parallel_for(N, rows_per_chunk(C), [&](int64_t n0, int64_t n1) {
    layernorm_backward_rows(dinp.as<float>(), dout.as<float>(), inp.as<float>(), weight.as<float>(),
                            mean.as<float>(), rstd.as<float>(), n0, n1, C);
  });
  pool_.parallel_for(C, kColBlock, [&](int64_t c0, int64_t c1) {
    norm_param_grads(dweight.as<float>(), db, dout.as<float>(), inp.as<float>(), mean.as<float>(),
                     rstd.as<float>(), N, C, c0, c1);
  });
}

void CpuBackend::rmsnorm_forward(Tensor out, Tensor rstd, Tensor inp, Tensor weight, float eps) {
  // out (N, C), rstd (N), inp (N, C), weight (C).
  auto [N, C] = check_rmsnorm_forward(kPlan, out, rstd, inp, weight);
  pool_.parallel_for(N, rows_per_chunk(C), [&](int64_t n0, int64_t n1) {
    rmsnorm_forward_rows(out.as<float>(), rstd.as<float>(), inp.as<float>(), weight.as<float>(), n0,
                         n1, C, eps);
  });
}

void CpuBackend::rmsnorm_backward(Tensor dinp, Tensor dweight, Tensor dout, Tensor inp,
                                  Tensor weight, Tensor rstd) {
  // dinp (N, C), dweight (C), dout (N, C), inp (N, C), weight (C), rstd (N).
  auto [N, C] = check_rmsnorm_backward(kPlan, dinp, dweight, dout, inp, weight, rstd);
  pool_.parallel_for(N, rows_per_chunk(C), [&](int64_t n0, int64_t n1) {
    rmsnorm_backward_rows(dinp.as<float>(), dout.as<float>(), inp.as<float>(), weight.as<float>(),
                          rstd.as<float>(), n0, n1, C);
  });
  pool_.parallel_for(C, kColBlock, [&](int64_t c0, int64_t c1) {
    norm_param_grads(dweight.as<float>(), nullptr, dout.as<float>(), inp.as<float>(), nullptr,
                     rstd.as<float>(), N, C, c0, c1);
  });
}

}  // namespace ax::train::cpu
