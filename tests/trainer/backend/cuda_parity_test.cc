// Every op of the CUDA backend against the CPU reference, forward and backward, on fresh random
// inputs and several shapes (odd sizes, sequences that are not a multiple of the attention
// tile). Inputs are rounded to bf16 first so that both backends see the same numbers; the CPU
// computes in f32, the GPU in bf16 with f32 statistics and accumulation. Backward outputs start
// from random values, which checks that they accumulate. Without a GPU every test is skipped.
//
// Tolerances (docs/cuda-backend.md): an element passes when |gpu - cpu| <= tol · (|cpu| + rms),
// rms being the root mean square of the CPU tensor:
//   kTolBf16 = 1e-2  a bf16 output (rounding alone is up to 2^-9 relative);
//   kTolF32  = 1e-4  an f32 output (statistics, lse, losses, parameter gradients): only the
//                    summation order and exp/tanh implementations differ;
//   kTolExact = 0    casts and AdamW, which use the same float operations on both.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ax/trainer/backend.h"

namespace ax::train {
namespace {

constexpr double kTolBf16 = 1e-2;
constexpr double kTolF32 = 1e-4;
constexpr double kTolExact = 0;

float round_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  bits &= 0xffff0000u;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t to_bf16_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return static_cast<uint16_t>(bits >> 16);  // f is already a bf16 value
}

float from_bf16_bits(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// One tensor on both backends: f32 (or i32) on the CPU, `gpu_dtype` on the GPU, same values.
struct Pair {
  std::vector<int64_t> shape;
  DType gpu_dtype = DType::kF32;
  Tensor cpu, gpu;
};

class CudaParityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) {
      GTEST_SKIP() << "no GPU answered: " << make_cuda_backend(0).status().message();
    }
    auto gpu = make_cuda_backend(0);
    ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
    gpu_ = std::move(*gpu);
    cpu_ = make_cpu_backend(2);
    rng_.seed(std::random_device{}());
  }

  void TearDown() override {
    for (auto& [be, p] : allocations_) be->free(p);
  }

  Tensor make_tensor(Backend& be, DType dtype, const std::vector<int64_t>& shape) {
    Tensor t;
    t.dtype = dtype;
    for (int64_t d : shape) t.shape[t.ndim++] = d;
    auto p = be.alloc(std::max<size_t>(t.bytes(), 1));
    EXPECT_TRUE(p.ok());
    t.data = *p;
    allocations_.push_back({&be, t.data});
    return t;
  }

  // Values uniform in [-scale, scale], rounded to bf16 when the GPU holds bf16.
  Pair random(std::vector<int64_t> shape, DType gpu_dtype, float scale = 1.0f) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::uniform_real_distribution<float> dist(-scale, scale);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = gpu_dtype == DType::kBF16 ? round_bf16(dist(rng_)) : dist(rng_);
    return upload(std::move(shape), gpu_dtype, v);
  }

  Pair zeros(std::vector<int64_t> shape, DType gpu_dtype) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return upload(std::move(shape), gpu_dtype, std::vector<float>(static_cast<size_t>(n)));
  }

  Pair upload(std::vector<int64_t> shape, DType gpu_dtype, const std::vector<float>& v) {
    Pair p{shape, gpu_dtype, make_tensor(*cpu_, DType::kF32, shape),
           make_tensor(*gpu_, gpu_dtype, shape)};
    cpu_->copy_from_host(p.cpu, v.data());
    if (gpu_dtype == DType::kBF16) {
      std::vector<uint16_t> h(v.size());
      for (size_t i = 0; i < v.size(); ++i) h[i] = to_bf16_bits(round_bf16(v[i]));
      gpu_->copy_from_host(p.gpu, h.data());
    } else {
      gpu_->copy_from_host(p.gpu, v.data());
    }
    return p;
  }

  Pair ints(std::vector<int64_t> shape, const std::vector<int32_t>& v) {
    Pair p{shape, DType::kI32, make_tensor(*cpu_, DType::kI32, shape),
           make_tensor(*gpu_, DType::kI32, shape)};
    cpu_->copy_from_host(p.cpu, v.data());
    gpu_->copy_from_host(p.gpu, v.data());
    return p;
  }

  // n ids in [0, vocab), about one in `ignore_every` replaced by -1 (0: none).
  std::vector<int32_t> ids(int64_t n, int64_t vocab, int ignore_every = 0) {
    std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(vocab - 1));
    std::vector<int32_t> v(static_cast<size_t>(n));
    for (size_t i = 0; i < v.size(); ++i) {
      v[i] = ignore_every > 0 && i % ignore_every == 1 ? -1 : dist(rng_);
    }
    return v;
  }

  std::vector<float> cpu_values(const Pair& p) {
    std::vector<float> v(static_cast<size_t>(p.cpu.numel()));
    cpu_->copy_to_host(v.data(), p.cpu);
    return v;
  }

  std::vector<float> gpu_values(const Pair& p) {
    std::vector<float> v(static_cast<size_t>(p.gpu.numel()));
    if (p.gpu_dtype == DType::kBF16) {
      std::vector<uint16_t> h(v.size());
      gpu_->copy_to_host(h.data(), p.gpu);
      for (size_t i = 0; i < v.size(); ++i) v[i] = from_bf16_bits(h[i]);
    } else {
      gpu_->copy_to_host(v.data(), p.gpu);
    }
    return v;
  }

  void expect_close(const Pair& p, double tol, const std::string& what) {
    std::vector<float> want = cpu_values(p), got = gpu_values(p);
    double sq = 0;
    for (float w : want) sq += std::isfinite(w) ? static_cast<double>(w) * w : 0.0;
    double rms = want.empty() ? 0 : std::sqrt(sq / static_cast<double>(want.size()));
    int64_t bad = 0, first = -1;
    for (size_t i = 0; i < want.size(); ++i) {
      if (got[i] == want[i]) continue;  // also equal infinities (an empty shard's max)
      double err = std::fabs(static_cast<double>(got[i]) - want[i]);
      if (!(err <= tol * (std::fabs(want[i]) + rms))) {
        if (bad++ == 0) first = static_cast<int64_t>(i);
      }
    }
    EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << want.size() << " elements differ; first ["
                      << first << "] gpu " << (first >= 0 ? got[first] : 0) << " cpu "
                      << (first >= 0 ? want[first] : 0) << " (rms " << rms << ", tol " << tol
                      << ")";
  }

  std::unique_ptr<Backend> cpu_, gpu_;
  std::mt19937 rng_;
  std::vector<std::pair<Backend*, void*>> allocations_;
};

