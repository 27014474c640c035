// Forward values of the CPU backend against naive double-precision references, and the
// properties the rest of ax relies on: the accumulate convention, in-place use where the
// contract allows it, bf16 casts, AdamW as torch.optim.AdamW computes it, results that do not
// depend on the thread count, and aborts on shape or dtype mismatches.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "ax/trainer/op_checks.h"
#include "backend_test_util.h"

namespace ax::train {
namespace {

using testing::Buffers;

// A backend with the builtin GEMM kernel instead of OpenBLAS.
std::unique_ptr<Backend> make_builtin_gemm_backend(int threads) {
  setenv("AX_CPU_GEMM", "builtin", 1);
  auto be = make_cpu_backend(threads);
  unsetenv("AX_CPU_GEMM");
  return be;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want, double tol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::abs(got[i] - want[i]) > tol * (1 + std::abs(want[i])) && ++bad <= 5) {
      ADD_FAILURE() << what << "[" << i << "]: " << got[i] << " vs " << want[i];
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

TEST(CpuBackend, DescribesItself) {
  auto be = make_cpu_backend(2);
  EXPECT_NE(be->name().find("cpu (2 threads, "), std::string::npos) << be->name();
  EXPECT_EQ(be->compute_dtype(), DType::kF32);
  EXPECT_GT(be->peak_flops(), 1e9);
  EXPECT_NE(make_builtin_gemm_backend(1)->name().find("builtin GEMM"), std::string::npos);
}

TEST(CpuBackend, AllocIsZeroedAndAligned) {
  auto be = make_cpu_backend(1);
  auto p = be->alloc(1000);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*p) % 64, 0u);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(static_cast<char*>(*p)[i], 0);
  be->free(*p);
}

TEST(CpuBackend, CountsTheBytesItHolds) {
  auto be = make_cpu_backend(1);
  const size_t base = be->bytes_in_use();
  auto a = be->alloc(1000), b = be->alloc(64);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(be->bytes_in_use(), base + 1024 + 64);  // rounded up to 64 bytes
  be->free(*a);
  EXPECT_EQ(be->bytes_in_use(), base + 64);
  EXPECT_EQ(be->peak_bytes_in_use(), base + 1024 + 64);
  be->free(*b);
  EXPECT_EQ(be->bytes_in_use(), base);
}

class CpuOps : public ::testing::TestWithParam<bool> {  // param: builtin GEMM
 protected:
  std::unique_ptr<Backend> backend(int threads = 2) {
    return GetParam() ? make_builtin_gemm_backend(threads) : make_cpu_backend(threads);
  }
};

TEST_P(CpuOps, MatmulMatchesNaive) {
  std::mt19937 rng(1);
  auto be = backend();
  Buffers buf(*be);
  for (auto [N, C, OC, with_bias] : {std::tuple{67, 45, 33, true},
                                     {128, 96, 160, false},
                                     {300, 64, 70, true},
                                     {3, 5, 2, true},
                                     {20, 600, 530, true}}) {
    auto x = testing::normal(rng, N * C), w = testing::normal(rng, OC * C);
    auto bias = testing::normal(rng, OC), dy = testing::normal(rng, N * OC);
    auto dx0 = testing::normal(rng, N * C), dw0 = testing::normal(rng, OC * C);
    auto db0 = testing::normal(rng, OC);
    Tensor inp = buf.f32({N, C}, x), weight = buf.f32({OC, C}, w), out = buf.f32({N, OC});
    Tensor b = with_bias ? buf.f32({OC}, bias) : Tensor();
    Tensor dout = buf.f32({N, OC}, dy), dinp = buf.f32({N, C}, dx0);
    Tensor dweight = buf.f32({OC, C}, dw0), dbias = buf.f32({OC}, db0);
    be->matmul_forward(out, inp, weight, b);
    be->matmul_backward(dinp, dweight, dbias, dout, inp, weight);
    std::vector<double> want(N * OC), want_dx(N * C), want_dw(OC * C), want_db(OC);
    for (int n = 0; n < N; ++n) {
      for (int o = 0; o < OC; ++o) {
        double s = with_bias ? bias[o] : 0;
        for (int c = 0; c < C; ++c) s += static_cast<double>(x[n * C + c]) * w[o * C + c];
        want[n * OC + o] = s;
      }
    }
    for (int n = 0; n < N; ++n) {
      for (int c = 0; c < C; ++c) {
        double s = dx0[n * C + c];
        for (int o = 0; o < OC; ++o) s += static_cast<double>(dy[n * OC + o]) * w[o * C + c];
        want_dx[n * C + c] = s;
      }
    }
    for (int o = 0; o < OC; ++o) {
      double sb = db0[o];
      for (int n = 0; n < N; ++n) sb += dy[n * OC + o];
      want_db[o] = sb;
      for (int c = 0; c < C; ++c) {
        double s = dw0[o * C + c];
        for (int n = 0; n < N; ++n) s += static_cast<double>(dy[n * OC + o]) * x[n * C + c];
        want_dw[o * C + c] = s;
      }
    }
    // Float sums of up to 600 products of N(0, 1) values: rounding errors reach ~5e-5.
    std::string shape = "N" + std::to_string(N) + " C" + std::to_string(C);
    expect_close(buf.read(out), want, 1e-4, "out " + shape);
    expect_close(buf.read(dinp), want_dx, 1e-4, "dinp " + shape);
    expect_close(buf.read(dweight), want_dw, 1e-4, "dweight " + shape);
    expect_close(buf.read(dbias), want_db, 1e-4, "dbias " + shape);
  }
}

// Attention by the book, in double: explicit scores (scaled, plus the bias), the causal and
// segment masks, softmax and the weighted sum. q (B, Tq, Rq) has the queries in its first NH·HD
// columns, kv (B, Tk, Rkv) keys from k_offset and values after them; bias (Bb, NH, Tq, Tk) or
// empty; segments (B, Tq), (B, Tk) or empty. A query that sees no key: zero output, lse -inf.
struct NaiveAttention {
  int B, Tq, Tk, NH, KVH, HD, Rq, Rkv, k_offset, bias_batch = 0;
  bool causal;
  double scale;
  std::vector<float> q, kv, bias;
  std::vector<int32_t> q_seg, k_seg;

