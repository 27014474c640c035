// The op table's reference driver (op_table.h): every case with a naive double-precision
// reference, on the CPU backend with OpenBLAS and with the builtin GEMM kernel. Inputs are drawn
// from a fixed seed; backward passes start from random gradients, so what they add is compared
// (the accumulate convention), or, for ops that overwrite, what they leave.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "backend_test_util.h"
#include "op_table.h"

namespace ax::train::optable {
namespace {

using testing::Buffers;

// got within tol · (1 + |want|) of want, infinities equal (NaN never passes); `neg_inf`: whether
// the case forces -inf values, which want must then have (and otherwise not).
void expect_near(const std::vector<double>& got, const std::vector<double>& want, double tol,
                 const std::string& what, bool neg_inf = false) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int64_t bad = 0, infinite = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(want[i])) {
      infinite += want[i] < 0 ? 1 : 0;
      if (got[i] == want[i]) continue;
    }
    const double err = std::abs(got[i] - want[i]), allowed = tol * (1 + std::abs(want[i]));
    if (!(err <= allowed)) {
      if (++bad <= 5) ADD_FAILURE() << what << "[" << i << "]: " << got[i] << " vs " << want[i];
      worst = std::max(worst, err / allowed);
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " elements off; worst error "
                    << worst << " times the tolerance " << tol;
  EXPECT_EQ(infinite > 0, neg_inf) << what << ": " << infinite << " values of -inf";
}

std::vector<double> widen(const std::vector<float>& v) { return {v.begin(), v.end()}; }

using Param = std::tuple<OpCase, bool>;  // the case, and the builtin GEMM kernel

class OpReference : public ::testing::TestWithParam<Param> {};

TEST_P(OpReference, MatchesTheNaiveReference) {
  const auto& [c, builtin] = GetParam();
  auto be = builtin ? testing::make_builtin_gemm_backend(2) : make_cpu_backend(2);
  Buffers buf(*be);
  std::mt19937 rng(1234);
  Host host;
  Env env;
  for (const In& in : c.inputs) {
    if (in.kind == Kind::kI32) {
      host.i[in.name] = in.ids;
      env[in.name] = buf.i32(in.shape, in.ids);
    } else {
      host.f[in.name] = draw(c, in, rng);
      env[in.name] = buf.f32(in.shape, host.f[in.name]);
    }
  }
  for (const Out& out : c.outputs) {
    if (!out.in_place) env[out.name] = buf.f32(out.shape);
    if (!c.backward || !out.projected) continue;
    const std::string d = "d" + out.name;
    host.f[d] = c.dloss != 0 ? std::vector<float>(numel(out.shape), c.dloss)
                             : draw(c, In{.shape = out.shape}, rng);
    env[d] = buf.f32(out.shape, host.f[d]);
  }
  std::map<std::string, std::vector<float>> start;
  for (const In& in : c.inputs) {
    const std::string d = "d" + in.name;
    if (in.grad == Grad::kInPlace) {
      env[d] = env[in.name];
      start[d] = host.f[in.name];
    } else if (in.grad != Grad::kNone) {
      start[d] = draw(c, In{.shape = in.shape, .scale = in.grad_scale}, rng);
      env[d] = buf.f32(in.shape, start[d]);
    }
  }
  const Want want = c.reference(host);
  c.forward(*be, env);
  for (const Out& out : c.outputs) {
    if (out.scratch || !want.count(out.name)) continue;
    expect_near(widen(buf.read(env[out.name])), want.at(out.name), out.tol, out.name, out.neg_inf);
  }
  if (!c.backward) return;
  c.backward(*be, env);
  for (const In& in : c.inputs) {
    const std::string d = "d" + in.name;
    if (in.grad == Grad::kNone || !want.count(d)) continue;
    std::vector<double> got = widen(buf.read(env[d]));
    const bool accumulates = c.dloss == 0 && in.grad != Grad::kInPlace;
    // What backward added (the difference of two floats is exact in double).
    for (size_t i = 0; i < got.size() && accumulates; ++i) got[i] -= start[d][i];
    expect_near(got, want.at(d), in.grad_tol, d);
  }
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  return std::get<0>(info.param).name + (std::get<1>(info.param) ? "_builtin_gemm" : "");
}

INSTANTIATE_TEST_SUITE_P(CpuBackend, OpReference,
                         ::testing::Combine(::testing::ValuesIn(cases_for(kReference)),
                                            ::testing::Bool()),
                         param_name);

}  // namespace
}  // namespace ax::train::optable
