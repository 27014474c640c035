// Finite-difference check of every backward op of the CPU backend (llm.c / ggml
// test-backend-ops style). Each row of the table is {op, shapes, eps, tolerance}: inputs get
// fixed-seed random values, the outputs are projected to a scalar loss L = Σ w · out with random
// w (accumulated in double from the float forward), the backward op runs with dout = w, and each
// checked input element's gradient is compared with (L(x + eps) - L(x - eps)) / (2 eps) (with the
// perturbation actually representable in float). Up to kMaxChecked elements per input are
// checked, chosen at random. Every case also checks the accumulate convention: a second backward
// call adds the same gradient again (cross-entropy, which overwrites, must give the same result).
//
// A check passes when |analytic - numeric| <= atol + rtol · |numeric|.
//
//   op             eps    atol   rtol   why
//   embedding      0.5    1e-4   1e-4   linear: central differences are exact up to rounding
//   matmul         0.1    2e-4   1e-4   linear (bilinear in inp and weight, each one at a time)
//   rope           0.1    1e-4   1e-4   linear
//   layernorm      1e-2   3e-4   1e-3   smooth: truncation error O(eps²) plus float rounding
//   rmsnorm        1e-2   3e-4   1e-3   smooth
//   attention      1e-2   5e-4   2e-3   smooth (softmax); the OpenBLAS path for T >= 64
//   gelu           1e-2   2e-4   1e-3   smooth; inputs N(0, 2) cover both tails
//   glu            1e-2   2e-4   1e-3   smooth (SwiGLU and GeGLU)
//   position_bias  0.5    1e-4   1e-4   linear (the table's gradient; buckets repeat)
//   cross_entropy  1e-2   2e-4   1e-3   smooth; padded columns and ignored rows have zero gradient;
//                                       z-loss 0, 1e-4 (T5's) and 0.1 (large enough to matter)
//
// Measured worst error / tolerance is below 0.25 for every case; a 1 % error planted in the
// attention or LayerNorm input gradient exceeds the tolerance 3 to 9 times.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <string>

#include "backend_test_util.h"