constexpr DType kBF = DType::kBF16;
constexpr DType kF = DType::kF32;

TEST_F(CudaParityTest, NameAndPeak) {
  EXPECT_EQ(gpu_->name().rfind("cuda:0 ", 0), 0u) << gpu_->name();
  EXPECT_EQ(gpu_->compute_dtype(), kBF);
  EXPECT_GE(gpu_->peak_flops(), 0.0);
}

TEST_F(CudaParityTest, CopyCastsAndZero) {
  for (int64_t n : {1, 37, 4099}) {
    Pair src = random({n}, kF, 3.0f);
    Pair dst = zeros({n}, kBF);
    // The CPU side holds f32: give it the rounded values the cast must produce.
    std::vector<float> want = cpu_values(src);
    for (float& x : want) x = round_bf16(x);
    Pair rounded = upload({n}, kF, want);
    cpu_->copy(dst.cpu, rounded.cpu);
    gpu_->copy(dst.gpu, src.gpu);
    expect_close(dst, kTolExact, "copy f32 -> bf16");
    Pair back = zeros({n}, kF);
    cpu_->copy(back.cpu, dst.cpu);
    gpu_->copy(back.gpu, dst.gpu);
    expect_close(back, kTolExact, "copy bf16 -> f32");
    gpu_->zero(back.gpu);
    cpu_->zero(back.cpu);
    expect_close(back, kTolExact, "zero");
  }
}