  void run(std::vector<double>& out, std::vector<double>& lse) const {
    const double inf = std::numeric_limits<double>::infinity();
    out.assign(static_cast<size_t>(B) * Tq * NH * HD, 0);
    lse.assign(static_cast<size_t>(B) * NH * Tq, 0);
    for (int b = 0; b < B; ++b) {
      for (int h = 0; h < NH; ++h) {
        const int g = h / (NH / KVH);
        for (int t = 0; t < Tq; ++t) {
          std::vector<double> s(Tk, -inf);
          double m = -inf;
          for (int u = 0; u < Tk; ++u) {
            if (causal && u > t) continue;
            if (!q_seg.empty() && q_seg[b * Tq + t] != k_seg[b * Tk + u]) continue;
            double dot = 0;
            for (int d = 0; d < HD; ++d) {
              dot += static_cast<double>(q[(b * Tq + t) * Rq + h * HD + d]) *
                     kv[(b * Tk + u) * Rkv + k_offset + g * HD + d];
            }
            s[u] = dot * scale;
            if (bias_batch > 0) {
              s[u] += bias[(((bias_batch == 1 ? 0 : b) * NH + h) * Tq + t) * Tk + u];
            }
            m = std::max(m, s[u]);
          }
          if (m == -inf) {
            lse[(b * NH + h) * Tq + t] = -inf;
            continue;
          }
          double sum = 0;
          for (int u = 0; u < Tk; ++u) sum += std::exp(s[u] - m);
          lse[(b * NH + h) * Tq + t] = m + std::log(sum);
          for (int u = 0; u < Tk; ++u) {
            const double p = std::exp(s[u] - m) / sum;
            for (int d = 0; d < HD; ++d) {
              out[(b * Tq + t) * NH * HD + h * HD + d] +=
                  p * kv[(b * Tk + u) * Rkv + k_offset + (KVH + g) * HD + d];
            }
          }
        }
      }
    }
  }
};

TEST_P(CpuOps, AttentionMatchesExplicitSoftmax) {
  std::mt19937 rng(2);
  auto be = backend();
  Buffers buf(*be);
  for (auto [B, T, NH, KVH, HD, causal] : {std::tuple{2, 5, 4, 2, 8, true},
                                           {1, 70, 4, 1, 16, false},
                                           {2, 130, 2, 2, 8, true},
                                           {1, 9, 4, 4, 6, false}}) {
    const int R = (NH + 2 * KVH) * HD;
    auto x = testing::normal(rng, B * T * R);
    Tensor qkv = buf.f32({B, T, R}, x);
    Tensor out = buf.f32({B, T, NH * HD}), lse = buf.f32({B, NH, T});
    be->attention_forward(out, lse, qkv, qkv, testing::packed_attention(NH, KVH, HD, causal));
    NaiveAttention n{B, T, T, NH, KVH, HD, R, R, NH * HD, 0, causal, 1 / std::sqrt(double(HD))};
    n.q = n.kv = x;
    std::vector<double> want_out, want_lse;
    n.run(want_out, want_lse);
    std::string shape = "T" + std::to_string(T) + " KVH" + std::to_string(KVH);
    expect_close(buf.read(out), want_out, 2e-5, "out " + shape);
    expect_close(buf.read(lse), want_lse, 2e-5, "lse " + shape);
  }
}

// The general op: cross-attention (queries and keys of their own lengths and tensors), its own
// scale, a bias shared by the batch or per row, and segment ids (packing and padding), where a
// query of a segment no key has gets zeros and lse = -inf, not NaN.
TEST_P(CpuOps, GeneralAttentionMatchesExplicitSoftmax) {
  std::mt19937 rng(21);
  auto be = backend();
  Buffers buf(*be);
  struct Case {
    int B, Tq, Tk, NH, KVH, HD, bias_batch;
    bool causal, segments;
    float scale;
  };
  for (const Case& c : {Case{2, 5, 7, 4, 2, 8, 0, false, false, 1.0f},
                        Case{2, 70, 9, 2, 1, 16, 1, false, true, 0.5f},
                        Case{1, 6, 6, 4, 4, 4, 2 - 1, true, true, 0.25f},
                        Case{3, 8, 8, 2, 2, 8, 3, true, true, 1.0f},
                        Case{2, 66, 66, 2, 1, 8, 2, true, true, 0.3f}}) {
    const int Rq = c.NH * c.HD + 5, Rkv = 2 * c.KVH * c.HD + 3, k_offset = 2;
    NaiveAttention n{c.B, c.Tq, c.Tk,     c.NH,         c.KVH,    c.HD,
                     Rq,  Rkv,  k_offset, c.bias_batch, c.causal, c.scale};
    n.q = testing::normal(rng, c.B * c.Tq * Rq);
    n.kv = testing::normal(rng, c.B * c.Tk * Rkv);
    AttentionSpec spec;
    spec.num_heads = c.NH;
    spec.num_kv_heads = c.KVH;
    spec.causal = c.causal;
    spec.scale = c.scale;
    spec.k_offset = k_offset;
    if (c.bias_batch > 0) {
      n.bias = testing::normal(rng, c.bias_batch * c.NH * c.Tq * c.Tk);
      spec.bias = buf.f32({c.bias_batch, c.NH, c.Tq, c.Tk}, n.bias);
    }
    if (c.segments) {
      // Segments 1, 2, ... in runs of 3 queries and 4 keys; segment 9 (the last queries of
      // row 0) has no key at all.
      for (int b = 0; b < c.B; ++b) {
        for (int t = 0; t < c.Tq; ++t) n.q_seg.push_back(b == 0 && t >= c.Tq - 2 ? 9 : 1 + t / 3);
        for (int u = 0; u < c.Tk; ++u) n.k_seg.push_back(1 + u / 4);
      }
      spec.q_segments = buf.i32({c.B, c.Tq}, n.q_seg);
      spec.k_segments = buf.i32({c.B, c.Tk}, n.k_seg);
    }
    Tensor q = buf.f32({c.B, c.Tq, Rq}, n.q), kv = buf.f32({c.B, c.Tk, Rkv}, n.kv);
    Tensor out = buf.f32({c.B, c.Tq, c.NH * c.HD}), lse = buf.f32({c.B, c.NH, c.Tq});
    be->attention_forward(out, lse, q, kv, spec);
    std::vector<double> want_out, want_lse;
    n.run(want_out, want_lse);
    const std::string name = "Tq" + std::to_string(c.Tq) + " Tk" + std::to_string(c.Tk);
    expect_close(buf.read(out), want_out, 2e-5, "out " + name);
    std::vector<float> got_lse = buf.read(lse);
    int masked = 0;
    for (size_t i = 0; i < got_lse.size(); ++i) {
      if (std::isinf(want_lse[i])) {
        EXPECT_TRUE(std::isinf(got_lse[i]) && got_lse[i] < 0) << name << " lse " << i;
        got_lse[i] = 0;
        want_lse[i] = 0;
        ++masked;
      }
    }
    EXPECT_EQ(masked > 0, c.segments) << name;
    expect_close(got_lse, want_lse, 2e-5, "lse " + name);
    for (float v : buf.read(out)) ASSERT_FALSE(std::isnan(v)) << name;
  }
}

TEST_P(CpuOps, AttentionBackwardAgreesAcrossGemmKernels) {
  // The finite-difference check covers OpenBLAS at T >= 64; here the builtin kernel must agree.
  std::mt19937 rng(3);
  int B = 1, T = 70, NH = 4, KVH = 2, HD = 16, R = (NH + 2 * KVH) * HD;
  auto x = testing::normal(rng, B * T * R), dy = testing::normal(rng, B * T * NH * HD);
  std::vector<float> results[2];
  for (int k = 0; k < 2; ++k) {
    auto be = k == 0 ? make_cpu_backend(2) : backend();
    Buffers buf(*be);
    Tensor qkv = buf.f32({B, T, R}, x), dqkv = buf.f32({B, T, R});
    Tensor out = buf.f32({B, T, NH * HD}), lse = buf.f32({B, NH, T});
    Tensor dout = buf.f32({B, T, NH * HD}, dy);
    const AttentionSpec spec = testing::packed_attention(NH, KVH, HD, true);
    be->attention_forward(out, lse, qkv, qkv, spec);
    be->attention_backward(dqkv, dqkv, Tensor(), dout, out, lse, qkv, qkv, spec);
    results[k] = buf.read(dqkv);
  }
  std::vector<double> want(results[0].begin(), results[0].end());
  expect_close(results[1], want, 1e-5, "dqkv");
}

INSTANTIATE_TEST_SUITE_P(Gemm, CpuOps, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Builtin" : "Default";
                         });

