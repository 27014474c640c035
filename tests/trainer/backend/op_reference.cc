#include "op_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "ax/trainer/backend/dropout_mask.h"

namespace ax::train::optable {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<double> zeros(int64_t n) { return std::vector<double>(static_cast<size_t>(n), 0.0); }

// GELU with the tanh approximation and its derivative.
double gelu(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}
double gelu_grad(double x) {
  const double k = std::sqrt(2 / M_PI), cubic = 0.044715;
  const double th = std::tanh(k * (x + cubic * x * x * x));
  return 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * k * (1 + 3 * cubic * x * x);
}

}  // namespace

Want embedding_reference(const EmbeddingShape& s, const Host& h) {
  const auto& tok = h.ids("tokens");
  const auto &wte = h["wte"], &dy = h["dout"];
  Want w{{"out", zeros(s.B * s.T * s.C)}, {"dwte", zeros(s.Vp * s.C)}};
  if (s.wpe_rows > 0) w["dwpe"] = zeros(s.wpe_rows * s.C);
  for (int64_t n = 0; n < s.B * s.T; ++n) {
    const int64_t t = n % s.T;
    for (int64_t c = 0; c < s.C; ++c) {
      double v = tok[n] >= 0 ? wte[tok[n] * s.C + c] : 0.0;
      if (s.wpe_rows > 0) {
        v += h["wpe"][t * s.C + c];
        w["dwpe"][t * s.C + c] += dy[n * s.C + c];
      }
      w["out"][n * s.C + c] = v;
      if (tok[n] >= 0) w["dwte"][tok[n] * s.C + c] += dy[n * s.C + c];
    }
  }
  return w;
}

Want layernorm_reference(const NormShape& s, const Host& h) {
  const auto &x = h["inp"], &wt = h["weight"];
  Want w{{"out", zeros(s.N * s.C)}, {"mean", zeros(s.N)}, {"rstd", zeros(s.N)}};
  for (int64_t n = 0; n < s.N; ++n) {
    double m = 0, v = 0;
    for (int64_t c = 0; c < s.C; ++c) m += x[n * s.C + c] / static_cast<double>(s.C);
    for (int64_t c = 0; c < s.C; ++c) v += (x[n * s.C + c] - m) * (x[n * s.C + c] - m) / s.C;
    const double rstd = 1 / std::sqrt(v + s.eps);
    w["mean"][n] = m;
    w["rstd"][n] = rstd;
    for (int64_t c = 0; c < s.C; ++c) {
      w["out"][n * s.C + c] = (x[n * s.C + c] - m) * rstd * wt[c] + (s.bias ? h["bias"][c] : 0.0);
    }
  }
  return w;
}

Want rmsnorm_reference(const NormShape& s, const Host& h) {
  const auto &x = h["inp"], &wt = h["weight"];
  Want w{{"out", zeros(s.N * s.C)}, {"rstd", zeros(s.N)}};
  for (int64_t n = 0; n < s.N; ++n) {
    double ms = 0;
    for (int64_t c = 0; c < s.C; ++c) ms += static_cast<double>(x[n * s.C + c]) * x[n * s.C + c];
    const double rstd = 1 / std::sqrt(ms / s.C + s.eps);
    w["rstd"][n] = rstd;
    for (int64_t c = 0; c < s.C; ++c) w["out"][n * s.C + c] = x[n * s.C + c] * rstd * wt[c];
  }
  return w;
}

Want matmul_reference(const MatmulShape& s, const Host& h) {
  const auto &x = h["inp"], &wt = h["weight"], &dy = h["dout"];
  const int64_t N = s.N, C = s.C, OC = s.OC;
  std::vector<double> out = zeros(N * OC), dw = zeros(OC * C), dx = zeros(N * C), db = zeros(OC);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t o = 0; o < OC; ++o) {
      double v = s.bias ? h["bias"][o] : 0.0;
      for (int64_t c = 0; c < C; ++c) v += static_cast<double>(x[n * C + c]) * wt[o * C + c];
      out[n * OC + o] = v;
      const double g = dy[n * OC + o];
      db[o] += g;
      for (int64_t c = 0; c < C; ++c) {
        dw[o * C + c] += g * x[n * C + c];
        dx[n * C + c] += g * wt[o * C + c];
      }
    }
  }
  Want w{{"out", out}, {"dweight", dw}};
  if (s.dinp) w["dinp"] = dx;
  if (s.dbias) w["dbias"] = db;
  return w;
}

