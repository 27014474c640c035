// The op table's parity driver (op_table.h): every case on the CUDA backend against the CPU
// backend, in each dtype plan (cuda_parity.h: the modes, and kOutputs, how each output is compared
// and why). Both sides get the same input bits (fresh values each run; the seed is printed; ids
// as the case has them). The backward pass starts from random gradients (accumulation is
// checked) and from the reference's forward outputs and saved statistics on both sides, so each
// op is checked alone; cases marked same_bits_twice run the GPU's backward pass again from the
// same starting gradients and must give the same bits. Without a GPU every test is skipped.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <tuple>

#include "cuda_parity.h"
#include "op_table.h"

namespace ax::train::parity {
namespace {

using optable::Grad;
using optable::In;
using optable::Kind;
using optable::OpCase;
using optable::Out;

using Param = std::tuple<Mode, OpCase>;

class OpTableParity : public ::testing::TestWithParam<Param>, protected ParityHarness {
 protected:
  void SetUp() override {
    if (!start()) GTEST_SKIP() << skip_reason_;
  }
  void TearDown() override { finish(); }
  const Mode& mode() const override { return std::get<0>(GetParam()); }

  DType dtype(Kind k) const {
    return k == Kind::kAct ? act() : k == Kind::kF32 ? kF32 : DType::kI32;
  }
  Pair draw(const OpCase& c, const std::vector<int64_t>& shape, Kind k, float scale) {
    return upload(shape, dtype(k), optable::draw(c, In{.shape = shape, .scale = scale}, rng_));
  }
  void envs(optable::Env& ref, optable::Env& gpu) const {
    for (const auto& [name, p] : pairs_) ref[name] = p.ref, gpu[name] = p.gpu;
  }
  // Gradient names the backward pass accumulates into (not in place).
  std::vector<std::string> accumulated(const OpCase& c) const {
    std::vector<std::string> names;
    for (const In& in : c.inputs) {
      if (in.grad == Grad::kAct || in.grad == Grad::kF32) names.push_back("d" + in.name);
    }
    return names;
  }
  void check_second_run(const OpCase& c, const std::vector<std::vector<float>>& start);
  void expect_tensor_cores_ran(const OpCase& c, optable::Env& gpu);
  std::optional<GemmParts> gemm_parts(const OpCase& c, const std::string& name,
                                      const std::vector<float>* start);

