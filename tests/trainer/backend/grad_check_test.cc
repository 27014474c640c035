// The op table's gradient driver (op_table.h): a finite-difference check of every backward op of
// the CPU backend (llm.c / ggml test-backend-ops style), for each case with a backward pass and a
// FiniteDiff tolerance. Inputs get fixed-seed values as the case draws them, the projected
// outputs are reduced to a scalar loss L = Σ w · out with random w (accumulated in double from
// the float forward), the backward op runs with dout = w, and each checked input element's
// gradient is compared with (L(x + eps) - L(x - eps)) / (2 eps) (with the perturbation actually
// representable in float). Up to kMaxChecked elements per input are checked, chosen at random.
// Every case also checks the accumulate convention: a second backward call adds the same
// gradient again (cross-entropy, which overwrites, must give the same result).
//
// A check passes when |analytic - numeric| <= atol + rtol · |numeric|; each op's eps, atol and
// rtol are in op_table.cc (docs/testing-ops.md lists them). Measured worst error / tolerance is
// below 0.25 for the former cases; a 1 % error planted in the attention or LayerNorm input
// gradient exceeds the tolerance 3 to 9 times.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "backend_test_util.h"
#include "op_table.h"

namespace ax::train::optable {
namespace {

using testing::Buffers;

constexpr int kMaxChecked = 48;

class GradCheck : public ::testing::TestWithParam<OpCase> {};

TEST_P(GradCheck, BackwardMatchesFiniteDifferencesAndAccumulates) {
  const OpCase& c = GetParam();
  const FiniteDiff& fd = *c.fd;
  auto be = make_cpu_backend(2);
  Buffers buf(*be);
  std::mt19937 rng(1234);
  Env env;
  std::map<std::string, std::vector<float>> values, grad0, weights;
  for (const In& in : c.inputs) {
    ASSERT_NE(in.grad, Grad::kInPlace) << "the input is gone after backward; no finite differences";
    if (in.kind == Kind::kI32) {
      env[in.name] = buf.i32(in.shape, in.ids);
      continue;
    }
    values[in.name] = draw(c, in, rng);
    env[in.name] = buf.f32(in.shape, values[in.name]);
    if (in.grad == Grad::kNone) continue;
    // Random starting gradients show that backward adds instead of overwriting.
    grad0[in.name] = c.dloss != 0 ? std::vector<float>(numel(in.shape))
                                  : draw(c, In{.shape = in.shape, .scale = in.grad_scale}, rng);
    env["d" + in.name] = buf.f32(in.shape, grad0[in.name]);
  }
  for (const Out& out : c.outputs) {
    ASSERT_FALSE(out.in_place) << "an op that updates its input has no finite differences";
    env[out.name] = buf.f32(out.shape);
    if (!out.projected) continue;
    weights[out.name] = c.dloss != 0 ? std::vector<float>(numel(out.shape), c.dloss)
                                     : draw(c, In{.shape = out.shape}, rng);
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
      float hi = saved + static_cast<float>(fd.eps), lo = saved - static_cast<float>(fd.eps);
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
      worst = std::max(worst, err / (fd.atol + fd.rtol * std::abs(numeric)));
      if (!(err <= fd.atol + fd.rtol * std::abs(numeric)) && ++failures <= 5) {
        ADD_FAILURE() << c.name << " d" << name << "[" << i << "]: analytic " << analytic
                      << " numeric " << numeric;
      }
    }
    EXPECT_EQ(failures, 0) << c.name << " d" << name << ": " << failures << " of " << idx.size()
                           << " elements off; worst error / tolerance " << worst;
  }
}

std::string case_name(const ::testing::TestParamInfo<OpCase>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(CpuBackend, GradCheck, ::testing::ValuesIn(cases_for(kGradient)),
                         case_name);

}  // namespace
}  // namespace ax::train::optable