TEST_F(CudaParityTest, Embedding) {
  struct Case {
    int64_t B, T, Vp, C;
    bool wpe;
  };
  for (Case c : {Case{1, 1, 3, 8, true}, Case{2, 5, 11, 8, true}, Case{3, 7, 13, 37, false},
                 Case{2, 70, 50, 96, true}}) {
    SCOPED_TRACE(testing::Message() << "B=" << c.B << " T=" << c.T << " C=" << c.C);
    Pair tokens = ints({c.B, c.T}, ids(c.B * c.T, c.Vp, 5));
    Pair wte = random({c.Vp, c.C}, kBF);
    Pair wpe = c.wpe ? random({c.T + 3, c.C}, kBF) : Pair{};
    Pair out = zeros({c.B, c.T, c.C}, kBF);
    cpu_->embedding_forward(out.cpu, tokens.cpu, wte.cpu, wpe.cpu);
    gpu_->embedding_forward(out.gpu, tokens.gpu, wte.gpu, wpe.gpu);
    expect_close(out, kTolBf16, "embedding_forward");
    Pair dout = random({c.B, c.T, c.C}, kBF);
    Pair dwte = random({c.Vp, c.C}, kF);
    Pair dwpe = c.wpe ? random({c.T + 3, c.C}, kF) : Pair{};
    cpu_->embedding_backward(dwte.cpu, dwpe.cpu, dout.cpu, tokens.cpu);
    gpu_->embedding_backward(dwte.gpu, dwpe.gpu, dout.gpu, tokens.gpu);
    expect_close(dwte, kTolF32, "embedding_backward dwte");
    if (c.wpe) expect_close(dwpe, kTolF32, "embedding_backward dwpe");
  }
}

TEST_F(CudaParityTest, LayerNormAndRmsNorm) {
  struct Case {
    int64_t N, C;
    bool bias;
  };
  for (Case c : {Case{1, 8, true}, Case{7, 37, false}, Case{300, 768, true}, Case{5, 1, true}}) {
    SCOPED_TRACE(testing::Message() << "N=" << c.N << " C=" << c.C);
    Pair inp = random({c.N, c.C}, kBF, 2.0f);
    Pair weight = random({c.C}, kBF), bias = c.bias ? random({c.C}, kBF) : Pair{};
    Pair out = zeros({c.N, c.C}, kBF), mean = zeros({c.N}, kF), rstd = zeros({c.N}, kF);
    cpu_->layernorm_forward(out.cpu, mean.cpu, rstd.cpu, inp.cpu, weight.cpu, bias.cpu, 1e-5f);
    gpu_->layernorm_forward(out.gpu, mean.gpu, rstd.gpu, inp.gpu, weight.gpu, bias.gpu, 1e-5f);
    expect_close(out, kTolBf16, "layernorm_forward out");
    expect_close(mean, kTolF32, "layernorm_forward mean");
    expect_close(rstd, kTolF32, "layernorm_forward rstd");
    // The backward pass from the same saved statistics on both.
    Pair dout = random({c.N, c.C}, kBF), dinp = random({c.N, c.C}, kBF);
    Pair dweight = random({c.C}, kF), dbias = c.bias ? random({c.C}, kF) : Pair{};
    gpu_->copy_from_host(mean.gpu, cpu_values(mean).data());
    gpu_->copy_from_host(rstd.gpu, cpu_values(rstd).data());
    cpu_->layernorm_backward(dinp.cpu, dweight.cpu, dbias.cpu, dout.cpu, inp.cpu, weight.cpu,
                             mean.cpu, rstd.cpu);
    gpu_->layernorm_backward(dinp.gpu, dweight.gpu, dbias.gpu, dout.gpu, inp.gpu, weight.gpu,
                             mean.gpu, rstd.gpu);
    expect_close(dinp, kTolBf16, "layernorm_backward dinp");
    expect_close(dweight, kTolF32, "layernorm_backward dweight");
    if (c.bias) expect_close(dbias, kTolF32, "layernorm_backward dbias");

    cpu_->rmsnorm_forward(out.cpu, rstd.cpu, inp.cpu, weight.cpu, 1e-6f);
    gpu_->rmsnorm_forward(out.gpu, rstd.gpu, inp.gpu, weight.gpu, 1e-6f);
    expect_close(out, kTolBf16, "rmsnorm_forward out");
    expect_close(rstd, kTolF32, "rmsnorm_forward rstd");
    gpu_->copy_from_host(rstd.gpu, cpu_values(rstd).data());
    cpu_->rmsnorm_backward(dinp.cpu, dweight.cpu, dout.cpu, inp.cpu, weight.cpu, rstd.cpu);
    gpu_->rmsnorm_backward(dinp.gpu, dweight.gpu, dout.gpu, inp.gpu, weight.gpu, rstd.gpu);
    expect_close(dinp, kTolBf16, "rmsnorm_backward dinp");
    expect_close(dweight, kTolF32, "rmsnorm_backward dweight");
  }
}

