// Every op of the CUDA backend against the CPU backend, forward and backward, in each dtype plan
// (cuda_parity.h: the modes, and kOutputs, how each output is compared and why), on fresh random
// inputs and several shapes: odd sizes, sequences that are not a multiple of the attention tile,
// GQA and MHA, vocabularies of 2 to 50304 with ignored targets (the general attention op's
// cases: cuda_attention_parity_test.cc). Backward outputs start from random values, which checks
// that they accumulate; backward passes get the reference's saved statistics, so each op is
// checked alone. Without a GPU every test is skipped.
#include "cuda_parity.h"

#include <limits>

namespace ax::train::parity {
namespace {

using CudaParityTest = ParityTest;

TEST_P(CudaParityTest, CopyCastsAndZero) {
  // Ties (1 + 2^-8 rounds down to even, 1 + 3·2^-8 up), the largest finite bf16 neighbourhood,
  // infinities, NaN, a subnormal and a negative zero, then random values.
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> special = {1.00390625f, 1.01171875f, -1.00390625f,  3.3895e38f, 3.4e38f,
                                inf,         -inf,        std::nanf(""), 1e-40f,     -0.0f};
  for (int64_t n : {int64_t{0}, int64_t{37}, int64_t{4099}}) {
    std::vector<float> v = special;
    std::vector<float> more = uniform(n, kF32, 3.0f);
    v.insert(v.end(), more.begin(), more.end());
    const int64_t count = static_cast<int64_t>(v.size());
    Pair src = upload({count}, kF32, v), half = zeros({count}, kBF16);
    ref_->copy(half.ref, src.ref);
    gpu_->copy(half.gpu, src.gpu);
    expect(half, "copy");
    Pair back = zeros({count}, kF32);
    ref_->copy(back.ref, half.ref);
    gpu_->copy(back.gpu, half.gpu);
    expect(back, "copy");
    Pair same = zeros({count}, act());
    ref_->copy(same.ref, act() == kF32 ? src.ref : half.ref);
    gpu_->copy(same.gpu, act() == kF32 ? src.gpu : half.gpu);
    expect(same, "copy");
    ref_->zero(back.ref);
    gpu_->zero(back.gpu);
    expect(back, "zero");
  }
}

TEST_P(CudaParityTest, Embedding) {
  struct Case {
    int64_t B, T, Vp, C;
    bool wpe;
  };
  for (Case c : {Case{1, 1, 3, 8, true}, Case{2, 5, 11, 8, true}, Case{3, 7, 13, 37, false},
                 Case{2, 70, 50, 96, true}}) {
    SCOPED_TRACE(testing::Message() << "B=" << c.B << " T=" << c.T << " C=" << c.C);
    Pair tokens = ints({c.B, c.T}, ids(c.B * c.T, c.Vp, 5));
    Pair wte = random({c.Vp, c.C}, act());
    Pair wpe = c.wpe ? random({c.T + 3, c.C}, act()) : Pair{};
    Pair out = zeros({c.B, c.T, c.C}, act());
    ref_->embedding_forward(out.ref, tokens.ref, wte.ref, wpe.ref);
    gpu_->embedding_forward(out.gpu, tokens.gpu, wte.gpu, wpe.gpu);
    expect(out, "embedding_forward");
    Pair dout = random({c.B, c.T, c.C}, act());
    Pair dwte = random({c.Vp, c.C}, kF32);
    Pair dwpe = c.wpe ? random({c.T + 3, c.C}, kF32) : Pair{};
    ref_->embedding_backward(dwte.ref, dwpe.ref, dout.ref, tokens.ref);
    gpu_->embedding_backward(dwte.gpu, dwpe.gpu, dout.gpu, tokens.gpu);
    expect(dwte, "embedding_backward dwte");
    if (c.wpe) expect(dwpe, "embedding_backward dwpe");
  }
}

TEST_P(CudaParityTest, LayerNormAndRmsNorm) {
  struct Case {
    int64_t N, C;
    bool bias;
  };
  for (Case c : {Case{1, 8, true}, Case{7, 37, false}, Case{300, 768, true}, Case{5, 1, true}}) {
    SCOPED_TRACE(testing::Message() << "N=" << c.N << " C=" << c.C);
    Pair inp = random({c.N, c.C}, act(), 2.0f);
    Pair weight = random({c.C}, act()), bias = c.bias ? random({c.C}, act()) : Pair{};
    Pair out = zeros({c.N, c.C}, act()), mean = zeros({c.N}, kF32), rstd = zeros({c.N}, kF32);
    ref_->layernorm_forward(out.ref, mean.ref, rstd.ref, inp.ref, weight.ref, bias.ref, 1e-5f);
    gpu_->layernorm_forward(out.gpu, mean.gpu, rstd.gpu, inp.gpu, weight.gpu, bias.gpu, 1e-5f);
    expect(out, "layernorm_forward out");
    expect(mean, "layernorm_forward mean");
    expect(rstd, "layernorm_forward rstd");
    // The backward pass from the same saved statistics on both.
    Pair dout = random({c.N, c.C}, act()), dinp = random({c.N, c.C}, act());
    Pair dweight = random({c.C}, kF32), dbias = c.bias ? random({c.C}, kF32) : Pair{};
    give_gpu_the_ref(mean);
    give_gpu_the_ref(rstd);
    ref_->layernorm_backward(dinp.ref, dweight.ref, dbias.ref, dout.ref, inp.ref, weight.ref,
                             mean.ref, rstd.ref);
    gpu_->layernorm_backward(dinp.gpu, dweight.gpu, dbias.gpu, dout.gpu, inp.gpu, weight.gpu,
                             mean.gpu, rstd.gpu);
    expect(dinp, "layernorm_backward dinp");
    expect(dweight, "layernorm_backward dweight");
    if (c.bias) expect(dbias, "layernorm_backward dbias");

    ref_->rmsnorm_forward(out.ref, rstd.ref, inp.ref, weight.ref, 1e-6f);
    gpu_->rmsnorm_forward(out.gpu, rstd.gpu, inp.gpu, weight.gpu, 1e-6f);
    expect(out, "rmsnorm_forward out");
    expect(rstd, "rmsnorm_forward rstd");
    give_gpu_the_ref(rstd);
    ref_->rmsnorm_backward(dinp.ref, dweight.ref, dout.ref, inp.ref, weight.ref, rstd.ref);
    gpu_->rmsnorm_backward(dinp.gpu, dweight.gpu, dout.gpu, inp.gpu, weight.gpu, rstd.gpu);
    expect(dinp, "rmsnorm_backward dinp");
    expect(dweight, "rmsnorm_backward dweight");
  }
}

TEST_P(CudaParityTest, Matmul) {
  struct Case {
    int64_t N, C, OC;
    bool bias, dinp;
  };
  for (Case c : {Case{1, 8, 8, true, true}, Case{7, 37, 13, false, true},
                 Case{130, 64, 96, true, false}, Case{257, 384, 1152, true, true}}) {
    SCOPED_TRACE(testing::Message() << "N=" << c.N << " C=" << c.C << " OC=" << c.OC);
    Pair inp = random({c.N, c.C}, act()), weight = random({c.OC, c.C}, act(), 0.2f);
    Pair bias = c.bias ? random({c.OC}, act()) : Pair{};
    Pair out = zeros({c.N, c.OC}, act());
    ref_->matmul_forward(out.ref, inp.ref, weight.ref, bias.ref);
    gpu_->matmul_forward(out.gpu, inp.gpu, weight.gpu, bias.gpu);
    expect(out, "matmul_forward");
    Pair dout = random({c.N, c.OC}, act());
    Pair dinp = c.dinp ? random({c.N, c.C}, act()) : Pair{};
    Pair dweight = random({c.OC, c.C}, kF32), dbias = c.bias ? random({c.OC}, kF32) : Pair{};
    ref_->matmul_backward(dinp.ref, dweight.ref, dbias.ref, dout.ref, inp.ref, weight.ref);
    gpu_->matmul_backward(dinp.gpu, dweight.gpu, dbias.gpu, dout.gpu, inp.gpu, weight.gpu);
    if (c.dinp) expect(dinp, "matmul_backward dinp");
    expect(dweight, "matmul_backward dweight");
    if (c.bias) expect(dbias, "matmul_backward dbias");
  }
}

struct HeadCase {
  int64_t B, T;
  int NH, KVH;
  int64_t HD;
  bool causal;
};

TEST_P(CudaParityTest, Rope) {
  for (HeadCase c : {HeadCase{1, 3, 2, 1, 8, true}, HeadCase{2, 37, 4, 2, 16, true},
                     HeadCase{1, 130, 3, 3, 64, true}}) {
    SCOPED_TRACE(testing::Message() << "T=" << c.T << " HD=" << c.HD);
    const int64_t R = (c.NH + 2 * c.KVH) * c.HD;
    for (float theta : {10000.0f, 500000.0f}) {
      Pair inp = random({c.B, c.T, R}, act()), out = zeros({c.B, c.T, R}, act());
      ref_->rope_forward(out.ref, inp.ref, c.NH, c.KVH, theta);
      gpu_->rope_forward(out.gpu, inp.gpu, c.NH, c.KVH, theta);
      expect(out, "rope_forward");
      Pair dinp = random({c.B, c.T, R}, act());
      ref_->rope_backward(dinp.ref, inp.ref, c.NH, c.KVH, theta);
      gpu_->rope_backward(dinp.gpu, inp.gpu, c.NH, c.KVH, theta);
      expect(dinp, "rope_backward");
    }
  }
}

// One backend, one (HD, theta), T = 64, then 32, then 64 and 48: the cos/sin table built for
// T = 64 serves the shorter calls. It used to hold the T cosines and then the T sines, while
// the kernel looked for the sines at T·HD/2 with the T of the call, so a shorter T after a longer
// one turned queries and keys by the cosines of later positions (evaluation at another length,
// sampling). GPU-only: the CPU backend builds its table per call.
TEST_P(CudaParityTest, RopeShorterAfterLonger) {
  const int NH = 2, KVH = 1;
  const int64_t HD = 16, R = (NH + 2 * KVH) * HD;
  for (int64_t T : {64, 32, 64, 48}) {
    SCOPED_TRACE(testing::Message() << "T=" << T);
    Pair inp = random({2, T, R}, act()), out = zeros({2, T, R}, act());
    ref_->rope_forward(out.ref, inp.ref, NH, KVH, 10000.0f);
    gpu_->rope_forward(out.gpu, inp.gpu, NH, KVH, 10000.0f);
    expect(out, "rope_forward");
    Pair dinp = random({2, T, R}, act());
    ref_->rope_backward(dinp.ref, inp.ref, NH, KVH, 10000.0f);
    gpu_->rope_backward(dinp.gpu, inp.gpu, NH, KVH, 10000.0f);
    expect(dinp, "rope_backward");
  }
}

TEST_P(CudaParityTest, Attention) {
  for (HeadCase c : {HeadCase{1, 1, 1, 1, 8, true}, HeadCase{2, 37, 4, 2, 16, true},
                     HeadCase{2, 37, 4, 4, 16, false}, HeadCase{1, 70, 6, 2, 64, true},
                     HeadCase{1, 33, 2, 1, 128, false}, HeadCase{1, 65, 2, 2, 80, true},
                     HeadCase{2, 129, 4, 1, 64, true}}) {
    SCOPED_TRACE(testing::Message() << "B=" << c.B << " T=" << c.T << " NH=" << c.NH << " KVH="
                                    << c.KVH << " HD=" << c.HD << " causal=" << c.causal);
    const int64_t R = (c.NH + 2 * c.KVH) * c.HD, OC = c.NH * c.HD;
    Pair qkv = random({c.B, c.T, R}, act(), 2.0f);
    Pair out = zeros({c.B, c.T, OC}, act()), lse = zeros({c.B, c.NH, c.T}, kF32);
    AttentionSpec spec;
    spec.num_heads = c.NH;
    spec.num_kv_heads = c.KVH;
    spec.causal = c.causal;
    spec.scale = 1.0f / std::sqrt(static_cast<float>(c.HD));
    spec.k_offset = OC;
    ref_->attention_forward(out.ref, lse.ref, qkv.ref, qkv.ref, spec);
    gpu_->attention_forward(out.gpu, lse.gpu, qkv.gpu, qkv.gpu, spec);
    expect(out, "attention_forward out");
    expect(lse, "attention_forward lse");
    // The backward pass from the reference's out and lse on both.
    give_gpu_the_ref(out);
    give_gpu_the_ref(lse);
    Pair dout = random({c.B, c.T, OC}, act()), dqkv = random({c.B, c.T, R}, act());
    ref_->attention_backward(dqkv.ref, dqkv.ref, Tensor(), dout.ref, out.ref, lse.ref, qkv.ref,
                             qkv.ref, spec);
    gpu_->attention_backward(dqkv.gpu, dqkv.gpu, Tensor(), dout.gpu, out.gpu, lse.gpu, qkv.gpu,
                             qkv.gpu, spec);
    expect(dqkv, "attention_backward dqkv");
  }
}

TEST_P(CudaParityTest, GeluGluAdd) {
  for (auto [N, F] : {std::pair<int64_t, int64_t>{1, 1}, {7, 37}, {64, 3072}}) {
    SCOPED_TRACE(testing::Message() << "N=" << N << " F=" << F);
    Pair inp = random({N, F}, act(), 4.0f), out = zeros({N, F}, act());
    ref_->gelu_forward(out.ref, inp.ref);
    gpu_->gelu_forward(out.gpu, inp.gpu);
    expect(out, "gelu_forward");
    Pair dout = random({N, F}, act()), dinp = random({N, F}, act());
    ref_->gelu_backward(dinp.ref, dout.ref, inp.ref);
    gpu_->gelu_backward(dinp.gpu, dout.gpu, inp.gpu);
    expect(dinp, "gelu_backward");

    for (auto [glu, name] : {std::pair{Glu::kSwiGlu, "swiglu"}, {Glu::kGeGlu, "geglu"}}) {
      Pair gate_up = random({N, 2 * F}, act(), 4.0f);
      ref_->glu_forward(out.ref, gate_up.ref, glu);
      gpu_->glu_forward(out.gpu, gate_up.gpu, glu);
      expect(out, std::string("glu_forward ") + name);
      Pair dgate_up = random({N, 2 * F}, act());
      ref_->glu_backward(dgate_up.ref, dout.ref, gate_up.ref, glu);
      gpu_->glu_backward(dgate_up.gpu, dout.gpu, gate_up.gpu, glu);
      expect(dgate_up, std::string("glu_backward ") + name);
    }

    Pair a = random({N, F}, act()), b = random({N, F}, act());
    ref_->add_forward(out.ref, a.ref, b.ref);
    gpu_->add_forward(out.gpu, a.gpu, b.gpu);
    expect(out, "add_forward");
    // FSDP adds reduce-scattered f32 gradient shards in every plan.
    Pair ga = random({N, F}, kF32), gb = random({N, F}, kF32), gsum = zeros({N, F}, kF32);
    ref_->add_forward(gsum.ref, ga.ref, gb.ref);
    gpu_->add_forward(gsum.gpu, ga.gpu, gb.gpu);
    expect(gsum, "add_forward f32");
  }
}

// T5's relative position bias: shared by the batch (Bb = 1) or per row, T5's 32 buckets or few
// (each used by many positions), query rows that are not a multiple of the 16-row chunk, and a
// bucket count that fills the shared memory of one warp only.
TEST_P(CudaParityTest, PositionBias) {
  struct Case {
    int64_t Bb, NH, Tq, Tk, K;
  };
  for (Case c : {Case{1, 1, 1, 1, 2}, Case{1, 4, 37, 37, 32}, Case{3, 2, 16, 70, 5},
                 Case{2, 6, 130, 129, 32}, Case{1, 2, 9, 40, 300}}) {
    SCOPED_TRACE(testing::Message() << "Bb=" << c.Bb << " NH=" << c.NH << " Tq=" << c.Tq
                                    << " Tk=" << c.Tk << " buckets=" << c.K);
    Pair buckets = ints({c.Bb, c.Tq, c.Tk}, ids(c.Bb * c.Tq * c.Tk, c.K, 0));
    Pair table = random({c.K, c.NH}, act()), bias = zeros({c.Bb, c.NH, c.Tq, c.Tk}, act());
    ref_->position_bias_forward(bias.ref, table.ref, buckets.ref);
    gpu_->position_bias_forward(bias.gpu, table.gpu, buckets.gpu);
    expect(bias, "position_bias_forward");
    Pair dbias = random({c.Bb, c.NH, c.Tq, c.Tk}, kF32), dtable = random({c.K, c.NH}, kF32);
    ref_->position_bias_backward(dtable.ref, dbias.ref, buckets.ref);
    gpu_->position_bias_backward(dtable.gpu, dbias.gpu, buckets.gpu);
    expect(dtable, "position_bias_backward");
  }
}

TEST_P(CudaParityTest, CrossEntropy) {
  struct Case {
    int64_t N, V, Vp;
  };
  for (Case c : {Case{1, 2, 2}, Case{5, 11, 16}, Case{9, 1000, 1024}, Case{33, 50257, 50304}}) {
    SCOPED_TRACE(testing::Message() << "N=" << c.N << " V=" << c.V << " Vp=" << c.Vp);
    // Without and with T5x's z-loss (1e-4 as T5 trains; 0.1 so the term matters).
    for (float z : {0.0f, 1e-4f, 0.1f}) {
      SCOPED_TRACE(testing::Message() << "z_loss " << z);
      Pair logits = random({c.N, c.Vp}, act(), 8.0f);
      Pair targets = ints({c.N}, ids(c.N, c.V, 4));
      Pair losses = zeros({c.N}, kF32);
      ref_->cross_entropy_forward(losses.ref, logits.ref, targets.ref, c.V, z);
      gpu_->cross_entropy_forward(losses.gpu, logits.gpu, targets.gpu, c.V, z);
      expect(losses, "cross_entropy_forward");
      // In place, as the model calls it.
      ref_->cross_entropy_backward(logits.ref, logits.ref, targets.ref, c.V, 0.25f, z);
      gpu_->cross_entropy_backward(logits.gpu, logits.gpu, targets.gpu, c.V, 0.25f, z);
      expect(logits, "cross_entropy_backward");
    }
  }
}

TEST_P(CudaParityTest, CrossEntropyShards) {
  struct Case {
    int64_t N, Vl, v_begin, v_count;
  };
  for (Case c :
       {Case{4, 16, 0, 16}, Case{6, 16, 32, 10}, Case{5, 8, 64, 0}, Case{7, 1024, 1024, 1000}}) {
    SCOPED_TRACE(testing::Message() << "N=" << c.N << " Vl=" << c.Vl << " v_begin=" << c.v_begin
                                    << " v_count=" << c.v_count);
    Pair logits = random({c.N, c.Vl}, act(), 8.0f);
    // Targets inside and outside this shard, and ignored ones.
    Pair targets = ints({c.N}, ids(c.N, c.v_begin + c.Vl + 16, 3));
    Pair rowmax = zeros({c.N}, kF32);
    ref_->ce_shard_max(rowmax.ref, logits.ref, c.v_count);
    gpu_->ce_shard_max(rowmax.gpu, logits.gpu, c.v_count);
    expect(rowmax, "ce_shard_max");
    if (c.v_count == 0) continue;
    Pair sums = zeros({c.N, 2}, kF32);
    ref_->ce_shard_sums(sums.ref, logits.ref, rowmax.ref, targets.ref, c.v_begin, c.v_count);
    gpu_->ce_shard_sums(sums.gpu, logits.gpu, rowmax.gpu, targets.gpu, c.v_begin, c.v_count);
    expect(sums, "ce_shard_sums");
    std::vector<float> m = ref_values(rowmax), s = ref_values(sums), l(m.size());
    for (size_t i = 0; i < l.size(); ++i) l[i] = m[i] + std::log(s[2 * i]);
    Pair lse = upload({c.N}, kF32, l);
    for (float z : {0.0f, 0.1f}) {  // without and with a z-loss; in place, as the model calls it
      SCOPED_TRACE(testing::Message() << "z_loss " << z);
      Pair d = zeros({c.N, c.Vl}, act());
      ref_->copy(d.ref, logits.ref);
      gpu_->copy(d.gpu, logits.gpu);
      ref_->ce_shard_backward(d.ref, d.ref, lse.ref, targets.ref, c.v_begin, c.v_count, 0.5f, z);
      gpu_->ce_shard_backward(d.gpu, d.gpu, lse.gpu, targets.gpu, c.v_begin, c.v_count, 0.5f, z);
      expect(d, "ce_shard_backward");
    }
  }
}

TEST_P(CudaParityTest, SumSquares) {
  for (int64_t n : {1, 1000, (1 << 20) + 3}) {
    Pair x = random({n}, kF32, 3.0f);
    double want = ref_->sum_squares(x.ref), got = gpu_->sum_squares(x.gpu);
    EXPECT_NEAR(got, want, 1e-10 * want) << "n=" << n;
    EXPECT_EQ(gpu_->sum_squares(x.gpu), got) << "the same sum on every run";
  }
}

TEST_P(CudaParityTest, AdamW) {
  for (int64_t n : {1, 1000, 65537}) {
    Pair p = random({n}, kF32), g = random({n}, kF32), m = random({n}, kF32, 0.1f);
    std::vector<float> vv = uniform(n, kF32, 0.01f);
    for (float& x : vv) x = std::fabs(x);
    Pair v = upload({n}, kF32, vv);
    AdamWArgs args;
    args.lr = 3e-4f;
    args.weight_decay = 0.1f;
    args.step = 7;
    args.grad_scale = 0.5f;
    for (int step = 0; step < 3; ++step, ++args.step) {
      ref_->adamw_update(p.ref, g.ref, m.ref, v.ref, args);
      gpu_->adamw_update(p.gpu, g.gpu, m.gpu, v.gpu, args);
    }
    expect(p, "adamw");
    expect(m, "adamw");
    expect(v, "adamw");
  }
}

INSTANTIATE_TEST_SUITE_P(Plans, CudaParityTest, ::testing::ValuesIn(kModes),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace ax::train::parity