namespace ax::train {
namespace {

using testing::Buffers;
using Env = std::map<std::string, Tensor>;

constexpr int kMaxChecked = 48;

struct Input {
  Input(std::string n, std::vector<int64_t> s, bool diff = true, float sd = 1.0f,
        std::vector<int32_t> i = {})
      : name(std::move(n)),
        shape(std::move(s)),
        differentiable(diff),
        stddev(sd),
        ints(std::move(i)) {}
  std::string name;
  std::vector<int64_t> shape;
  bool differentiable;
  float stddev;               // of the normal random values
  std::vector<int32_t> ints;  // non-empty: an i32 input with these values
};

struct Output {
  Output(std::string n, std::vector<int64_t> s, bool p = true)
      : name(std::move(n)), shape(std::move(s)), projected(p) {}
  std::string name;
  std::vector<int64_t> shape;
  bool projected;  // part of the loss (saved statistics such as lse are not)
};

struct GradCase {
  std::string name;
  double eps, atol, rtol;
  std::vector<Input> inputs;
  std::vector<Output> outputs;
  std::function<void(Backend&, Env&)> forward, backward;
  float dloss = 0;  // cross-entropy: a uniform projection, and the backward overwrites
};

std::string dims_name(std::initializer_list<std::pair<const char*, int64_t>> dims) {
  std::string s;
  for (auto [k, v] : dims) s += std::string("_") + k + std::to_string(v);
  return s;
}

std::vector<GradCase> embedding_cases() {
  std::vector<GradCase> cases;
  std::mt19937 rng(7);
  for (auto [B, T, Vp, C, with_wpe] : {std::tuple{2, 5, 7, 6, true}, {3, 4, 5, 9, false}}) {
    GradCase c;
    c.name = "embedding" + dims_name({{"B", B}, {"T", T}, {"Vp", Vp}, {"C", C}}) +
             (with_wpe ? "_wpe" : "");
    c.eps = 0.5, c.atol = 1e-4, c.rtol = 1e-4;
    c.inputs = {{"tokens", {B, T}, false, 1, testing::ints(rng, B * T, 0, Vp)}, {"wte", {Vp, C}}};
    if (with_wpe) c.inputs.push_back({"wpe", {T + 2, C}});
    c.outputs = {{"out", {B, T, C}}};
    c.forward = [](Backend& be, Env& e) {
      be.embedding_forward(e["out"], e["tokens"], e["wte"], e["wpe"]);
    };
    c.backward = [](Backend& be, Env& e) {
      be.embedding_backward(e["dwte"], e["dwpe"], e["dout"], e["tokens"]);
    };
    cases.push_back(c);
  }
  return cases;
}

std::vector<GradCase> norm_cases() {
  std::vector<GradCase> cases;
  for (auto [N, C, with_bias] : {std::tuple{5, 7, true}, {4, 33, true}, {3, 16, false}}) {
    GradCase c;
    c.name = "layernorm" + dims_name({{"N", N}, {"C", C}}) + (with_bias ? "_bias" : "");
    c.eps = 1e-2, c.atol = 3e-4, c.rtol = 1e-3;
    c.inputs = {{"inp", {N, C}, true, 2.0f}, {"weight", {C}}};
    if (with_bias) c.inputs.push_back({"bias", {C}});
    c.outputs = {{"out", {N, C}}, {"mean", {N}, false}, {"rstd", {N}, false}};
    c.forward = [](Backend& be, Env& e) {
      be.layernorm_forward(e["out"], e["mean"], e["rstd"], e["inp"], e["weight"], e["bias"], 1e-5f);
    };
    c.backward = [](Backend& be, Env& e) {
      be.layernorm_backward(e["dinp"], e["dweight"], e["dbias"], e["dout"], e["inp"], e["weight"],
                            e["mean"], e["rstd"]);
    };
    cases.push_back(c);
  }
  for (auto [N, C] : {std::pair{5, 7}, {4, 40}}) {
    GradCase c;
    c.name = "rmsnorm" + dims_name({{"N", N}, {"C", C}});
    c.eps = 1e-2, c.atol = 3e-4, c.rtol = 1e-3;
    c.inputs = {{"inp", {N, C}, true, 2.0f}, {"weight", {C}}};
    c.outputs = {{"out", {N, C}}, {"rstd", {N}, false}};
    c.forward = [](Backend& be, Env& e) {
      be.rmsnorm_forward(e["out"], e["rstd"], e["inp"], e["weight"], 1e-5f);
    };
    c.backward = [](Backend& be, Env& e) {
      be.rmsnorm_backward(e["dinp"], e["dweight"], e["dout"], e["inp"], e["weight"], e["rstd"]);
    };
    cases.push_back(c);
  }
  return cases;
}

std::vector<GradCase> matmul_cases() {
  std::vector<GradCase> cases;
  // The last shape is large enough for OpenBLAS (the small ones use the builtin kernel).
  for (auto [N, C, OC, with_bias, with_dinp] : {std::tuple{5, 7, 3, true, true},
                                                {6, 20, 17, false, true},
                                                {5, 7, 3, true, false},
                                                {40, 48, 36, true, true}}) {
    GradCase c;
    c.name = "matmul" + dims_name({{"N", N}, {"C", C}, {"OC", OC}}) + (with_bias ? "_bias" : "") +
             (with_dinp ? "" : "_no_dinp_dbias");
    c.eps = 0.1, c.atol = 2e-4, c.rtol = 1e-4;
    c.inputs = {{"inp", {N, C}, with_dinp}, {"weight", {OC, C}}};
    if (with_bias) c.inputs.push_back({"bias", {OC}, with_dinp});
    c.outputs = {{"out", {N, OC}}};
    c.forward = [](Backend& be, Env& e) {
      be.matmul_forward(e["out"], e["inp"], e["weight"], e["bias"]);
    };
    c.backward = [](Backend& be, Env& e) {
      be.matmul_backward(e["dinp"], e["dweight"], e["dbias"], e["dout"], e["inp"], e["weight"]);
    };
    cases.push_back(c);
  }
  return cases;
}

std::vector<GradCase> rope_cases() {
  std::vector<GradCase> cases;
  for (auto [B, T, NH, KVH, HD, theta] :
       {std::tuple{2, 5, 4, 2, 8, 10000.0f}, {1, 6, 4, 1, 6, 100.0f}, {1, 3, 2, 2, 4, 10000.0f}}) {
    GradCase c;
    c.name = "rope" + dims_name({{"B", B}, {"T", T}, {"NH", NH}, {"KVH", KVH}, {"HD", HD}});
    c.eps = 0.1, c.atol = 1e-4, c.rtol = 1e-4;
    int64_t R = (NH + 2 * KVH) * HD;
    c.inputs = {{"inp", {B, T, R}}};
    c.outputs = {{"out", {B, T, R}}};
    c.forward = [NH, KVH, theta](Backend& be, Env& e) {
      be.rope_forward(e["out"], e["inp"], NH, KVH, theta);
    };
    c.backward = [NH, KVH, theta](Backend& be, Env& e) {
      be.rope_backward(e["dinp"], e["dout"], NH, KVH, theta);
    };
    cases.push_back(c);
  }
  return cases;
}

std::vector<GradCase> attention_cases() {
  std::vector<GradCase> cases;
  for (auto [B, T, NH, KVH, HD, causal] : {std::tuple{2, 5, 4, 2, 8, true},
                                           {2, 5, 4, 1, 8, false},
                                           {1, 7, 2, 2, 6, true},
                                           {1, 5, 4, 4, 4, false},
                                           {1, 70, 4, 2, 16, true},
                                           {1, 70, 2, 1, 8, false},
                                           {1, 66, 4, 1, 8, true}}) {
    GradCase c;
    c.name = std::string("attention_") + (causal ? "causal" : "bidirectional") +
             dims_name({{"B", B}, {"T", T}, {"NH", NH}, {"KVH", KVH}, {"HD", HD}});
    c.eps = 1e-2, c.atol = 5e-4, c.rtol = 2e-3;
    c.inputs = {{"qkv", {B, T, (NH + 2 * KVH) * HD}}};
    c.outputs = {{"out", {B, T, NH * HD}}, {"lse", {B, NH, T}, false}};
    const AttentionSpec spec = testing::packed_attention(NH, KVH, HD, causal);
    c.forward = [spec](Backend& be, Env& e) {
      be.attention_forward(e["out"], e["lse"], e["qkv"], e["qkv"], spec);
    };
    c.backward = [spec](Backend& be, Env& e) {
      be.attention_backward(e["dqkv"], e["dqkv"], Tensor(), e["dout"], e["out"], e["lse"], e["qkv"],
                            e["qkv"], spec);
    };
    cases.push_back(c);
  }
  // The general op: queries and keys/values in their own tensors and lengths, another scale, a
  // bias (shared by the batch or per row) with its gradient, and segment ids with a query that
  // sees no key (its gradient is zero).
  struct General {
    int B, Tq, Tk, NH, KVH, HD, bias_batch;
    bool causal, segments;
  };
  for (const General& g :
       {General{2, 4, 6, 4, 2, 8, 1, false, false}, General{2, 5, 5, 2, 1, 8, 2, true, true},
        General{1, 70, 9, 2, 2, 8, 1, false, true}}) {
    GradCase c;
    c.name = std::string("attention_general") + (g.causal ? "_causal" : "") +
             (g.segments ? "_segments" : "") +
             dims_name({{"B", g.B},
                        {"Tq", g.Tq},
                        {"Tk", g.Tk},
                        {"NH", g.NH},
                        {"KVH", g.KVH},
                        {"Bb", g.bias_batch}});
    c.eps = 1e-2, c.atol = 5e-4, c.rtol = 2e-3;
    const int64_t Rq = g.NH * g.HD + 3, Rkv = 2 * g.KVH * g.HD + 2;
    c.inputs = {{"q", {g.B, g.Tq, Rq}},
                {"kv", {g.B, g.Tk, Rkv}},
                {"bias", {g.bias_batch, g.NH, g.Tq, g.Tk}}};
    if (g.segments) {
      std::vector<int32_t> qs, ks;
      for (int b = 0; b < g.B; ++b) {
        for (int t = 0; t < g.Tq; ++t) qs.push_back(t == g.Tq - 1 ? 7 : 1 + t / 2);
        for (int u = 0; u < g.Tk; ++u) ks.push_back(1 + u / 3);
      }
      c.inputs.push_back({"q_segments", {g.B, g.Tq}, false, 1, qs});
      c.inputs.push_back({"k_segments", {g.B, g.Tk}, false, 1, ks});
    }
    c.outputs = {{"out", {g.B, g.Tq, g.NH * g.HD}}, {"lse", {g.B, g.NH, g.Tq}, false}};
    AttentionSpec base;
    base.num_heads = g.NH;
    base.num_kv_heads = g.KVH;
    base.causal = g.causal;
    base.scale = 0.4f;
    base.k_offset = 1;
    auto spec = [base](Env& e) {
      AttentionSpec s = base;
      s.bias = e["bias"];
      s.q_segments = e["q_segments"];
      s.k_segments = e["k_segments"];
      return s;
    };
    c.forward = [spec](Backend& be, Env& e) {
      be.attention_forward(e["out"], e["lse"], e["q"], e["kv"], spec(e));
    };
    c.backward = [spec](Backend& be, Env& e) {
      be.attention_backward(e["dq"], e["dkv"], e["dbias"], e["dout"], e["out"], e["lse"], e["q"],
                            e["kv"], spec(e));
    };
    cases.push_back(c);
  }
  return cases;
}

std::vector<GradCase> pointwise_cases() {
  std::vector<GradCase> cases;
  for (auto [N, F] : {std::pair{5, 7}, {3, 40}}) {
    GradCase c;
    c.name = "gelu" + dims_name({{"N", N}, {"F", F}});
    c.eps = 1e-2, c.atol = 2e-4, c.rtol = 1e-3;
    c.inputs = {{"inp", {N, F}, true, 2.0f}};
    c.outputs = {{"out", {N, F}}};
    c.forward = [](Backend& be, Env& e) { be.gelu_forward(e["out"], e["inp"]); };
    c.backward = [](Backend& be, Env& e) { be.gelu_backward(e["dinp"], e["dout"], e["inp"]); };
    cases.push_back(c);
  }
  for (auto [glu, name] : {std::pair{Glu::kSwiGlu, "swiglu"}, {Glu::kGeGlu, "geglu"}}) {
    for (auto [N, F] : {std::pair{5, 7}, {3, 33}}) {
      GradCase c;
      c.name = std::string("glu_") + name + dims_name({{"N", N}, {"F", F}});
      c.eps = 1e-2, c.atol = 2e-4, c.rtol = 1e-3;
      c.inputs = {{"inp", {N, 2 * F}, true, 2.0f}};
      c.outputs = {{"out", {N, F}}};
      c.forward = [glu](Backend& be, Env& e) { be.glu_forward(e["out"], e["inp"], glu); };
      c.backward = [glu](Backend& be, Env& e) {
        be.glu_backward(e["dinp"], e["dout"], e["inp"], glu);
      };
      cases.push_back(c);
    }
  }
  std::mt19937 rng(11);
  for (auto [N, V, Vp] : {std::tuple{6, 11, 16}, {4, 40, 40}}) {
    for (float z : {0.0f, 1e-4f, 0.1f}) {
      GradCase c;
      c.name = "cross_entropy" + dims_name({{"N", N}, {"V", V}, {"Vp", Vp}}) +
               (z == 0      ? ""
                : z < 1e-3f ? "_zloss_1em4"
                            : "_zloss_0p1");
      c.eps = 1e-2, c.atol = 2e-4, c.rtol = 1e-3;
      auto targets = testing::ints(rng, N, 0, V);
      targets[1] = -1;  // ignored
      c.inputs = {{"targets", {N}, false, 1, targets}, {"logits", {N, Vp}, true, 2.0f}};
      c.outputs = {{"losses", {N}}};
      c.dloss = 0.37f;
      int64_t v = V;
      c.forward = [v, z](Backend& be, Env& e) {
        be.cross_entropy_forward(e["losses"], e["logits"], e["targets"], v, z);
      };
      c.backward = [v, z](Backend& be, Env& e) {
        be.cross_entropy_backward(e["dlogits"], e["logits"], e["targets"], v, 0.37f, z);
      };
      cases.push_back(c);
    }
  }
  return cases;
}

// T5's relative position bias: the table's gradient, for a bias shared by the batch (Bb = 1) and
// one per batch row (Bb = B = 2), with few buckets, so each is used by many positions.
std::vector<GradCase> position_bias_cases() {
  std::vector<GradCase> cases;
  std::mt19937 rng(13);
  for (auto [Bb, NH, Tq, Tk, K] : {std::tuple{1, 3, 5, 6, 4}, {2, 2, 4, 4, 3}, {2, 4, 7, 5, 32}}) {
    GradCase c;
    c.name = "position_bias" +
             dims_name({{"Bb", Bb}, {"NH", NH}, {"Tq", Tq}, {"Tk", Tk}, {"buckets", K}});
    c.eps = 0.5, c.atol = 1e-4, c.rtol = 1e-4;
    c.inputs = {{"buckets", {Bb, Tq, Tk}, false, 1, testing::ints(rng, Bb * Tq * Tk, 0, K)},
                {"table", {K, NH}}};
    c.outputs = {{"bias", {Bb, NH, Tq, Tk}}};
    c.forward = [](Backend& be, Env& e) {
      be.position_bias_forward(e["bias"], e["table"], e["buckets"]);
    };
    c.backward = [](Backend& be, Env& e) {
      be.position_bias_backward(e["dtable"], e["dbias"], e["buckets"]);
    };
    cases.push_back(c);
  }
  return cases;
}

std::vector<GradCase> all_cases() {
  std::vector<GradCase> all;
  for (auto make : {embedding_cases, norm_cases, matmul_cases, rope_cases, attention_cases,
                    pointwise_cases, position_bias_cases}) {
    auto part = make();
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

void PrintTo(const GradCase& c, std::ostream* os) { *os << c.name; }

class GradCheck : public ::testing::TestWithParam<GradCase> {};

TEST_P(GradCheck, BackwardMatchesFiniteDifferencesAndAccumulates) {
  const GradCase& c = GetParam();
  auto be = make_cpu_backend(2);
  Buffers buf(*be);
  std::mt19937 rng(1234);
  Env env;
  std::map<std::string, std::vector<float>> values, grad0, weights;
  for (const Input& in : c.inputs) {
    if (!in.ints.empty()) {
      env[in.name] = buf.i32(in.shape, in.ints);
      continue;
    }
    values[in.name] = testing::normal(rng, testing::numel(in.shape), in.stddev);
    env[in.name] = buf.f32(in.shape, values[in.name]);
    if (in.differentiable) {
      // Random starting gradients show that backward adds instead of overwriting.
      grad0[in.name] = c.dloss != 0 ? std::vector<float>(testing::numel(in.shape))
                                    : testing::normal(rng, testing::numel(in.shape));
      env["d" + in.name] = buf.f32(in.shape, grad0[in.name]);
    }
  }
  for (const Output& out : c.outputs) {
    env[out.name] = buf.f32(out.shape);
    if (!out.projected) continue;
    weights[out.name] = c.dloss != 0 ? std::vector<float>(testing::numel(out.shape), c.dloss)
                                     : testing::normal(rng, testing::numel(out.shape));
    env["d" + out.name] = buf.f32(out.shape, weights[out.name]);
  }
  auto loss = [&] {
    c.forward(*be, env);
    double L = 0;
    for (auto& [name, w] : weights) {
      auto y = buf.read(env[name]);
      for (size_t i = 0; i < y.size(); ++i) L += static_cast<double>(w[i]) * y[i];
    }
    return L;
  };
  loss();
  c.backward(*be, env);
  std::map<std::string, std::vector<float>> grad1;
  for (auto& [name, g0] : grad0) grad1[name] = buf.read(env["d" + name]);
  c.backward(*be, env);
  for (auto& [name, g0] : grad0) {
    auto g2 = buf.read(env["d" + name]);
    for (size_t i = 0; i < g2.size(); ++i) {
      double once = static_cast<double>(grad1[name][i]) - g0[i];
      double twice = c.dloss != 0 ? once : 2 * once;
      ASSERT_NEAR(g2[i] - g0[i], twice, 1e-5 * (1 + std::abs(twice)))
          << c.name << " d" << name << "[" << i << "]: second backward call";
    }
  }
  for (auto& [name, g0] : grad0) {
    std::vector<float>& x = values[name];
    std::vector<int64_t> idx(x.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::shuffle(idx.begin(), idx.end(), rng);
    idx.resize(std::min<size_t>(idx.size(), kMaxChecked));
    int failures = 0;
    double worst = 0;
    for (int64_t i : idx) {
      float saved = x[i];
      float hi = saved + static_cast<float>(c.eps), lo = saved - static_cast<float>(c.eps);
      x[i] = hi;
      buf.set(env[name], x);
      double L_hi = loss();
      x[i] = lo;
      buf.set(env[name], x);
      double L_lo = loss();
      x[i] = saved;
      buf.set(env[name], x);
      double numeric = (L_hi - L_lo) / (static_cast<double>(hi) - lo);
      double analytic = static_cast<double>(grad1[name][i]) - g0[i];
      double err = std::abs(analytic - numeric);
      worst = std::max(worst, err / (c.atol + c.rtol * std::abs(numeric)));
      if (err > c.atol + c.rtol * std::abs(numeric) && ++failures <= 5) {
        ADD_FAILURE() << c.name << " d" << name << "[" << i << "]: analytic " << analytic
                      << " numeric " << numeric;
      }
    }
    EXPECT_EQ(failures, 0) << c.name << " d" << name << ": " << failures << " of " << idx.size()
                           << " elements off; worst error / tolerance " << worst;
  }
}

std::string case_name(const ::testing::TestParamInfo<GradCase>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(CpuBackend, GradCheck, ::testing::ValuesIn(all_cases()), case_name);

}  // namespace
}  // namespace ax::train