TEST_F(CudaParityTest, Matmul) {
  struct Case {
    int64_t N, C, OC;
    bool bias, dinp;
  };
  for (Case c : {Case{1, 8, 8, true, true}, Case{7, 37, 13, false, true},
                 Case{130, 64, 96, true, false}, Case{257, 384, 1152, true, true}}) {
    SCOPED_TRACE(testing::Message() << "N=" << c.N << " C=" << c.C << " OC=" << c.OC);
    Pair inp = random({c.N, c.C}, kBF), weight = random({c.OC, c.C}, kBF, 0.2f);
    Pair bias = c.bias ? random({c.OC}, kBF) : Pair{};
    Pair out = zeros({c.N, c.OC}, kBF);
    cpu_->matmul_forward(out.cpu, inp.cpu, weight.cpu, bias.cpu);
    gpu_->matmul_forward(out.gpu, inp.gpu, weight.gpu, bias.gpu);
    expect_close(out, kTolBf16, "matmul_forward");
    Pair dout = random({c.N, c.OC}, kBF);
    Pair dinp = c.dinp ? random({c.N, c.C}, kBF) : Pair{};
    Pair dweight = random({c.OC, c.C}, kF), dbias = c.bias ? random({c.OC}, kF) : Pair{};
    cpu_->matmul_backward(dinp.cpu, dweight.cpu, dbias.cpu, dout.cpu, inp.cpu, weight.cpu);
    gpu_->matmul_backward(dinp.gpu, dweight.gpu, dbias.gpu, dout.gpu, inp.gpu, weight.gpu);
    if (c.dinp) expect_close(dinp, kTolBf16, "matmul_backward dinp");
    expect_close(dweight, kTolF32, "matmul_backward dweight");
    if (c.bias) expect_close(dbias, kTolF32, "matmul_backward dbias");
  }
}

struct HeadCase {
  int64_t B, T;
  int NH, KVH;
  int64_t HD;
  bool causal;
};

TEST_F(CudaParityTest, Rope) {
  for (HeadCase c : {HeadCase{1, 3, 2, 1, 8, true}, HeadCase{2, 37, 4, 2, 16, true},
                     HeadCase{1, 130, 3, 3, 64, true}}) {
    SCOPED_TRACE(testing::Message() << "T=" << c.T << " HD=" << c.HD);
    const int64_t R = (c.NH + 2 * c.KVH) * c.HD;
    for (float theta : {10000.0f, 500000.0f}) {
      Pair inp = random({c.B, c.T, R}, kBF), out = zeros({c.B, c.T, R}, kBF);
      cpu_->rope_forward(out.cpu, inp.cpu, c.NH, c.KVH, theta);
      gpu_->rope_forward(out.gpu, inp.gpu, c.NH, c.KVH, theta);
      expect_close(out, kTolBf16, "rope_forward");
      Pair dinp = random({c.B, c.T, R}, kBF);
      cpu_->rope_backward(dinp.cpu, inp.cpu, c.NH, c.KVH, theta);
      gpu_->rope_backward(dinp.gpu, inp.gpu, c.NH, c.KVH, theta);
      expect_close(dinp, kTolBf16, "rope_backward");
    }
  }
}