TEST(CpuNorms, LayerNormAndRmsNormMatchNaive) {
  std::mt19937 rng(4);
  auto be = make_cpu_backend(2);
  Buffers buf(*be);
  int N = 6, C = 37;
  auto x = testing::normal(rng, N * C, 3.0f, 1.5f), w = testing::normal(rng, C);
  auto bias = testing::normal(rng, C);
  Tensor inp = buf.f32({N, C}, x), weight = buf.f32({C}, w), b = buf.f32({C}, bias);
  Tensor out = buf.f32({N, C}), mean = buf.f32({N}), rstd = buf.f32({N});
  be->layernorm_forward(out, mean, rstd, inp, weight, b, 1e-5f);
  std::vector<double> want(N * C), want_mean(N), want_rstd(N), want_rms(N * C), want_rrstd(N);
  for (int n = 0; n < N; ++n) {
    double m = 0, v = 0, ms = 0;
    for (int c = 0; c < C; ++c) m += x[n * C + c] / static_cast<double>(C);
    for (int c = 0; c < C; ++c) {
      v += (x[n * C + c] - m) * (x[n * C + c] - m) / C;
      ms += static_cast<double>(x[n * C + c]) * x[n * C + c] / C;
    }
    want_mean[n] = m;
    want_rstd[n] = 1 / std::sqrt(v + 1e-5);
    want_rrstd[n] = 1 / std::sqrt(ms + 1e-5);
    for (int c = 0; c < C; ++c) {
      want[n * C + c] = (x[n * C + c] - m) * want_rstd[n] * w[c] + bias[c];
      want_rms[n * C + c] = x[n * C + c] * want_rrstd[n] * w[c];
    }
  }
  expect_close(buf.read(out), want, 1e-5, "layernorm out");
  expect_close(buf.read(mean), want_mean, 1e-6, "layernorm mean");
  expect_close(buf.read(rstd), want_rstd, 1e-6, "layernorm rstd");
  be->rmsnorm_forward(out, rstd, inp, weight, 1e-5f);
  expect_close(buf.read(out), want_rms, 1e-5, "rmsnorm out");
  expect_close(buf.read(rstd), want_rrstd, 1e-6, "rmsnorm rstd");
}

TEST(CpuCrossEntropy, MatchesLogSumExpAndWorksInPlace) {
  std::mt19937 rng(5);
  auto be = make_cpu_backend(2);
  Buffers buf(*be);
  int N = 5, V = 10, Vp = 16;
  auto x = testing::normal(rng, N * Vp, 3.0f);
  for (int i = 0; i < Vp; ++i) x[3 * Vp + i] += 1000.0f;  // stable for large logits
  std::vector<int32_t> t = {3, -1, 9, 0, 7};
  Tensor logits = buf.f32({N, Vp}, x), targets = buf.i32({N}, t), losses = buf.f32({N});
  be->cross_entropy_forward(losses, logits, targets, V, /*z_loss=*/0);
  std::vector<double> want_loss(N, 0), want_grad(N * Vp, 0);
  const float dloss = 0.25f;
  for (int n = 0; n < N; ++n) {
    if (t[n] < 0) continue;
    double m = -1e300, s = 0;
    for (int v = 0; v < V; ++v) m = std::max(m, static_cast<double>(x[n * Vp + v]));
    for (int v = 0; v < V; ++v) s += std::exp(x[n * Vp + v] - m);
    want_loss[n] = m + std::log(s) - x[n * Vp + t[n]];
    for (int v = 0; v < V; ++v) {
      want_grad[n * Vp + v] = (std::exp(x[n * Vp + v] - m) / s - (v == t[n])) * dloss;
    }
  }
  expect_close(buf.read(losses), want_loss, 1e-6, "losses");
  be->cross_entropy_backward(logits, logits, targets, V, dloss, 0);  // in place
  expect_close(buf.read(logits), want_grad, 1e-6, "dlogits in place");
  Tensor logits2 = buf.f32({N, Vp}, x), dlogits = buf.f32({N, Vp}, testing::normal(rng, N * Vp));
  be->cross_entropy_backward(dlogits, logits2, targets, V, dloss, 0);  // overwrites
  expect_close(buf.read(dlogits), want_grad, 1e-6, "dlogits");
}

