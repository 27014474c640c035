// The CUDA backend's GEMM descriptor (cuBLAS's column-major terms) and its split into pieces
// whose operands each span fewer than 2^31 elements. cuBLASLt's layouts take 64-bit sizes, but
// its documentation does not promise that every kernel its heuristic picks indexes in 64 bits,
// and the LM head reaches that size (vocabulary 128k × 16k tokens is 2^31 logits), so no GEMM
// of ours hands cuBLASLt an operand that large. Pure host arithmetic without CUDA headers, so
// the split is unit-tested in every build (tests/trainer/backend/gemm_split_test.cc).
#pragma once

#include <cstdint>
#include <vector>

#include "ax/trainer/backend/tensor.h"

namespace ax::train::cuda {

// D = op(A) · op(B) + beta · D (+ bias): D is m × n (leading dimension ldd), op(A) m × k,
// op(B) k × n; a transposed operand is stored k × m (or n × k). A and B are `in` (bf16 or
// f32), D and the bias `out`.
struct GemmDesc {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  const void* A = nullptr;
  int64_t lda = 0;
  const void* B = nullptr;
  int64_t ldb = 0;
  void* D = nullptr;
  int64_t ldd = 0;
  DType in = DType::kBF16;
  DType out = DType::kBF16;
  float beta = 0;
  const void* bias = nullptr;  // m values added to every column of D, or null
};

// Elements from an operand's first to its last: (cols - 1) · ld + rows of the stored matrix.
struct GemmSpans {
  int64_t a, b, d;
};
GemmSpans gemm_spans(const GemmDesc& g);

// The most elements one operand of one cuBLASLt call may span.
inline constexpr int64_t kMaxGemmSpan = (int64_t{1} << 31) - 1;

// The GEMMs to run, in order, for `g`: g itself when every operand spans at most `max_span`
// elements, else the pieces of g halved (recursively) along the dimension that indexes the
// columns of the operand too large: n for D, m or k for A, k or n for B. Pieces along m or n
// cover disjoint parts of D; pieces along k accumulate into D, the first with g's beta and
// bias, the others with beta 1 and no bias. Aborts when a single column is too long.
std::vector<GemmDesc> split_gemm(const GemmDesc& g, int64_t max_span = kMaxGemmSpan);

}  // namespace ax::train::cuda