TEST_F(CudaParityTest, Attention) {
  for (HeadCase c : {HeadCase{1, 1, 1, 1, 8, true}, HeadCase{2, 37, 4, 2, 16, true},
                     HeadCase{2, 37, 4, 4, 16, false}, HeadCase{1, 70, 6, 2, 64, true},
                     HeadCase{1, 33, 2, 1, 128, false}, HeadCase{1, 65, 2, 2, 80, true},
                     HeadCase{2, 129, 4, 1, 64, true}}) {
    SCOPED_TRACE(testing::Message() << "B=" << c.B << " T=" << c.T << " NH=" << c.NH << " KVH="
                                    << c.KVH << " HD=" << c.HD << " causal=" << c.causal);
    const int64_t R = (c.NH + 2 * c.KVH) * c.HD, OC = c.NH * c.HD;
    Pair qkv = random({c.B, c.T, R}, kBF, 2.0f);
    Pair out = zeros({c.B, c.T, OC}, kBF), lse = zeros({c.B, c.NH, c.T}, kF);
    AttentionSpec spec;
    spec.num_heads = c.NH;
    spec.num_kv_heads = c.KVH;
    spec.causal = c.causal;
    spec.scale = 1.0f / std::sqrt(static_cast<float>(c.HD));
    spec.k_offset = OC;
    cpu_->attention_forward(out.cpu, lse.cpu, qkv.cpu, qkv.cpu, spec);
    gpu_->attention_forward(out.gpu, lse.gpu, qkv.gpu, qkv.gpu, spec);
    expect_close(out, kTolBf16, "attention_forward out");
    expect_close(lse, kTolF32, "attention_forward lse");
    // The backward pass from the same out (rounded to bf16) and lse on both.
    std::vector<float> o = cpu_values(out);
    for (float& x : o) x = round_bf16(x);
    Pair same_out = upload({c.B, c.T, OC}, kBF, o);
    gpu_->copy_from_host(lse.gpu, cpu_values(lse).data());
    Pair dout = random({c.B, c.T, OC}, kBF), dqkv = random({c.B, c.T, R}, kBF);
    cpu_->attention_backward(dqkv.cpu, dqkv.cpu, Tensor(), dout.cpu, same_out.cpu, lse.cpu,
                             qkv.cpu, qkv.cpu, spec);
    gpu_->attention_backward(dqkv.gpu, dqkv.gpu, Tensor(), dout.gpu, same_out.gpu, lse.gpu,
                             qkv.gpu, qkv.gpu, spec);
    expect_close(dqkv, kTolBf16, "attention_backward dqkv");
  }
}

TEST_F(CudaParityTest, GeluSwigluAdd) {
  for (auto [N, F] : {std::pair<int64_t, int64_t>{1, 1}, {7, 37}, {64, 3072}}) {
    SCOPED_TRACE(testing::Message() << "N=" << N << " F=" << F);
    Pair inp = random({N, F}, kBF, 4.0f), out = zeros({N, F}, kBF);
    cpu_->gelu_forward(out.cpu, inp.cpu);
    gpu_->gelu_forward(out.gpu, inp.gpu);
    expect_close(out, kTolBf16, "gelu_forward");
    Pair dout = random({N, F}, kBF), dinp = random({N, F}, kBF);
    cpu_->gelu_backward(dinp.cpu, dout.cpu, inp.cpu);
    gpu_->gelu_backward(dinp.gpu, dout.gpu, inp.gpu);
    expect_close(dinp, kTolBf16, "gelu_backward");

    Pair gate_up = random({N, 2 * F}, kBF, 4.0f);
    cpu_->swiglu_forward(out.cpu, gate_up.cpu);
    gpu_->swiglu_forward(out.gpu, gate_up.gpu);
    expect_close(out, kTolBf16, "swiglu_forward");
    Pair dgate_up = random({N, 2 * F}, kBF);
    cpu_->swiglu_backward(dgate_up.cpu, dout.cpu, gate_up.cpu);
    gpu_->swiglu_backward(dgate_up.gpu, dout.gpu, gate_up.gpu);
    expect_close(dgate_up, kTolBf16, "swiglu_backward");

    Pair a = random({N, F}, kBF), b = random({N, F}, kBF);
    cpu_->add_forward(out.cpu, a.cpu, b.cpu);
    gpu_->add_forward(out.gpu, a.gpu, b.gpu);
    expect_close(out, kTolBf16, "add_forward");
  }
}

TEST_F(CudaParityTest, CrossEntropy) {
  struct Case {
    int64_t N, V, Vp;
  };
  for (Case c : {Case{1, 2, 2}, Case{5, 11, 16}, Case{9, 1000, 1024}, Case{33, 50257, 50304}}) {
    SCOPED_TRACE(testing::Message() << "N=" << c.N << " V=" << c.V << " Vp=" << c.Vp);
    Pair logits = random({c.N, c.Vp}, kBF, 8.0f);
    Pair targets = ints({c.N}, ids(c.N, c.V, 4));
    Pair losses = zeros({c.N}, kF);
    cpu_->cross_entropy_forward(losses.cpu, logits.cpu, targets.cpu, c.V);
    gpu_->cross_entropy_forward(losses.gpu, logits.gpu, targets.gpu, c.V);
    expect_close(losses, kTolF32, "cross_entropy_forward");
    // In place, as the model calls it.
    cpu_->cross_entropy_backward(logits.cpu, logits.cpu, targets.cpu, c.V, 0.25f);
    gpu_->cross_entropy_backward(logits.gpu, logits.gpu, targets.gpu, c.V, 0.25f);
    expect_close(logits, kTolBf16, "cross_entropy_backward (in place)");
  }
}