// Three vocabulary shards of 6 columns (V = 10 real of Vp = 18: the last shard is all padding)
// combined as the model does (max, then sums) give the losses and gradients of the whole row,
// without and with a z-loss (the host adds z_loss · lse² to the combined loss).
TEST(CpuCrossEntropy, VocabularyShardsCombineToTheWholeRow) {
  std::mt19937 rng(6);
  auto be = make_cpu_backend(2);
  Buffers buf(*be);
  const int N = 5, V = 10, Vp = 18, S = 3, Vl = Vp / S;
  auto x = testing::normal(rng, N * Vp, 3.0f);
  for (int i = 0; i < Vp; ++i) x[2 * Vp + i] += 500.0f;
  std::vector<int32_t> t = {3, -1, 9, 0, 7};
  const float dloss = 0.5f;
  for (float z : {0.0f, 0.1f}) {
    SCOPED_TRACE(::testing::Message() << "z_loss " << z);
    Tensor whole = buf.f32({N, Vp}, x), targets = buf.i32({N}, t), losses = buf.f32({N});
    be->cross_entropy_forward(losses, whole, targets, V, z);
    auto want_loss = buf.read(losses);
    be->cross_entropy_backward(whole, whole, targets, V, dloss, z);
    auto want_grad = buf.read(whole);

    std::vector<Tensor> shards;
    std::vector<float> gmax(N, -std::numeric_limits<float>::infinity()), gsum(N, 0), gtgt(N, 0);
    for (int s = 0; s < S; ++s) {
      std::vector<float> part(N * Vl);
      for (int n = 0; n < N; ++n) {
        for (int j = 0; j < Vl; ++j) part[n * Vl + j] = x[n * Vp + s * Vl + j];
      }
      shards.push_back(buf.f32({N, Vl}, part));
      Tensor m = buf.f32({N});
      int64_t v_count = std::clamp<int64_t>(V - s * Vl, 0, Vl);
      be->ce_shard_max(m, shards[s], v_count);
      auto mv = buf.read(m);
      for (int n = 0; n < N; ++n) gmax[n] = std::max(gmax[n], mv[n]);
    }
    Tensor gmax_t = buf.f32({N}, gmax);
    for (int s = 0; s < S; ++s) {
      Tensor sums = buf.f32({N, 2});
      be->ce_shard_sums(sums, shards[s], gmax_t, targets, s * Vl, std::clamp(V - s * Vl, 0, Vl));
      auto sv = buf.read(sums);
      for (int n = 0; n < N; ++n) gsum[n] += sv[2 * n], gtgt[n] += sv[2 * n + 1];
    }
    std::vector<float> lse(N);
    for (int n = 0; n < N; ++n) {
      lse[n] = gmax[n] + std::log(gsum[n]);
      if (t[n] >= 0) {
        const double loss = static_cast<double>(lse[n]) - gtgt[n] + double{z} * lse[n] * lse[n];
        EXPECT_NEAR(loss, want_loss[n], 1e-5 * (1 + want_loss[n])) << n;
      }
    }
    Tensor lse_t = buf.f32({N}, lse);
    for (int s = 0; s < S; ++s) {
      be->ce_shard_backward(shards[s], shards[s], lse_t, targets, s * Vl,
                            std::clamp(V - s * Vl, 0, Vl), dloss, z);  // in place
      auto g = buf.read(shards[s]);
      for (int n = 0; n < N; ++n) {
        for (int j = 0; j < Vl; ++j) {
          const float want = want_grad[n * Vp + s * Vl + j];
          EXPECT_NEAR(g[n * Vl + j], want, 1e-5 * (1 + std::abs(want)))
              << n << "," << s << "," << j;
        }
      }
    }
  }
}

// T5x's z-loss: loss = lse - x[target] + z·lse², dlogits = ((1 + 2·z·lse)·softmax - onehot)·dloss,
// against double, for the z-loss T5 trains with (1e-4) and one large enough to dominate (0.1);
// logits around 6 make lse large, so the term is far from negligible at 0.1.
TEST(CpuCrossEntropy, ZLossMatchesFormula) {
  std::mt19937 rng(51);
  auto be = make_cpu_backend(2);
  Buffers buf(*be);
  const int N = 6, V = 13, Vp = 16;
  auto x = testing::normal(rng, N * Vp, 2.0f, 6.0f);
  std::vector<int32_t> t = {3, -1, 12, 0, 7, 5};
  const float dloss = 0.25f;
  for (float z : {1e-4f, 0.1f}) {
    SCOPED_TRACE(::testing::Message() << "z_loss " << z);
    Tensor logits = buf.f32({N, Vp}, x), targets = buf.i32({N}, t), losses = buf.f32({N});
    be->cross_entropy_forward(losses, logits, targets, V, z);
    std::vector<double> want_loss(N, 0), want_grad(N * Vp, 0);
    for (int n = 0; n < N; ++n) {
      if (t[n] < 0) continue;
      double m = -1e300, s = 0;
      for (int v = 0; v < V; ++v) m = std::max(m, static_cast<double>(x[n * Vp + v]));
      for (int v = 0; v < V; ++v) s += std::exp(x[n * Vp + v] - m);
      const double lse = m + std::log(s);
      want_loss[n] = lse - x[n * Vp + t[n]] + z * lse * lse;
      for (int v = 0; v < V; ++v) {
        const double p = std::exp(x[n * Vp + v] - lse);
        want_grad[n * Vp + v] = ((1 + 2 * z * lse) * p - (v == t[n])) * dloss;
      }
    }
    expect_close(buf.read(losses), want_loss, 1e-6, "losses");
    be->cross_entropy_backward(logits, logits, targets, V, dloss, z);  // in place
    expect_close(buf.read(logits), want_grad, 1e-6, "dlogits");
  }
}

