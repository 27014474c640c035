// The properties of the CPU backend the rest of ax relies on that are not one op case against a
// reference (those are the op table's: op_table.h, op_reference_test.cc): the builtin GEMM
// kernel's attention backward against OpenBLAS's, vocabulary shards that combine to the whole
// row, in-place use where the contract allows it, bf16 casts, AdamW's per-operation rounding,
// results that do not depend on the thread count, and aborts on shape or dtype mismatches.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "ax/trainer/backend/dropout_mask.h"
#include "ax/trainer/backend/op_checks.h"
#include "backend_test_util.h"

namespace ax::train {
namespace {

using testing::Buffers;

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
  EXPECT_NE(testing::make_builtin_gemm_backend(1)->name().find("builtin GEMM"), std::string::npos);
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
    return GetParam() ? testing::make_builtin_gemm_backend(threads) : make_cpu_backend(threads);
  }
};

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

// T5's relative position bias (its values against double: the op table, op_table.cc): the
// same bits on 1 and 3 threads, and a bucket no position uses keeps its gradient's bits.
TEST(CpuPositionBias, SameBitsOnAnyThreadCountAndUnusedBucketsUntouched) {
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
    for (int h = 0; h < NH; ++h) {
      EXPECT_EQ(dtable_out[1][(K - 1) * NH + h], dtable0[(K - 1) * NH + h]) << "unused bucket";
    }
    EXPECT_EQ(bias_out[0], bias_out[1]);
    EXPECT_EQ(std::memcmp(dtable_out[0].data(), dtable_out[1].data(), K * NH * sizeof(float)), 0)
        << "dtable differs between 1 and 3 threads";
  }
}

// RoPE in place (out = inp) gives the bits of the out-of-place call (its values: the op table).
TEST(CpuRope, InPlaceGivesTheSameBits) {
  std::mt19937 rng(6);
  auto be = make_cpu_backend(2);
  Buffers buf(*be);
  const int B = 2, T = 9, NH = 4, KVH = 2, HD = 8, R = (NH + 2 * KVH) * HD;
  Tensor inp = buf.f32({B, T, R}, testing::normal(rng, B * T * R)), out = buf.f32({B, T, R});
  be->rope_forward(out, inp, NH, KVH, {.theta = 10000}, 0);
  be->rope_forward(inp, inp, NH, KVH, {.theta = 10000}, 0);
  EXPECT_EQ(buf.read(inp), buf.read(out));
}

// The cos/sin table is rebuilt when only the scaling changes (same HD, theta and length): a
// backend that rotated without scaling, then with llama3 scaling, then with another factor gives
// each call the bits of a fresh backend, and the scaling changes the rotation.
TEST(CpuRope, TableFollowsTheScaling) {
  std::mt19937 rng(8);
  const int B = 1, T = 12, NH = 2, KVH = 1, HD = 16, R = (NH + 2 * KVH) * HD;
  const std::vector<float> x = testing::normal(rng, B * T * R);
  const RopeSpec plain{.theta = 10000};
  RopeSpec llama3 = plain;
  llama3.scaling = RopeSpec::Scaling::kLlama3;
  llama3.factor = 8;
  llama3.low_freq_factor = 1;
  llama3.high_freq_factor = 4;
  llama3.original_max_positions = 64;
  RopeSpec llama3_x2 = llama3;
  llama3_x2.factor = 16;
  auto rotate = [&](Backend& be, const RopeSpec& rope) {
    Buffers buf(be);
    Tensor inp = buf.f32({B, T, R}, x), out = buf.f32({B, T, R});
    be.rope_forward(out, inp, NH, KVH, rope, 0);
    return buf.read(out);
  };
  auto shared = make_cpu_backend(1);
  std::vector<std::vector<float>> outs;
  for (const RopeSpec& rope : {plain, llama3, llama3_x2}) {
    outs.push_back(rotate(*shared, rope));
    auto fresh = make_cpu_backend(1);
    EXPECT_EQ(outs.back(), rotate(*fresh, rope)) << "factor " << rope.factor;
  }
  EXPECT_NE(outs[0], outs[1]);
  EXPECT_NE(outs[1], outs[2]);
}

// Dropout's masks: the dropped fraction is the rate (within 6 binomial standard deviations),
// kept elements are scaled by 1 / (1 - rate), a tensor-parallel rank's columns (its feature
// offset) get the whole axis's mask there, in place equals out of place, and another seed, row
// key or site gives another mask.
TEST(CpuDropout, RateScaleFeatureOffsetAndInPlace) {
  std::mt19937 rng(17);
  auto be = make_cpu_backend(2);
  Buffers buf(*be);
  const int64_t N = 512, F = 384;
  const std::vector<float> x = testing::normal(rng, N * F);
  std::vector<int32_t> keys(N);
  for (int32_t& k : keys) k = static_cast<int32_t>(rng());
  Tensor inp = buf.f32({N, F}, x), out = buf.f32({N, F}), row_keys = buf.i32({N}, keys);
  for (double rate : {0.0, 0.1, 0.5, 0.9}) {
    const DropoutSpec spec{.seed = 0x1234abcd5678ULL,
                           .threshold = dropout_threshold(rate),
                           .scale = static_cast<float>(1 / (1 - rate)),
                           .feature_offset = 0};
    be->dropout_forward(out, inp, row_keys, spec);
    const std::vector<float> y = buf.read(out);
    int64_t dropped = 0;
    for (int64_t i = 0; i < N * F; ++i) {
      if (y[i] == 0.0f) {
        ++dropped;
      } else {
        ASSERT_EQ(y[i], x[i] * spec.scale) << "rate " << rate << " element " << i;
      }
    }
    const double n = static_cast<double>(N * F);
    EXPECT_NEAR(static_cast<double>(dropped) / n, rate, 6 * std::sqrt(rate * (1 - rate) / n))
        << "rate " << rate;

    // Columns [64, 64 + 128) as a rank holding them: the same elements of the whole axis.
    const int64_t lo = 64, cols = 128;
    std::vector<float> part_x(static_cast<size_t>(N * cols));
    for (int64_t r = 0; r < N; ++r) {
      for (int64_t c = 0; c < cols; ++c) part_x[r * cols + c] = x[r * F + lo + c];
    }
    Tensor part = buf.f32({N, cols}, part_x);
    DropoutSpec rank_spec = spec;
    rank_spec.feature_offset = lo;
    be->dropout_forward(part, part, row_keys, rank_spec);  // in place
    const std::vector<float> part_y = buf.read(part);
    for (int64_t r = 0; r < N; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        ASSERT_EQ(part_y[r * cols + c], y[r * F + lo + c]) << "row " << r << " column " << c;
      }
    }
  }
  // Another seed, or other row keys, drop other elements (a tenth of them, independently).
  const DropoutSpec a{.seed = 1, .threshold = dropout_threshold(0.5), .scale = 2};
  DropoutSpec b = a;
  b.seed = 2;
  int64_t same = 0;
  for (int64_t i = 0; i < N; ++i) {
    for (uint32_t f = 0; f < F; ++f) {
      const auto key = static_cast<uint32_t>(keys[i]);
      same +=
          dropout_keep(a.seed, key, f, a.threshold) == dropout_keep(b.seed, key, f, b.threshold);
      same += dropout_keep(a.seed, key, f, a.threshold) ==
              dropout_keep(a.seed, key + 1, f, a.threshold);
    }
  }
  const double pairs = 2.0 * N * F;
  EXPECT_NEAR(static_cast<double>(same) / pairs, 0.5, 6 * std::sqrt(0.25 / pairs));
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