TEST_F(CudaParityTest, CrossEntropyShards) {
  struct Case {
    int64_t N, Vl, v_begin, v_count;
  };
  for (Case c :
       {Case{4, 16, 0, 16}, Case{6, 16, 32, 10}, Case{5, 8, 64, 0}, Case{7, 1024, 1024, 1000}}) {
    SCOPED_TRACE(testing::Message() << "N=" << c.N << " Vl=" << c.Vl << " v_begin=" << c.v_begin
                                    << " v_count=" << c.v_count);
    Pair logits = random({c.N, c.Vl}, kBF, 8.0f);
    // Targets inside and outside this shard, and ignored ones.
    Pair targets = ints({c.N}, ids(c.N, c.v_begin + c.Vl + 16, 3));
    Pair rowmax = zeros({c.N}, kF);
    cpu_->ce_shard_max(rowmax.cpu, logits.cpu, c.v_count);
    gpu_->ce_shard_max(rowmax.gpu, logits.gpu, c.v_count);
    expect_close(rowmax, kTolExact, "ce_shard_max");
    if (c.v_count == 0) continue;
    Pair sums = zeros({c.N, 2}, kF);
    cpu_->ce_shard_sums(sums.cpu, logits.cpu, rowmax.cpu, targets.cpu, c.v_begin, c.v_count);
    gpu_->ce_shard_sums(sums.gpu, logits.gpu, rowmax.gpu, targets.gpu, c.v_begin, c.v_count);
    expect_close(sums, kTolF32, "ce_shard_sums");
    std::vector<float> m = cpu_values(rowmax), s = cpu_values(sums), l(m.size());
    for (size_t i = 0; i < l.size(); ++i) l[i] = m[i] + std::log(s[2 * i]);
    Pair lse = upload({c.N}, kF, l);
    cpu_->ce_shard_backward(logits.cpu, logits.cpu, lse.cpu, targets.cpu, c.v_begin, c.v_count,
                            0.5f);
    gpu_->ce_shard_backward(logits.gpu, logits.gpu, lse.gpu, targets.gpu, c.v_begin, c.v_count,
                            0.5f);
    expect_close(logits, kTolBf16, "ce_shard_backward (in place)");
  }
}

TEST_F(CudaParityTest, SumSquares) {
  for (int64_t n : {1, 1000, (1 << 20) + 3}) {
    Pair x = random({n}, kF, 3.0f);
    double want = cpu_->sum_squares(x.cpu), got = gpu_->sum_squares(x.gpu);
    EXPECT_NEAR(got, want, 1e-10 * want) << "n=" << n;
    EXPECT_EQ(gpu_->sum_squares(x.gpu), got) << "the same sum on every run";
  }
}

TEST_F(CudaParityTest, AdamW) {
  for (int64_t n : {1, 1000, 65537}) {
    Pair p = random({n}, kF), g = random({n}, kF), m = random({n}, kF, 0.1f);
    Pair v = random({n}, kF, 0.01f);
    std::vector<float> vv = cpu_values(v);
    for (float& x : vv) x = std::fabs(x);
    v = upload({n}, kF, vv);
    AdamWArgs args;
    args.lr = 3e-4f;
    args.weight_decay = 0.1f;
    args.step = 7;
    args.grad_scale = 0.5f;
    for (int step = 0; step < 3; ++step, ++args.step) {
      cpu_->adamw_update(p.cpu, g.cpu, m.cpu, v.cpu, args);
      gpu_->adamw_update(p.gpu, g.gpu, m.gpu, v.gpu, args);
    }
    expect_close(p, kTolExact, "adamw params");
    expect_close(m, kTolExact, "adamw m");
    expect_close(v, kTolExact, "adamw v");
  }
}

}  // namespace
}  // namespace ax::train