// A token < 0 belongs to another vocabulary shard: a zero row plus the position, no gradient.
TEST(CpuPointwise, EmbeddingSkipsOtherShardsTokens) {
  std::mt19937 rng(9);
  auto be = make_cpu_backend(2);
  Buffers buf(*be);
  int B = 1, T = 3, Vp = 4, C = 5;
  std::vector<int32_t> tok = {2, -1, 0};
  auto wte = testing::normal(rng, Vp * C), wpe = testing::normal(rng, T * C);
  auto dy = testing::normal(rng, B * T * C);
  Tensor tokens = buf.i32({B, T}, tok), out = buf.f32({B, T, C}), twte = buf.f32({Vp, C}, wte);
  Tensor twpe = buf.f32({T, C}, wpe), dwte = buf.f32({Vp, C}), dout = buf.f32({B, T, C}, dy);
  be->embedding_forward(out, tokens, twte, twpe);
  be->embedding_backward(dwte, Tensor(), dout, tokens);
  auto o = buf.read(out), g = buf.read(dwte);
  for (int c = 0; c < C; ++c) {
    EXPECT_FLOAT_EQ(o[C + c], wpe[C + c]);
    EXPECT_FLOAT_EQ(o[c], wte[2 * C + c] + wpe[c]);
    EXPECT_FLOAT_EQ(g[2 * C + c], dy[c]);
    EXPECT_FLOAT_EQ(g[0 * C + c], dy[2 * C + c]);
    EXPECT_EQ(g[1 * C + c], 0.0f);
    EXPECT_EQ(g[3 * C + c], 0.0f);
  }
}

TEST(CpuRope, RotatesQueryAndKeyHeadsOnly) {
  std::mt19937 rng(6);
  auto be = make_cpu_backend(2);
  Buffers buf(*be);
  int B = 2, T = 9, NH = 4, KVH = 2, HD = 8, R = (NH + 2 * KVH) * HD, half = HD / 2;
  float theta = 10000.0f;
  auto x = testing::normal(rng, B * T * R);
  Tensor inp = buf.f32({B, T, R}, x), out = buf.f32({B, T, R});
  be->rope_forward(out, inp, NH, KVH, theta);
  auto y = buf.read(out);
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      for (int h = 0; h < NH + 2 * KVH; ++h) {
        for (int j = 0; j < half; ++j) {
          int i0 = (b * T + t) * R + h * HD + j, i1 = i0 + half;
          if (h >= NH + KVH || t == 0) {  // value heads and position 0: unchanged
            ASSERT_EQ(y[i0], x[i0]);
            ASSERT_EQ(y[i1], x[i1]);
            continue;
          }
          double angle = t * std::pow(static_cast<double>(theta), -2.0 * j / HD);
          double c = std::cos(angle), s = std::sin(angle);
          ASSERT_NEAR(y[i0], x[i0] * c - x[i1] * s, 1e-5);
          ASSERT_NEAR(y[i1], x[i0] * s + x[i1] * c, 1e-5);
          ASSERT_NEAR(std::hypot(y[i0], y[i1]), std::hypot(x[i0], x[i1]), 1e-5);  // a rotation
        }
      }
    }
  }
  // The backward pass is the inverse rotation: applied to rope(x) it gives x back.
  Tensor back = buf.f32({B, T, R});
  be->rope_backward(back, out, NH, KVH, theta);
  expect_close(buf.read(back), std::vector<double>(x.begin(), x.end()), 1e-5, "inverse");
  be->rope_forward(inp, inp, NH, KVH, theta);  // in place
  EXPECT_EQ(buf.read(inp), y);
}

TEST(CpuPointwise, GeluSwigluAddEmbeddingMatchFormulas) {
  std::mt19937 rng(7);
  auto be = make_cpu_backend(2);
  Buffers buf(*be);
  int N = 7, F = 45;
  auto x = testing::normal(rng, N * 2 * F, 3.0f);
  x[0] = 0, x[1] = 50, x[2] = -50;
  Tensor inp = buf.f32({N, 2 * F}, x), out = buf.f32({N, 2 * F}), half = buf.f32({N, F});
  be->gelu_forward(out, inp);
  be->glu_forward(half, inp, Glu::kSwiGlu);
  std::vector<double> want_gelu(N * 2 * F), want_swiglu(N * F), want_sum(N * 2 * F);
  for (int i = 0; i < N * 2 * F; ++i) {
    double v = x[i];
    want_gelu[i] = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    want_sum[i] = want_gelu[i] + v;
  }
  for (int n = 0; n < N; ++n) {
    for (int f = 0; f < F; ++f) {
      double a = x[n * 2 * F + f], b = x[n * 2 * F + F + f];
      want_swiglu[n * F + f] = a / (1 + std::exp(-a)) * b;
    }
  }
  expect_close(buf.read(out), want_gelu, 2e-6, "gelu");
  expect_close(buf.read(half), want_swiglu, 2e-6, "swiglu");
  be->add_forward(out, out, inp);  // the residual stream adds in place
  expect_close(buf.read(out), want_sum, 2e-6, "add");

  int B = 2, T = 3, Vp = 4, C = 5;
  std::vector<int32_t> tok = {1, 3, 1, 1, 0, 3};
  auto wte = testing::normal(rng, Vp * C), wpe = testing::normal(rng, 4 * C);
  auto dy = testing::normal(rng, B * T * C);
  Tensor tokens = buf.i32({B, T}, tok), e_out = buf.f32({B, T, C});
  Tensor twte = buf.f32({Vp, C}, wte), twpe = buf.f32({4, C}, wpe);
  Tensor dwte = buf.f32({Vp, C}), dwpe = buf.f32({4, C}), dout = buf.f32({B, T, C}, dy);
  be->embedding_forward(e_out, tokens, twte, twpe);
  be->embedding_backward(dwte, dwpe, dout, tokens);
  std::vector<double> want_e(B * T * C), want_dwte(Vp * C, 0), want_dwpe(4 * C, 0);
  for (int n = 0; n < B * T; ++n) {
    for (int c = 0; c < C; ++c) {
      want_e[n * C + c] = wte[tok[n] * C + c] + wpe[(n % T) * C + c];
      want_dwte[tok[n] * C + c] += dy[n * C + c];
      want_dwpe[(n % T) * C + c] += dy[n * C + c];
    }
  }
  expect_close(buf.read(e_out), want_e, 1e-6, "embedding");
  expect_close(buf.read(dwte), want_dwte, 1e-6, "dwte");
  expect_close(buf.read(dwpe), want_dwpe, 1e-6, "dwpe");
}

