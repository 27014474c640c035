// The CUDA backend at the edges of its sizes and ids, in each dtype plan (cuda_parity.h): target
// ids past the vocabulary, column sums over more row chunks than a grid's y can hold, logits past
// 2^31 elements, and the MFU peak of each plan. All GPU-only: without a GPU every test is skipped.
#include <cstdint>
#include <limits>

#include "cuda_parity.h"

namespace ax::train::parity {
namespace {

class CudaLimitsTest : public ParityTest {
 protected:
  // Columns of the LM head's parameter gradients against sums over all N rows in double:
  // dweight[v, :] = Σ_n dlogits[n, v] · inp[n, :], dbias[v] = Σ_n dlogits[n, v].
  void expect_columns(const std::vector<float>& dlogits, const std::vector<float>& inp,
                      const Tensor& dweight, const Tensor& dbias, int64_t N, int64_t C, int64_t V) {
    const std::vector<int64_t> cols = {0, 1, 65535, 65536, V - 1};
    const int64_t K = static_cast<int64_t>(cols.size());
    std::vector<float> dw_want(K * C), db_want(K);
    for (int64_t j = 0; j < K; ++j) {
      std::vector<double> w(C, 0.0);
      double b = 0;
      for (int64_t n = 0; n < N; ++n) {
        const double g = dlogits[n * V + cols[j]];
        b += g;
        for (int64_t c = 0; c < C; ++c) w[c] += g * inp[n * C + c];
      }
      for (int64_t c = 0; c < C; ++c) dw_want[j * C + c] = static_cast<float>(w[c]);
      db_want[j] = static_cast<float>(b);
    }
    Pair dw = upload({K, C}, kF32, dw_want), db = upload({K}, kF32, db_want);
    for (int64_t j = 0; j < K; ++j) {
      gpu_->copy(rows_of(dw.gpu, j), rows_of(dweight, cols[j]));
      gpu_->copy(rows_of(db.gpu, j), rows_of(dbias, cols[j]));
    }
    expect(dw, "matmul_backward dweight");
    expect(db, "matmul_backward dbias");
  }
};

// Targets reach the GPU cross-entropy unchecked (the CPU backend aborts on them; Model::forward
// checks them on the host). A target >= V used to be read as a column of its row: past the real
// columns, past the padded row, or (INT32_MAX) past the allocation. Now it is never read, and its
// row's loss and gradient are NaN; -1 stays ignored (loss 0, zero gradient).
TEST_P(CudaLimitsTest, CrossEntropyTargetsPastTheVocabulary) {
  const int64_t N = 6, V = 1000, Vp = 1024;
  const std::vector<int32_t> bad = {3,
                                    -1,
                                    static_cast<int32_t>(V),
                                    static_cast<int32_t>(Vp) + 5,
                                    std::numeric_limits<int32_t>::max(),
                                    static_cast<int32_t>(V) - 1};
  std::vector<int32_t> ignored = bad;  // the reference's targets: the invalid ones ignored
  for (int32_t& t : ignored) t = t >= V ? -1 : t;
  Pair logits = random({N, Vp}, act(), 8.0f), losses = zeros({N}, kF32);
  Pair targets = ints({N}, ignored);
  gpu_->copy_from_host(targets.gpu, bad.data());
  ref_->cross_entropy_forward(losses.ref, logits.ref, targets.ref, V, 0);
  gpu_->cross_entropy_forward(losses.gpu, logits.gpu, targets.gpu, V, 0);
  const std::vector<float> want = ref_values(losses), got = gpu_values(losses);
  for (int64_t n = 0; n < N; ++n) {
    if (bad[n] >= V) {
      EXPECT_TRUE(std::isnan(got[n])) << "row " << n << " target " << bad[n] << ": " << got[n];
    } else {
      EXPECT_NEAR(got[n], want[n], 1e-4 * (std::fabs(want[n]) + 1)) << "row " << n;
    }
  }
  EXPECT_EQ(got[1], 0.0f) << "an ignored row";

  Pair dlogits = zeros({N, Vp}, act());
  ref_->cross_entropy_backward(dlogits.ref, logits.ref, targets.ref, V, 0.5f, 0);
  gpu_->cross_entropy_backward(dlogits.gpu, logits.gpu, targets.gpu, V, 0.5f, 0);
  const std::vector<float> dwant = ref_values(dlogits), dgot = gpu_values(dlogits);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t i = 0; i < Vp; ++i) {
      const float g = dgot[n * Vp + i], w = dwant[n * Vp + i];
      if (bad[n] >= V && i < V) {
        ASSERT_TRUE(std::isnan(g)) << "row " << n << " column " << i << ": " << g;
      } else {
        // Valid and ignored rows, and every padded column, as the reference has them.
        ASSERT_NEAR(g, w, 1e-2 * std::fabs(w) + 1e-6) << "row " << n << " column " << i;
      }
    }
  }
}

