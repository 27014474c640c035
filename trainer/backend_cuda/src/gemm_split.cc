#include "gemm_split.h"

#include <utility>

#include "ax/common/check.h"

namespace ax::train::cuda {
namespace {

int64_t span(int64_t rows, int64_t cols, int64_t ld) {
  return rows == 0 || cols == 0 ? 0 : (cols - 1) * ld + rows;
}

// p moved on by `elements` elements of `dtype` (null stays null).
template <typename P>
P advance(P p, int64_t elements, DType dtype) {
  if (p == nullptr) return p;
  const auto bytes = static_cast<uintptr_t>(elements) * dtype_size(dtype);
  return reinterpret_cast<P>(reinterpret_cast<uintptr_t>(p) + bytes);
}

enum class Dim { kNone, kM, kN, kK };

// The dimension that indexes the columns of the first operand that spans too much.
Dim too_long(const GemmDesc& g, int64_t max_span) {
  const GemmSpans s = gemm_spans(g);
  if (s.d > max_span) return Dim::kN;
  if (s.a > max_span) return g.trans_a ? Dim::kM : Dim::kK;
  if (s.b > max_span) return g.trans_b ? Dim::kK : Dim::kN;
  return Dim::kNone;
}

// g cut along `dim` into its first half and the rest.
std::pair<GemmDesc, GemmDesc> halves(const GemmDesc& g, Dim dim) {
  GemmDesc lo = g, hi = g;
  if (dim == Dim::kM) {
    const int64_t h = g.m / 2;
    lo.m = h;
    hi.m = g.m - h;
    hi.A = advance(g.A, g.trans_a ? h * g.lda : h, g.in);
    hi.D = advance(g.D, h, g.out);
    hi.bias = advance(g.bias, h, g.out);
  } else if (dim == Dim::kN) {
    const int64_t h = g.n / 2;
    lo.n = h;
    hi.n = g.n - h;
    hi.B = advance(g.B, g.trans_b ? h : h * g.ldb, g.in);
    hi.D = advance(g.D, h * g.ldd, g.out);
  } else {
    const int64_t h = g.k / 2;
    lo.k = h;
    hi.k = g.k - h;
    hi.A = advance(g.A, g.trans_a ? h : h * g.lda, g.in);
    hi.B = advance(g.B, g.trans_b ? h * g.ldb : h, g.in);
    hi.beta = 1;  // adds to what the first half wrote
    hi.bias = nullptr;
  }
  return {lo, hi};
}

void split_into(const GemmDesc& g, int64_t max_span, std::vector<GemmDesc>* pieces) {
  const Dim dim = too_long(g, max_span);
  if (dim == Dim::kNone) {
    pieces->push_back(g);
    return;
  }
  const int64_t size = dim == Dim::kM ? g.m : dim == Dim::kN ? g.n : g.k;
  AX_CHECK(size >= 2) << "GEMM m=" << g.m << " n=" << g.n << " k=" << g.k << " lda=" << g.lda
                      << " ldb=" << g.ldb << " ldd=" << g.ldd << ": one column spans more than "
                      << max_span << " elements";
  auto [lo, hi] = halves(g, dim);
  split_into(lo, max_span, pieces);
  split_into(hi, max_span, pieces);
}

}  // namespace

GemmSpans gemm_spans(const GemmDesc& g) {
  return {span(g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k, g.lda),
          span(g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n, g.ldb), span(g.m, g.n, g.ldd)};
}

std::vector<GemmDesc> split_gemm(const GemmDesc& g, int64_t max_span) {
  std::vector<GemmDesc> pieces;
  split_into(g, max_span, &pieces);
  return pieces;
}

}  // namespace ax::train::cuda