  std::map<std::string, Pair> pairs_;
};

// The GPU's backward pass again from the same starting gradients: the same bits.
void OpTableParity::check_second_run(const OpCase& c,
                                     const std::vector<std::vector<float>>& start) {
  const std::vector<std::string> names = accumulated(c);
  std::vector<std::vector<float>> first;
  for (size_t i = 0; i < names.size(); ++i) {
    first.push_back(gpu_values(pairs_[names[i]]));
    write(*gpu_, pairs_[names[i]].gpu, start[i]);
  }
  optable::Env ref, gpu;
  envs(ref, gpu);
  c.backward(*gpu_, gpu);
  for (size_t i = 0; i < names.size(); ++i) {
    const std::vector<float> again = gpu_values(pairs_[names[i]]);
    EXPECT_TRUE(again.size() == first[i].size() &&
                std::memcmp(again.data(), first[i].data(), again.size() * sizeof(float)) == 0)
        << names[i] << " differs between two runs of the same backward pass";
  }
}

// The f64 parts (GemmParts, cuda_parity.h) of output `name` of a matmul case (the op table's
// GEMMs), from the operands as the GPU holds them and the case's reference: "out" is the product
// inp · weightᵀ, plus the bias when the forward pass adds one; "dinp" and "dweight" are the
// backward pass's products, added to their starting values `start`.
std::optional<GemmParts> OpTableParity::gemm_parts(const OpCase& c, const std::string& name,
                                                   const std::vector<float>* start) {
  if (!c.reference || c.name.rfind("matmul", 0) != 0) return std::nullopt;
  optable::Host h;
  for (const In& in : c.inputs) {
    if (in.kind == Kind::kI32) return std::nullopt;
    h.f[in.name] = gpu_values(pairs_[in.name]);
  }
  for (const Out& out : c.outputs) {
    const std::string d = "d" + out.name;
    h.f[d] = pairs_.count(d) > 0
                 ? gpu_values(pairs_[d])
                 : std::vector<float>(static_cast<size_t>(optable::numel(out.shape)), 0.0f);
  }
  GemmParts parts;
  if (name == "out") {
    optable::Host no_bias = h;
    if (h.has("bias")) std::fill(no_bias.f["bias"].begin(), no_bias.f["bias"].end(), 0.0f);
    const optable::Want product = c.reference(no_bias);
    if (product.count("out") == 0) return std::nullopt;
    parts.acc = product.at("out");
    if (h.has("bias") && c.reference(h).at("out") != parts.acc) {  // the forward pass adds it
      const std::vector<float>& bias = h["bias"];
      parts.addend.resize(parts.acc.size());
      for (size_t i = 0; i < parts.addend.size(); ++i) parts.addend[i] = bias[i % bias.size()];
    }
    return parts;
  }
  const optable::Want want = c.reference(h);
  if (want.count(name) == 0) return std::nullopt;
  parts.acc = want.at(name);
  if (start != nullptr) parts.addend.assign(start->begin(), start->end());
  return parts;
}

// A case made for the tensor-core attention kernels (`_tc`, op_table_attention.cc): the forward
// pass again on the same device tensors by a backend with them off gives other bits, so the
// kernels took the case on this device (a call they refuse runs the CUDA-core kernels quietly,
// and the bf16 plan's looser attention tolerance would then test nothing new).
void OpTableParity::expect_tensor_cores_ran(const OpCase& c, optable::Env& gpu) {
  const char* forced = std::getenv("AX_CUDA_ATTENTION");
  if (forced != nullptr && std::string(forced) == "cuda-cores") {
    std::printf("%s: AX_CUDA_ATTENTION=cuda-cores: the tensor-core kernels are off\n",
                c.name.c_str());
    return;
  }
  auto cuda_cores = make_cuda_backend(0, {kBF16, false, false});
  ASSERT_TRUE(cuda_cores.ok()) << cuda_cores.status().to_string();
  const std::vector<float> tensor_cores = gpu_values(pairs_["out"]);
  c.forward(**cuda_cores, gpu);
  (*cuda_cores)->synchronize();
  const std::vector<float> other = gpu_values(pairs_["out"]);
  EXPECT_NE(std::memcmp(tensor_cores.data(), other.data(), other.size() * sizeof(float)), 0)
      << c.name << ": the same bits with the tensor-core attention kernels off: they did not "
      << "take the case on this device";
}

TEST_P(OpTableParity, MatchesTheCpuBackend) {
  const OpCase& c = std::get<1>(GetParam());
  for (const In& in : c.inputs) {
    pairs_[in.name] = in.kind == Kind::kI32
                          ? ints(in.shape, in.ids)
                          : upload(in.shape, dtype(in.kind), optable::draw(c, in, rng_));
  }
  for (const Out& out : c.outputs) {
    if (!out.in_place) pairs_[out.name] = zeros(out.shape, dtype(out.kind));
  }
  optable::Env ref, gpu;
  envs(ref, gpu);
  c.forward(*ref_, ref);
  c.forward(*gpu_, gpu);
  for (const Out& out : c.outputs) {
    if (out.scratch || out.parity.empty()) continue;
    expect(pairs_[out.name], out.parity, [&] { return gemm_parts(c, out.name, nullptr); });
    const std::vector<float> want = ref_values(pairs_[out.name]);
    EXPECT_EQ(std::count(want.begin(), want.end(), -INFINITY) > 0, out.neg_inf)
        << out.name << ": the case has -inf values exactly when it forces some";
  }
  if (c.name.ends_with("_tc") && mode().act == kBF16 && mode().tensor_core_attention) {
    expect_tensor_cores_ran(c, gpu);
  }
  if (!c.backward) return;
  for (const Out& out : c.outputs) {
    if (!out.in_place && !out.scratch) give_gpu_the_ref(pairs_[out.name]);
    if (!out.projected) continue;
    pairs_["d" + out.name] = c.dloss != 0
                                 ? upload(out.shape, dtype(out.dkind),
                                          std::vector<float>(optable::numel(out.shape), c.dloss))
                                 : draw(c, out.shape, out.dkind, 1);
  }
  for (const In& in : c.inputs) {
    if (in.grad == Grad::kInPlace) pairs_["d" + in.name] = pairs_[in.name];
    if (in.grad == Grad::kAct || in.grad == Grad::kF32) {
      pairs_["d" + in.name] =
          draw(c, in.shape, in.grad == Grad::kAct ? Kind::kAct : Kind::kF32, in.grad_scale);
    }
  }
  std::vector<std::vector<float>> start;
  const std::vector<std::string> names = accumulated(c);
  for (const std::string& name : names) start.push_back(gpu_values(pairs_[name]));
  envs(ref, gpu);
  c.backward(*ref_, ref);
  c.backward(*gpu_, gpu);
  for (const In& in : c.inputs) {
    if (in.grad == Grad::kNone) continue;
    const std::string d = "d" + in.name;
    const auto at = std::find(names.begin(), names.end(), d);
    const std::vector<float>* from = at == names.end() ? nullptr : &start[at - names.begin()];
    expect(pairs_[d], in.grad_parity, [&, d, from] { return gemm_parts(c, d, from); });
  }
  if (c.same_bits_twice) check_second_run(c, start);
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  return std::get<1>(info.param).name + "_" + std::get<0>(info.param).name;
}

INSTANTIATE_TEST_SUITE_P(
    Plans, OpTableParity,
    ::testing::Combine(::testing::ValuesIn(kModes),
                       ::testing::ValuesIn(optable::cases_for(optable::kParity))),
    param_name);

// The attention cases again in the bf16 plan with the tensor-core kernels off: the f32
// CUDA-core kernels, which run every call the tensor-core kernels do not take.
std::vector<OpCase> attention_cases() {
  std::vector<OpCase> cases;
  for (const OpCase& c : optable::cases_for(optable::kParity)) {
    if (c.name.rfind("attention", 0) == 0) cases.push_back(c);
  }
  return cases;
}
INSTANTIATE_TEST_SUITE_P(CudaCoreAttention, OpTableParity,
                         ::testing::Combine(::testing::Values(kCudaCoreAttention),
                                            ::testing::ValuesIn(attention_cases())),
                         param_name);

}  // namespace
}  // namespace ax::train::parity