// N rows make ceil(N / 256) = 65541 chunks of column sums (dbias here; the norms' dweight and
// dbias share the kernel): more than the 65535 a grid's y may have, which the old launch asked
// for, so the op aborted with an invalid configuration. Integer values keep every product and
// sum exact in any order (below 2^24), so the GPU must give exactly the reference's numbers.
TEST_P(CudaLimitsTest, ColumnSumsPastTheGridLimit) {
  const int64_t N = int64_t{65535} * 256 + 1500, C = 8, OC = 8;
  Pair inp = upload({N, C}, act(), small_ints(N * C, 3));
  Pair dout = upload({N, OC}, act(), small_ints(N * OC, 3));
  Pair weight = upload({OC, C}, act(), small_ints(OC * C, 3));
  Pair dinp = zeros({N, C}, act()), dweight = zeros({OC, C}, kF32), dbias = zeros({OC}, kF32);
  ref_->matmul_backward(dinp.ref, dweight.ref, dbias.ref, dout.ref, inp.ref, weight.ref);
  gpu_->matmul_backward(dinp.gpu, dweight.gpu, dbias.gpu, dout.gpu, inp.gpu, weight.gpu);
  expect(dbias, "matmul_backward integers");
  expect(dweight, "matmul_backward integers");
  expect(dinp, "matmul_backward integers");
}

// The LM head of a 128k vocabulary at a 16k-token micro-batch: 16640 × 131072 logits, 2^31 +
// 2^27 elements. Its three GEMMs run in pieces (gemm_split.h), the cross-entropy and the column
// sums index in 64 bits. Rows on both sides of element 2^31 are checked against the reference
// (fed the GPU's own inputs to each op, so each op is checked alone), and columns of dweight and
// dbias against sums over all rows in double. Skips when the GPU lacks the memory (4.4 GB of
// bf16 logits, 8.7 GB in f32).
TEST_P(CudaLimitsTest, LmHeadPast2To31Logits) {
  if (mode().allow_tf32) GTEST_SKIP() << "the f32 plan runs these sizes; TF32 adds nothing";
  const int64_t N = 16640, C = 64, V = 131072;
  ASSERT_GT(N * V, int64_t{1} << 31);
  auto big = try_make(*gpu_, act(), {N, V});
  if (!big.ok()) GTEST_SKIP() << big.status().message();
  const Tensor logits = *big;
  const std::vector<float> inp_v = uniform(N * C, act()), w_v = uniform(V * C, act(), 0.2f);
  const std::vector<int32_t> tgt_v = ids(N, V, 9);
  const Tensor inp = make(*gpu_, act(), {N, C}), targets = make(*gpu_, DType::kI32, {N});
  write(*gpu_, inp, inp_v);
  gpu_->copy_from_host(targets, tgt_v.data());
  Pair weight = upload({V, C}, act(), w_v), bias = random({V}, act());
  gpu_->matmul_forward(logits, inp, weight.gpu, bias.gpu);

  // Rows around element 2^31 (row 16384 starts there) and at both ends.
  const std::vector<int64_t> rows = {0, 1, 8191, 16383, 16384, 16385, N - 2, N - 1};
  const int64_t R = static_cast<int64_t>(rows.size());
  std::vector<float> inp_s;
  std::vector<int32_t> tgt_s;
  for (int64_t r : rows) {
    inp_s.insert(inp_s.end(), inp_v.begin() + r * C, inp_v.begin() + (r + 1) * C);
    tgt_s.push_back(tgt_v[r]);
  }
  Pair in_s = upload({R, C}, act(), inp_s), t_s = ints({R}, tgt_s);
  Pair rows_s = zeros({R, V}, act());
  auto take_gpu_rows = [&](const Tensor& from, Pair& into) {
    for (int64_t i = 0; i < R; ++i) gpu_->copy(rows_of(into.gpu, i), rows_of(from, rows[i]));
  };

  ref_->matmul_forward(rows_s.ref, in_s.ref, weight.ref, bias.ref);
  take_gpu_rows(logits, rows_s);
  expect(rows_s, "matmul_forward");

  Pair losses_s = zeros({R}, kF32);
  const Tensor losses = make(*gpu_, kF32, {N});
  gpu_->cross_entropy_forward(losses, logits, targets, V, 0);
  give_ref_the_gpu(rows_s);  // the GPU's logits rows, so that the cross-entropy is checked alone
  ref_->cross_entropy_forward(losses_s.ref, rows_s.ref, t_s.ref, V, 0);
  take_gpu_rows(losses, losses_s);
  expect(losses_s, "cross_entropy_forward");

  gpu_->cross_entropy_backward(logits, logits, targets, V, 1.0f / N, 0);
  ref_->cross_entropy_backward(rows_s.ref, rows_s.ref, t_s.ref, V, 1.0f / N, 0);
  take_gpu_rows(logits, rows_s);
  expect(rows_s, "cross_entropy_backward");

  const Tensor dinp = make(*gpu_, act(), {N, C});
  Pair dweight = zeros({V, C}, kF32), dbias = zeros({V}, kF32), dinp_s = zeros({R, C}, act());
  gpu_->matmul_backward(dinp, dweight.gpu, dbias.gpu, logits, inp, weight.gpu);
  give_ref_the_gpu(rows_s);
  Pair scratch_dw = zeros({V, C}, kF32);
  ref_->matmul_backward(dinp_s.ref, scratch_dw.ref, Tensor(), rows_s.ref, in_s.ref, weight.ref);
  take_gpu_rows(dinp, dinp_s);
  expect(dinp_s, "matmul_backward dinp");

  expect_columns(read(*gpu_, logits), inp_v, dweight.gpu, dbias.gpu, N, C, V);
}