// Pair j's angle per position: theta^(-2j/HD), and with llama3 scaling by its wavelength
// 2π/angle in positions: past original / low_freq_factor divided by factor, under original /
// high_freq_factor kept, in between the blend of the two weighted by how far
// original / wavelength has come from low_freq_factor towards high_freq_factor (Meta's
// apply_scaling for Llama 3.1, and transformers' _compute_llama3_parameters).
double rope_frequency(const RopeShape& s, int64_t j) {
  const double base = std::pow(static_cast<double>(s.theta), -2.0 * j / s.HD);
  if (!s.llama3) return base;
  const Llama3Scaling& l = *s.llama3;
  const double wavelength = 2 * std::acos(-1.0) / base;
  const double ratio = l.original_max_positions / wavelength;  // periods in the original context
  if (ratio < l.low_freq_factor) return base / l.factor;
  if (ratio > l.high_freq_factor) return base;
  const double smooth = (ratio - l.low_freq_factor) / (l.high_freq_factor - l.low_freq_factor);
  return (1 - smooth) * base / l.factor + smooth * base;
}

Want rope_reference(const RopeShape& s, const Host& h) {
  const auto &x = h["inp"], &dy = h["dout"];
  const int64_t R = (s.NH + 2 * s.KVH) * s.HD, half = s.HD / 2;
  Want w{{"out", zeros(s.B * s.T * R)}, {"dinp", zeros(s.B * s.T * R)}};
  auto &y = w["out"], &dx = w["dinp"];
  for (int64_t b = 0; b < s.B; ++b) {
    for (int64_t t = 0; t < s.T; ++t) {
      for (int64_t hd = 0; hd < s.NH + 2 * s.KVH; ++hd) {
        for (int64_t j = 0; j < half; ++j) {
          const int64_t i0 = (b * s.T + t) * R + hd * s.HD + j, i1 = i0 + half;
          double c = 1, sn = 0;  // value heads are copied
          if (hd < s.NH + s.KVH) {
            const double angle = static_cast<double>(s.position + t) * rope_frequency(s, j);
            c = std::cos(angle), sn = std::sin(angle);
          }
          y[i0] = x[i0] * c - x[i1] * sn;
          y[i1] = x[i0] * sn + x[i1] * c;
          dx[i0] = dy[i0] * c + dy[i1] * sn;  // the inverse rotation
          dx[i1] = -dy[i0] * sn + dy[i1] * c;
        }
      }
    }
  }
  return w;
}

// Explicit scores (scaled, plus the bias), the causal and segment masks, softmax and the
// weighted sum. A query that sees no key: zero output, lse -inf.
Want attention_reference(const AttentionShape& s, const Host& h) {
  const auto& q = h[s.packed ? "qkv" : "q"];
  const auto& kv = h[s.packed ? "qkv" : "kv"];
  const int64_t B = s.B, Tq = s.Tq, Tk = s.Tk, NH = s.NH, KVH = s.KVH, HD = s.HD;
  Want w{{"out", zeros(B * Tq * NH * HD)}, {"lse", zeros(B * NH * Tq)}};
  auto &out = w["out"], &lse = w["lse"];
  const std::vector<float>* bias = s.bias_batch > 0 ? &h["bias"] : nullptr;
  const std::vector<int32_t>* q_seg = s.segments ? &h.ids("q_segments") : nullptr;
  const std::vector<int32_t>* k_seg = s.segments ? &h.ids("k_segments") : nullptr;
  std::vector<double> sc(Tk);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t hd = 0; hd < NH; ++hd) {
      const int64_t g = hd / (NH / KVH);
      for (int64_t t = 0; t < Tq; ++t) {
        double m = -kInf;
        for (int64_t u = 0; u < Tk; ++u) {
          sc[u] = -kInf;
          if (s.causal && s.k_first + u > s.q_first + t) continue;
          if (q_seg && (*q_seg)[b * Tq + t] != (*k_seg)[b * Tk + u]) continue;
          double dot = 0;
          for (int64_t d = 0; d < HD; ++d) {
            dot += static_cast<double>(q[(b * Tq + t) * s.Rq + hd * HD + d]) *
                   kv[(b * Tk + u) * s.Rkv + s.k_offset + g * HD + d];
          }
          sc[u] = dot * s.scale;
          if (bias) sc[u] += (*bias)[(((s.bias_batch == 1 ? 0 : b) * NH + hd) * Tq + t) * Tk + u];
          m = std::max(m, sc[u]);
        }
        double& l = lse[(b * NH + hd) * Tq + t];
        if (m == -kInf) {
          l = -kInf;
          continue;
        }
        double sum = 0;
        for (int64_t u = 0; u < Tk; ++u) sum += std::exp(sc[u] - m);
        l = m + std::log(sum);
        for (int64_t u = 0; u < Tk; ++u) {
          const double p = std::exp(sc[u] - m) / sum;
          for (int64_t d = 0; d < HD; ++d) {
            out[(b * Tq + t) * NH * HD + hd * HD + d] +=
                p * kv[(b * Tk + u) * s.Rkv + s.k_offset + (KVH + g) * HD + d];
          }
        }
      }
    }
  }
  return w;
}