// Both gated linear units, forward and backward (accumulating into a random dinp), against the
// formulas in double; the gates include 0 and ±50 (the saturated tails).
TEST(CpuPointwise, GatedLinearUnitsMatchFormulas) {
  std::mt19937 rng(71);
  auto be = make_cpu_backend(2);
  Buffers buf(*be);
  const int N = 7, F = 45;
  auto x = testing::normal(rng, N * 2 * F, 3.0f);
  x[0] = 0, x[1] = 50, x[2] = -50;
  auto dy = testing::normal(rng, N * F), dx0 = testing::normal(rng, N * 2 * F);
  const double k = std::sqrt(2 / M_PI), cubic = 0.044715;
  for (Glu glu : {Glu::kSwiGlu, Glu::kGeGlu}) {
    const bool gelu = glu == Glu::kGeGlu;
    SCOPED_TRACE(gelu ? "geglu" : "swiglu");
    Tensor inp = buf.f32({N, 2 * F}, x), out = buf.f32({N, F});
    Tensor dout = buf.f32({N, F}, dy), dinp = buf.f32({N, 2 * F}, dx0);
    be->glu_forward(out, inp, glu);
    be->glu_backward(dinp, dout, inp, glu);
    std::vector<double> want(N * F), want_dx(N * 2 * F, 0.0);
    for (int n = 0; n < N; ++n) {
      for (int f = 0; f < F; ++f) {
        const double a = x[n * 2 * F + f], b = x[n * 2 * F + F + f], g = dy[n * F + f];
        double act, dact;
        if (gelu) {
          const double th = std::tanh(k * (a + cubic * a * a * a));
          act = 0.5 * a * (1 + th);
          dact = 0.5 * (1 + th) + 0.5 * a * (1 - th * th) * k * (1 + 3 * cubic * a * a);
        } else {
          const double sig = 1 / (1 + std::exp(-a));
          act = a * sig;
          dact = sig * (1 + a * (1 - sig));
        }
        want[n * F + f] = act * b;
        want_dx[n * 2 * F + f] += g * b * dact;
        want_dx[n * 2 * F + F + f] += g * act;
      }
    }
    expect_close(buf.read(out), want, 2e-6, "out");
    // What backward added to dinp (the difference of two floats is exact in double). GELU's
    // derivative, 0.5·x·(1 - tanh²)·du, scales tanh_f32's ~1e-7 absolute error by up to ~100 for
    // gates around ±9, hence GeGLU's wider bound.
    std::vector<float> added = buf.read(dinp);
    for (size_t i = 0; i < added.size(); ++i) {
      added[i] = static_cast<float>(static_cast<double>(added[i]) - dx0[i]);
    }
    expect_close(added, want_dx, gelu ? 2e-5 : 2e-6, "dinp");
  }
}

// T5's relative position bias: the forward pass is a gather (the table's values exactly), the
// backward pass sums the bias gradient per (bucket, head) into a random starting dtable
// (against double), for a bias shared by the batch (Bb = 1) and one per batch row (Bb = 3), with
// buckets shared by many positions and one (the last) used by none; the same bits on 1 and 3
// threads.
TEST(CpuPositionBias, GathersTheTableAndSumsItsGradientPerBucket) {
  std::mt19937 rng(72);
  for (auto [Bb, NH, Tq, Tk, K] :
       {std::tuple{1, 4, 9, 9, 32}, {3, 2, 5, 7, 6}, {2, 3, 70, 66, 32}, {1, 1, 1, 1, 2}}) {
    SCOPED_TRACE(::testing::Message() << "Bb=" << Bb << " NH=" << NH << " Tq=" << Tq << " Tk=" << Tk
                                      << " buckets=" << K);
    auto ids = testing::ints(rng, Bb * Tq * Tk, 0, K - 1);
    auto table_v = testing::normal(rng, K * NH), dbias_v = testing::normal(rng, Bb * NH * Tq * Tk);
    auto dtable0 = testing::normal(rng, K * NH);
    std::vector<float> bias_out[2], dtable_out[2];
    for (int k = 0; k < 2; ++k) {
      auto be = make_cpu_backend(k == 0 ? 1 : 3);
      Buffers buf(*be);
      Tensor buckets = buf.i32({Bb, Tq, Tk}, ids), table = buf.f32({K, NH}, table_v);
      Tensor bias = buf.f32({Bb, NH, Tq, Tk}), dbias = buf.f32({Bb, NH, Tq, Tk}, dbias_v);
      Tensor dtable = buf.f32({K, NH}, dtable0);
      be->position_bias_forward(bias, table, buckets);
      be->position_bias_backward(dtable, dbias, buckets);
      bias_out[k] = buf.read(bias);
      dtable_out[k] = buf.read(dtable);
    }
    std::vector<double> want_dtable(dtable0.begin(), dtable0.end());
    for (int b = 0; b < Bb; ++b) {
      for (int h = 0; h < NH; ++h) {
        for (int i = 0; i < Tq; ++i) {
          for (int j = 0; j < Tk; ++j) {
            const int e = ((b * NH + h) * Tq + i) * Tk + j, bucket = ids[(b * Tq + i) * Tk + j];
            ASSERT_EQ(bias_out[1][e], table_v[bucket * NH + h]) << "bias " << e;
            want_dtable[bucket * NH + h] += dbias_v[e];
          }
        }
      }
    }
    expect_close(dtable_out[1], want_dtable, 1e-6, "dtable");
    for (int h = 0; h < NH; ++h) {
      EXPECT_EQ(dtable_out[1][(K - 1) * NH + h], dtable0[(K - 1) * NH + h]) << "unused bucket";
    }
    EXPECT_EQ(bias_out[0], bias_out[1]);
    EXPECT_EQ(std::memcmp(dtable_out[0].data(), dtable_out[1].data(), K * NH * sizeof(float)), 0)
        << "dtable differs between 1 and 3 threads";
  }
}