INSTANTIATE_TEST_SUITE_P(Plans, CudaLimitsTest, ::testing::ValuesIn(kModes),
                         [](const auto& info) { return std::string(info.param.name); });

// MFU is against the peak of the math each plan's GEMMs run: bf16 tensor cores, TF32 tensor
// cores when allowed, else f32 on CUDA cores (several times lower: an f32 run's MFU against the
// bf16 peak would be meaningless).
TEST(CudaPeakTest, EachPlanReportsItsOwnPeak) {
  if (cuda_device_count() == 0) {
    GTEST_SKIP() << "no GPU answered: " << make_cuda_backend(0).status().message();
  }
  auto bf16 = make_cuda_backend(0, {kBF16, false});
  auto f32 = make_cuda_backend(0, {kF32, false});
  auto tf32 = make_cuda_backend(0, {kF32, true});
  ASSERT_TRUE(bf16.ok() && f32.ok() && tf32.ok());
  EXPECT_EQ(make_cuda_backend(0, {DType::kI32, false}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ((*bf16)->compute_dtype(), kBF16);
  EXPECT_EQ((*f32)->compute_dtype(), kF32);
  EXPECT_EQ((*bf16)->name().find("f32"), std::string::npos) << (*bf16)->name();
  EXPECT_NE((*f32)->name().find(", f32 activations"), std::string::npos) << (*f32)->name();
  EXPECT_NE((*tf32)->name().find("TF32 GEMMs"), std::string::npos) << (*tf32)->name();
  std::printf("%s: peak bf16 %.1f, TF32 %.1f, f32 %.1f TFLOP/s\n", (*bf16)->name().c_str(),
              (*bf16)->peak_flops() / 1e12, (*tf32)->peak_flops() / 1e12,
              (*f32)->peak_flops() / 1e12);
  if ((*bf16)->peak_flops() == 0) {
    EXPECT_EQ((*f32)->peak_flops(), 0.0);
    EXPECT_EQ((*tf32)->peak_flops(), 0.0);
    return;
  }
  EXPECT_LT((*f32)->peak_flops(), (*tf32)->peak_flops());
  EXPECT_LT((*tf32)->peak_flops(), (*bf16)->peak_flops());
}

}  // namespace
}  // namespace ax::train::parity
