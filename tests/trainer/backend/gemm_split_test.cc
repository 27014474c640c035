// The CUDA backend's GEMM split (trainer/backend_cuda/src/gemm_split.h), run on the host: every
// piece's operands fit the span limit, and the pieces, executed in order by a reference GEMM in
// cuBLAS's column-major terms, give exactly what the whole GEMM gives (small integer values, so
// the sums are exact whatever their order).
#include "gemm_split.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace ax::train::cuda {
namespace {

// D = op(A)·op(B) + beta·D (+ bias), f32, as cuBLASLt defines it.
void reference_gemm(const GemmDesc& g) {
  const auto* A = static_cast<const float*>(g.A);
  const auto* B = static_cast<const float*>(g.B);
  const auto* bias = static_cast<const float*>(g.bias);
  auto* D = static_cast<float*>(g.D);
  for (int64_t j = 0; j < g.n; ++j) {
    for (int64_t i = 0; i < g.m; ++i) {
      float acc = 0;
      for (int64_t p = 0; p < g.k; ++p) {
        const float a = g.trans_a ? A[p + i * g.lda] : A[i + p * g.lda];
        const float b = g.trans_b ? B[j + p * g.ldb] : B[p + j * g.ldb];
        acc += a * b;
      }
      float& d = D[i + j * g.ldd];
      d = acc + g.beta * d + (bias != nullptr ? bias[i] : 0.0f);
    }
  }
}

std::vector<float> small_ints(std::mt19937& rng, int64_t n) {
  std::uniform_int_distribution<int> dist(-3, 3);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = static_cast<float>(dist(rng));
  return v;
}

struct Case {
  bool trans_a, trans_b;
  int64_t m, n, k;
  float beta;
  bool bias;
};

// Leading dimensions one larger than needed, so that strides are exercised.
int64_t lda_of(const Case& c) { return (c.trans_a ? c.k : c.m) + 1; }
int64_t ldb_of(const Case& c) { return (c.trans_b ? c.n : c.k) + 1; }
int64_t ldd_of(const Case& c) { return c.m + 1; }

void check_split(const Case& c, int64_t max_span) {
  SCOPED_TRACE(::testing::Message() << "ta=" << c.trans_a << " tb=" << c.trans_b << " m=" << c.m
                                    << " n=" << c.n << " k=" << c.k << " beta=" << c.beta
                                    << " bias=" << c.bias << " max_span=" << max_span);
  std::mt19937 rng(7);
  const int64_t lda = lda_of(c), ldb = ldb_of(c), ldd = ldd_of(c);
  std::vector<float> A = small_ints(rng, lda * (c.trans_a ? c.m : c.k));
  std::vector<float> B = small_ints(rng, ldb * (c.trans_b ? c.k : c.n));
  std::vector<float> bias = small_ints(rng, c.m), D0 = small_ints(rng, ldd * c.n);
  std::vector<float> whole = D0, split = D0;
  GemmDesc g;
  g.trans_a = c.trans_a;
  g.trans_b = c.trans_b;
  g.m = c.m;
  g.n = c.n;
  g.k = c.k;
  g.A = A.data();
  g.lda = lda;
  g.B = B.data();
  g.ldb = ldb;
  g.ldd = ldd;
  g.in = g.out = DType::kF32;
  g.beta = c.beta;
  g.bias = c.bias ? bias.data() : nullptr;
  g.D = whole.data();
  reference_gemm(g);

  g.D = split.data();
  std::vector<GemmDesc> pieces = split_gemm(g, max_span);
  const GemmSpans all = gemm_spans(g);
  if (std::max({all.a, all.b, all.d}) > max_span) {
    EXPECT_GT(pieces.size(), 1u);
  } else {
    EXPECT_EQ(pieces.size(), 1u);
  }
  for (const GemmDesc& piece : pieces) {
    const GemmSpans s = gemm_spans(piece);
    EXPECT_LE(std::max({s.a, s.b, s.d}), max_span);
    reference_gemm(piece);
  }
  EXPECT_EQ(split, whole);
}

TEST(GemmSplitTest, PiecesFitAndAddUpToTheWholeGemm) {
  // The backend's three GEMMs: forward (A = Wᵀ), dinp (beta 1), dweight (Bᵀ, beta 1).
  const Case cases[] = {
      {true, false, 13, 9, 5, 0, true},  {false, false, 5, 9, 13, 1, false},
      {false, true, 5, 13, 9, 1, false}, {true, true, 7, 6, 11, 0.5f, true},
      {false, false, 1, 1, 1, 0, false}, {true, false, 17, 1, 3, 0, true},
  };
  for (const Case& c : cases) {
    // Down to the longest leading dimension: one column of every operand always fits.
    const int64_t ld = std::max({lda_of(c), ldb_of(c), ldd_of(c)});
    for (int64_t max_span : {int64_t{1000}, 5 * ld, 3 * ld, 2 * ld, ld}) check_split(c, max_span);
  }
}

// Vocabulary 131072 × 16640 tokens × width 4096: the LM head's logits are 2^31 + 2^27 elements,
// so each of its three GEMMs runs in pieces that fit, and the others run whole.
TEST(GemmSplitTest, LmHeadPast2To31Elements) {
  const int64_t N = 16640, C = 4096, V = 131072;
  auto fake = reinterpret_cast<void*>(uintptr_t{1} << 40);
  GemmDesc fwd{true, false, V, N, C, fake, C, fake, C, fake, V};
  GemmDesc dinp{false, false, C, N, V, fake, C, fake, V, fake, C};
  dinp.beta = 1;
  GemmDesc dweight{false, true, C, V, N, fake, C, fake, V, fake, C};
  dweight.out = DType::kF32;
  dweight.beta = 1;
  for (const GemmDesc& g : {fwd, dinp, dweight}) {
    const GemmSpans s = gemm_spans(g);
    ASSERT_GT(std::max({s.a, s.b, s.d}), kMaxGemmSpan);
    std::vector<GemmDesc> pieces = split_gemm(g);
    EXPECT_EQ(pieces.size(), 2u);
    int64_t m = 0, n = 0, k = 0;
    for (const GemmDesc& p : pieces) {
      const GemmSpans ps = gemm_spans(p);
      EXPECT_LE(std::max({ps.a, ps.b, ps.d}), kMaxGemmSpan);
      m = std::max(m, p.m);
      n += p.n == g.n ? 0 : p.n;
      k += p.k == g.k ? 0 : p.k;
    }
    EXPECT_EQ(m, g.m);
    EXPECT_TRUE(n == g.n || k == g.k) << "split along n or k, covering all of it";
  }
  // The transformer's own GEMMs at that batch never split.
  GemmDesc mlp{true, false, 4 * C, N, C, fake, C, fake, C, fake, 4 * C};
  EXPECT_EQ(split_gemm(mlp).size(), 1u);
}

}  // namespace
}  // namespace ax::train::cuda
