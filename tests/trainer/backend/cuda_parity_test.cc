// The CUDA backend against the CPU backend in each dtype plan (cuda_parity.h) where a check is not
// one op case of the op table (those run in cuda_op_table_test.cc): casts and copies with their
// special values, the RoPE table reused for shorter sequences, and Σx². Without a GPU every test
// is skipped.
#include "cuda_parity.h"

#include <limits>
#include <random>
#include <string>
#include <vector>

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
    ref_->rope_forward(out.ref, inp.ref, NH, KVH, {.theta = 10000}, 0);
    gpu_->rope_forward(out.gpu, inp.gpu, NH, KVH, {.theta = 10000}, 0);
    expect(out, "rope_forward");
    Pair dinp = random({2, T, R}, act());
    ref_->rope_backward(dinp.ref, inp.ref, NH, KVH, {.theta = 10000}, 0);
    gpu_->rope_backward(dinp.gpu, inp.gpu, NH, KVH, {.theta = 10000}, 0);
    expect(dinp, "rope_backward");
  }
}

// One backend's RoPE table across head sizes, thetas and first positions (decoding reads rows
// from a position on; a new head size or theta rebuilds the table in the buffer a larger one left).
// Llama 3.1's scaling changes the table at the same HD and theta, and its factor does again.
TEST_P(CudaParityTest, RopeTableAcrossHeadSizesThetasAndPositions) {
  struct Call {
    int64_t HD;
    RopeSpec rope;
    int64_t T, position;
  };
  const RopeSpec llama3{.theta = 1e4,
                        .scaling = RopeSpec::Scaling::kLlama3,
                        .factor = 8,
                        .low_freq_factor = 1,
                        .high_freq_factor = 4,
                        .original_max_positions = 64};
  RopeSpec llama3_x2 = llama3;
  llama3_x2.factor = 16;
  const int NH = 2, KVH = 1;
  for (const Call& c : {Call{16, {.theta = 1e4}, 40, 0}, Call{8, {.theta = 1e4}, 3, 7},
                        Call{8, {.theta = 5e5}, 3, 7}, Call{16, {.theta = 1e4}, 1, 100},
                        Call{16, {.theta = 1e4}, 200, 5}, Call{16, llama3, 200, 5},
                        Call{16, llama3_x2, 40, 0}, Call{16, llama3, 1, 300}}) {
    SCOPED_TRACE(testing::Message()
                 << "HD=" << c.HD << " theta=" << c.rope.theta
                 << " scaling=" << (c.rope.scaling == RopeSpec::Scaling::kLlama3)
                 << " factor=" << c.rope.factor << " T=" << c.T << " position=" << c.position);
    const int64_t R = (NH + 2 * KVH) * c.HD;
    Pair inp = random({2, c.T, R}, act()), out = zeros({2, c.T, R}, act());
    ref_->rope_forward(out.ref, inp.ref, NH, KVH, c.rope, c.position);
    gpu_->rope_forward(out.gpu, inp.gpu, NH, KVH, c.rope, c.position);
    expect(out, "rope_forward");
    Pair dinp = random({2, c.T, R}, act());
    ref_->rope_backward(dinp.ref, inp.ref, NH, KVH, c.rope, c.position);
    gpu_->rope_backward(dinp.gpu, inp.gpu, NH, KVH, c.rope, c.position);
    expect(dinp, "rope_backward");
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

INSTANTIATE_TEST_SUITE_P(Plans, CudaParityTest, ::testing::ValuesIn(kModes),
                         [](const auto& info) { return std::string(info.param.name); });

// gemm_diagnosis (no GPU needed): products on a 2^-12 grid (|acc| <= 4) and bf16 addends of
// -0.9 of them, so every sum below is exact in f32 and the output is a tenth of the product;
// one side rounds the sum once, the other rounds the product to bf16 before adding.
TEST(GemmDiagnosisTest, NamesTheSideOffAndHowItRounded) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> k(-16384, 16384);
  const auto bf16 = [](float x) { return f32_from_bf16(bf16_from_f32(x)); };
  GemmParts parts;
  std::vector<float> once, early;
  for (int i = 0; i < 200; ++i) {
    const float acc = static_cast<float>(k(rng)) / 4096.0f;
    const float addend = bf16(-0.9f * acc);
    parts.acc.push_back(acc);
    parts.addend.push_back(addend);
    once.push_back(bf16(acc + addend));
    early.push_back(bf16(bf16(acc) + addend));
  }
  const std::string gpu_off = gemm_diagnosis(kBF16, early, once, parts, 3);
  EXPECT_NE(gpu_off.find("so: the GPU is off; the CPU reference is within one step"),
            std::string::npos)
      << gpu_off;
  EXPECT_NE(gpu_off.find("a product rounded to bf16 before the addend"), std::string::npos)
      << gpu_off;
  EXPECT_NE(gpu_off.find("reference: 0 of 200 more than one step"), std::string::npos) << gpu_off;
  EXPECT_NE(gpu_off.find("first [3]: f64 "), std::string::npos) << gpu_off;
  EXPECT_NE(gpu_off.find("the product rounded before the addend (then the sum) in 200"),
            std::string::npos)
      << gpu_off;

  const std::string ref_off = gemm_diagnosis(kBF16, once, early, parts, 0);
  EXPECT_NE(ref_off.find("so: the CPU reference is off; the GPU is within one step"),
            std::string::npos)
      << ref_off;
  EXPECT_EQ(ref_off.find("the GPU's values are"), std::string::npos) << ref_off;

  const std::string both_right = gemm_diagnosis(kBF16, once, once, parts, -1);
  EXPECT_NE(both_right.find("so: both are within one step everywhere"), std::string::npos)
      << both_right;
  EXPECT_EQ(both_right.find("first ["), std::string::npos) << both_right;

  parts.addend.pop_back();
  EXPECT_NE(gemm_diagnosis(kBF16, once, once, parts, 0).find("not made"), std::string::npos);
}

}  // namespace
}  // namespace ax::train::parity