TEST(CpuOptimizer, AdamWMatchesTorchFormula) {
  std::mt19937 rng(8);
  auto be = make_cpu_backend(2);
  Buffers buf(*be);
  int n = 1000;
  auto p = testing::normal(rng, n);
  std::vector<float> zeros(n, 0);
  Tensor params = buf.f32({n}, p), grads = buf.f32({n}), m = buf.f32({n}, zeros);
  Tensor v = buf.f32({n}, zeros);
  std::vector<double> rp(p.begin(), p.end()), rm(n, 0), rv(n, 0);
  AdamWArgs args;
  args.lr = 1e-2f;
  args.weight_decay = 0.1f;
  args.grad_scale = 0.5f;
  for (int step = 1; step <= 4; ++step) {
    auto g = testing::normal(rng, n);
    buf.set(grads, g);
    args.step = step;
    be->adamw_update(params, grads, m, v, args);
    // torch.optim.AdamW, single-tensor: decoupled decay first, then the bias-corrected step.
    double b1 = args.beta1, b2 = args.beta2, lr = args.lr, wd = args.weight_decay;
    double bc1 = 1 - std::pow(b1, step), bc2 = 1 - std::pow(b2, step);
    for (int i = 0; i < n; ++i) {
      double gi = static_cast<double>(args.grad_scale) * g[i];
      rp[i] *= 1 - lr * wd;
      rm[i] = b1 * rm[i] + (1 - b1) * gi;
      rv[i] = b2 * rv[i] + (1 - b2) * gi * gi;
      rp[i] -= lr / bc1 * rm[i] / (std::sqrt(rv[i]) / std::sqrt(bc2) + args.eps);
    }
  }
  expect_close(buf.read(params), rp, 2e-6, "params");
  expect_close(buf.read(m), rm, 2e-6, "m");
  expect_close(buf.read(v), rv, 2e-6, "v");
}

// ax's reference rounding for AdamW (what the CUDA kernel computes): every float operation
// rounded on its own, no fused multiply-add. `volatile` stores each product, so this test's own
// compiler cannot contract it either. The backend must give exactly these bits on every CPU.
TEST(CpuOptimizer, AdamWRoundsEveryOperationAsTheCudaKernelDoes) {
  std::mt19937 rng(81);
  auto be = make_cpu_backend(2);
  Buffers buf(*be);
  const int n = 4099;  // the vector loops and their scalar tails
  auto p = testing::normal(rng, n);
  auto m0 = testing::normal(rng, n);
  auto v0 = testing::normal(rng, n);
  for (float& x : v0) x = x * x;
  Tensor params = buf.f32({n}, p), grads = buf.f32({n}), m = buf.f32({n}, m0);
  Tensor v = buf.f32({n}, v0);
  std::vector<float> rp = p, rm = m0, rv = v0;
  AdamWArgs args;
  args.lr = 3e-3f;
  args.weight_decay = 0.1f;
  args.grad_scale = 0.7f;
  for (int step = 1; step <= 3; ++step) {
    auto g = testing::normal(rng, n);
    buf.set(grads, g);
    args.step = step;
    be->adamw_update(params, grads, m, v, args);
    const AdamWScalars s = adamw_scalars(args);
    for (int i = 0; i < n; ++i) {
      volatile float grad = s.grad_scale * g[i];
      volatile float param = rp[i] * s.decay;
      volatile float m_b1 = rm[i] * s.beta1, g_b1 = s.one_minus_beta1 * grad;
      volatile float mi = m_b1 + g_b1;
      volatile float g_b2 = s.one_minus_beta2 * grad;
      volatile float g2_b2 = g_b2 * grad, v_b2 = rv[i] * s.beta2;
      volatile float vi = v_b2 + g2_b2;
      volatile float denom = std::sqrt(static_cast<float>(vi)) / s.bias2_sqrt;
      volatile float denom_eps = denom + s.eps;
      volatile float update = s.neg_step_size * mi;
      volatile float quotient = update / denom_eps;
      rp[i] = param + quotient;
      rm[i] = mi;
      rv[i] = vi;
    }
    const std::vector<float> got_p = buf.read(params), got_m = buf.read(m), got_v = buf.read(v);
    int differ = 0;
    for (int i = 0; i < n; ++i) {
      differ += got_p[i] != rp[i] || got_m[i] != rm[i] || got_v[i] != rv[i] ? 1 : 0;
    }
    ASSERT_EQ(differ, 0) << "step " << step << ": " << differ << " of " << n
                         << " elements differ from the per-operation rounding";
  }
}

TEST(CpuBackend, SumSquaresCopyAndZero) {
  std::mt19937 rng(9);
  auto be = make_cpu_backend(2);
  Buffers buf(*be);
  int n = 200003;
  auto x = testing::normal(rng, n);
  Tensor t = buf.f32({n}, x);
  double want = 0;
  for (float v : x) want += static_cast<double>(v) * v;
  double got = be->sum_squares(t);
  EXPECT_NEAR(got, want, 1e-9 * want);
  EXPECT_EQ(make_cpu_backend(1)->sum_squares(t), got);  // same chunks for any thread count

  // f32 -> bf16 rounds to nearest, ties to even; NaN stays NaN; bf16 -> f32 is exact.
  std::vector<float> f = {1.0f,
                          1.0f + 0x1p-8f,
                          1.0f + 3 * 0x1p-8f,
                          1.0f + 0x1p-8f + 0x1p-20f,
                          -2.5f,
                          std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(),
                          3.0e38f};
  std::vector<uint16_t> want_bits = {0x3f80, 0x3f80, 0x3f82, 0x3f81, 0xc020, 0x7f80, 0, 0x7f62};
  int k = static_cast<int>(f.size());
  Tensor src = buf.f32({k}, f), half = buf.make(DType::kBF16, {k}), back = buf.f32({k});
  be->copy(half, src);
  std::vector<uint16_t> bits(k);
  be->copy_to_host(bits.data(), half);
  for (int i = 0; i < k; ++i) {
    if (std::isnan(f[i])) {
      EXPECT_EQ(bits[i] & 0x7f80, 0x7f80);
      EXPECT_NE(bits[i] & 0x007f, 0);
    } else {
      EXPECT_EQ(bits[i], want_bits[i]) << "value " << f[i];
    }
  }
  be->copy(back, half);
  auto r = buf.read(back);
  EXPECT_EQ(r[0], 1.0f);
  EXPECT_EQ(r[2], 1.0f + 0x1p-6f);
  EXPECT_TRUE(std::isnan(r[6]));
  be->zero(t);
  EXPECT_EQ(be->sum_squares(t), 0.0);
}