Want gelu_reference(const Host& h) {
  const auto &x = h["inp"], &dy = h["dout"];
  Want w{{"out", zeros(x.size())}, {"dinp", zeros(x.size())}};
  for (size_t i = 0; i < x.size(); ++i) {
    w["out"][i] = gelu(x[i]);
    w["dinp"][i] = dy[i] * gelu_grad(x[i]);
  }
  return w;
}

Want glu_reference(int64_t N, int64_t F, Glu glu, const Host& h) {
  const auto &x = h["inp"], &dy = h["dout"];
  Want w{{"out", zeros(N * F)}, {"dinp", zeros(N * 2 * F)}};
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t f = 0; f < F; ++f) {
      const double a = x[n * 2 * F + f], b = x[n * 2 * F + F + f], g = dy[n * F + f];
      double act, dact;
      if (glu == Glu::kGeGlu) {
        act = gelu(a);
        dact = gelu_grad(a);
      } else {
        const double sig = 1 / (1 + std::exp(-a));
        act = a * sig;
        dact = sig * (1 + a * (1 - sig));
      }
      w["out"][n * F + f] = act * b;
      w["dinp"][n * 2 * F + f] = g * b * dact;
      w["dinp"][n * 2 * F + F + f] = g * act;
    }
  }
  return w;
}

Want dropout_reference(int64_t N, int64_t F, const DropoutSpec& spec, const Host& h) {
  // The mask is the backend's own function (dropout_mask.h; its statistics are tested in
  // cpu_ops_test.cc); this checks which key, feature and scale each element gets.
  const auto &x = h["inp"], &dy = h["dout"];
  const auto& keys = h.ids("row_keys");
  Want w{{"out", zeros(N * F)}, {"dinp", zeros(N * F)}};
  for (int64_t n = 0; n < N; ++n) {
    const auto key = static_cast<uint32_t>(keys[n]);
    for (int64_t f = 0; f < F; ++f) {
      const auto feature = static_cast<uint32_t>(spec.feature_offset + f);
      if (!dropout_keep(spec.seed, key, feature, spec.threshold)) continue;
      w["out"][n * F + f] = static_cast<double>(x[n * F + f]) * spec.scale;
      w["dinp"][n * F + f] = static_cast<double>(dy[n * F + f]) * spec.scale;
    }
  }
  return w;
}

Want add_reference(const Host& h) {
  const auto &a = h["a"], &b = h["b"];
  std::vector<double> sum(a.size());
  for (size_t i = 0; i < a.size(); ++i) sum[i] = static_cast<double>(a[i]) + b[i];
  return {{"out", sum}, {"a", sum}};
}

Want position_bias_reference(const PositionBiasShape& s, const Host& h) {
  const auto &table = h["table"], &dbias = h["dbias"];
  const auto& ids = h.ids("buckets");
  Want w{{"bias", zeros(s.Bb * s.NH * s.Tq * s.Tk)}, {"dtable", zeros(s.K * s.NH)}};
  for (int64_t b = 0; b < s.Bb; ++b) {
    for (int64_t hd = 0; hd < s.NH; ++hd) {
      for (int64_t i = 0; i < s.Tq; ++i) {
        for (int64_t j = 0; j < s.Tk; ++j) {
          const int64_t e = ((b * s.NH + hd) * s.Tq + i) * s.Tk + j;
          const int64_t bucket = ids[(b * s.Tq + i) * s.Tk + j];
          w["bias"][e] = table[bucket * s.NH + hd];
          w["dtable"][bucket * s.NH + hd] += dbias[e];
        }
      }
    }
  }
  return w;
}

Want cross_entropy_reference(const CrossEntropyShape& s, const Host& h) {
  const auto& x = h["logits"];
  const auto& t = h.ids("targets");
  Want w{{"losses", zeros(s.N)}, {"dlogits", zeros(s.N * s.Vp)}};
  auto& dx = w["dlogits"];
  for (int64_t n = 0; n < s.N; ++n) {
    if (t[n] < 0) continue;
    double m = -kInf, sum = 0;
    for (int64_t v = 0; v < s.V; ++v) m = std::max(m, static_cast<double>(x[n * s.Vp + v]));
    for (int64_t v = 0; v < s.V; ++v) sum += std::exp(x[n * s.Vp + v] - m);
    const double lse = m + std::log(sum);
    w["losses"][n] = lse - x[n * s.Vp + t[n]] + s.z_loss * lse * lse;
    for (int64_t v = 0; v < s.V; ++v) {
      const double p = std::exp(x[n * s.Vp + v] - lse);
      dx[n * s.Vp + v] = ((1 + 2 * s.z_loss * lse) * p - (v == t[n])) * s.dloss;
    }
  }
  return w;
}

Want ce_shard_reference(const ShardShape& s, const Host& h) {
  const auto& x = h["logits"];
  const auto& t = h.ids("targets");
  Want w{{"rowmax", zeros(s.N)}, {"sums", zeros(s.N * 2)}, {"dlogits", zeros(s.N * s.Vl)}};
  for (int64_t n = 0; n < s.N; ++n) {
    double m = -kInf, sum = 0;
    for (int64_t v = 0; v < s.v_count; ++v) m = std::max(m, static_cast<double>(x[n * s.Vl + v]));
    for (int64_t v = 0; v < s.v_count; ++v) sum += std::exp(x[n * s.Vl + v] - m);
    const int64_t local = t[n] - s.v_begin;
    const bool here = t[n] >= 0 && local >= 0 && local < s.v_count;
    w["rowmax"][n] = m;
    w["sums"][2 * n] = sum;
    w["sums"][2 * n + 1] = here ? x[n * s.Vl + local] : 0.0;
    if (t[n] < 0) continue;
    const double lse = m + std::log(sum);
    for (int64_t v = 0; v < s.v_count; ++v) {
      const double p = std::exp(x[n * s.Vl + v] - lse);
      w["dlogits"][n * s.Vl + v] = ((1 + 2 * s.z_loss * lse) * p - (v == local)) * s.dloss;
    }
  }
  return w;
}

Want adamw_reference(const AdamWShape& s, const Host& h) {
  const auto &p0 = h["params"], &m0 = h["m"], &v0 = h["v"], &g = h["grads"];
  std::vector<double> p(p0.begin(), p0.end()), m(m0.begin(), m0.end()), v(v0.begin(), v0.end());
  const AdamWArgs& a = s.args;
  const double b1 = a.beta1, b2 = a.beta2, lr = a.lr, wd = a.weight_decay;
  for (int64_t k = 0; k < s.steps; ++k) {
    const int64_t step = a.step + k, row = s.same_grads ? 0 : k;
    const double bc1 = 1 - std::pow(b1, step), bc2 = 1 - std::pow(b2, step);
    for (int64_t i = 0; i < s.n; ++i) {
      const double gi = static_cast<double>(a.grad_scale) * g[row * s.n + i];
      p[i] *= 1 - lr * wd;
      m[i] = b1 * m[i] + (1 - b1) * gi;
      v[i] = b2 * v[i] + (1 - b2) * gi * gi;
      p[i] -= lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + a.eps);
    }
  }
  return {{"params", p}, {"m", m}, {"v", v}};
}

}  // namespace ax::train::optable