TEST(CpuBackend, ResultsDoNotDependOnThreadCount) {
  std::mt19937 rng(10);
  int B = 2, T = 80, NH = 4, KVH = 2, HD = 8, R = (NH + 2 * KVH) * HD, C = 48, Vp = 40;
  auto qkv_v = testing::normal(rng, B * T * R), dy = testing::normal(rng, B * T * NH * HD);
  auto x = testing::normal(rng, B * T * C), w = testing::normal(rng, C);
  auto logits_v = testing::normal(rng, B * T * Vp);
  auto targets_v = testing::ints(rng, B * T, -1, Vp);
  std::vector<std::vector<float>> results[2];
  for (int k = 0; k < 2; ++k) {
    auto be = make_cpu_backend(k == 0 ? 1 : 3);
    Buffers buf(*be);
    Tensor qkv = buf.f32({B, T, R}, qkv_v), dqkv = buf.f32({B, T, R});
    Tensor out = buf.f32({B, T, NH * HD}), lse = buf.f32({B, NH, T});
    Tensor dout = buf.f32({B, T, NH * HD}, dy);
    const AttentionSpec spec = testing::packed_attention(NH, KVH, HD, true);
    be->attention_forward(out, lse, qkv, qkv, spec);
    be->attention_backward(dqkv, dqkv, Tensor(), dout, out, lse, qkv, qkv, spec);
    Tensor inp = buf.f32({B * T, C}, x), weight = buf.f32({C}, w), ln = buf.f32({B * T, C});
    Tensor mean = buf.f32({B * T}), rstd = buf.f32({B * T}), dinp = buf.f32({B * T, C});
    Tensor dweight = buf.f32({C}), dbias = buf.f32({C});
    be->layernorm_forward(ln, mean, rstd, inp, weight, weight, 1e-5f);
    be->layernorm_backward(dinp, dweight, dbias, inp, inp, weight, mean, rstd);
    Tensor logits = buf.f32({B * T, Vp}, logits_v), targets = buf.i32({B * T}, targets_v);
    Tensor losses = buf.f32({B * T});
    be->cross_entropy_forward(losses, logits, targets, Vp, 0.1f);
    be->cross_entropy_backward(logits, logits, targets, Vp, 0.5f, 0.1f);
    for (Tensor t : {out, lse, dqkv, ln, dinp, dweight, dbias, losses, logits}) {
      results[k].push_back(buf.read(t));
    }
  }
  for (size_t i = 0; i < results[0].size(); ++i) {
    EXPECT_EQ(std::memcmp(results[0][i].data(), results[1][i].data(),
                          results[0][i].size() * sizeof(float)),
              0)
        << "result " << i;
  }
}

TEST(CpuBackendDeathTest, ShapeOrDtypeMismatchAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto be = make_cpu_backend(1);
  Buffers buf(*be);
  Tensor inp = buf.f32({4, 6}), weight = buf.f32({3, 5}), out = buf.f32({4, 3});
  EXPECT_DEATH(be->matmul_forward(out, inp, weight, Tensor()),
               "matmul_forward: inp is \\(4, 6\\) f32, expected 4 rows of 5");
  Tensor ids = buf.i32({5}, {0, 1, 2, 3, 4});
  Tensor x = buf.f32({2, 5}), mean = buf.f32({2}), rstd = buf.f32({2});
  EXPECT_DEATH(be->layernorm_forward(x, mean, rstd, x, ids, Tensor(), 1e-5f),
               "layernorm_forward: weight is \\(5\\) i32, expected f32");
  Tensor buckets = buf.i32({1, 2, 3}, {0, 1, 2, 3, 0, 1}), table = buf.f32({3, 2});
  Tensor bias = buf.f32({1, 2, 2, 3});
  EXPECT_DEATH(be->position_bias_forward(bias, table, buckets),
               "position_bias_forward: bucket 3 at element 3 of buckets \\(1, 2, 3\\) i32 is "
               "outside the table's 3");
  Tensor negative = buf.i32({1, 2, 3}, {0, 1, -1, 2, 0, 1});
  EXPECT_DEATH(be->position_bias_backward(table, bias, negative),
               "position_bias_backward: bucket -1 at element 2");
  EXPECT_DEATH(be->position_bias_forward(bias, buf.f32({3, 4}), buckets),
               "position_bias_forward: bias is \\(1, 2, 2, 3\\) f32, expected \\(1, 4, 2, 3\\)");
  Tensor logits = buf.f32({2, 4}), losses = buf.f32({2}), targets = buf.i32({2}, {0, 1});
  EXPECT_DEATH(be->cross_entropy_forward(losses, logits, targets, 4, -0.5f),
               "cross_entropy_forward: z_loss -0.5");
  EXPECT_DEATH(be->glu_forward(buf.f32({2, 3}), buf.f32({2, 6}), static_cast<Glu>(7)),
               "glu_forward: no gated linear unit 7");
  Tensor qkv = buf.f32({1, 2, 40});
  EXPECT_DEATH(be->attention_forward(buf.f32({1, 2, 24}), buf.f32({1, 3, 2}), qkv, qkv,
                                     testing::packed_attention(3, 2, 8, true)),
               "attention_forward: q \\(1, 2, 40\\) f32, kv \\(1, 2, 40\\) f32, out "
               "\\(1, 2, 24\\) f32 with 3 heads and 2 kv heads");
}

}  // namespace
}  // namespace ax::train
