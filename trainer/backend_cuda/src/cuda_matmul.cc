#include "cuda_matmul.h"

#include <algorithm>

#include "ax/common/check.h"
#include "ax/common/device_check.h"

namespace ax::train::cuda {
namespace {

// 32 MiB: what cuBLAS asks for on Hopper; Ampere needs less.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

// The largest power of two (up to 256) that divides the address: cuBLASLt's heuristic assumes
// 256-byte aligned operands unless told otherwise, and our views start anywhere in an arena.
int alignment_of(const void* p) {
  if (p == nullptr) return 256;
  auto v = reinterpret_cast<uintptr_t>(p);
  int a = 1;
  while (a < 256 && (v & static_cast<uintptr_t>(a)) == 0) a *= 2;
  return a;
}

template <typename T>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& value) {
  AX_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)));
}

cudaDataType_t cuda_type(DType t) { return t == DType::kF32 ? CUDA_R_32F : CUDA_R_16BF; }

template <typename T>
void set_pref(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
              const T& value) {
  AX_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)));
}

}  // namespace

size_t LtMatmul::workspace_bytes() { return kWorkspaceBytes; }

LtMatmul::LtMatmul(bool allow_tf32) : allow_tf32_(allow_tf32) {
  AX_CUBLAS_CHECK(cublasLtCreate(&handle_));
  AX_CUDA_CHECK(cudaMalloc(&workspace_, kWorkspaceBytes));
}

LtMatmul::~LtMatmul() {
  for (auto& [key, plan] : plans_) {
    cublasLtMatrixLayoutDestroy(plan.a);
    cublasLtMatrixLayoutDestroy(plan.b);
    cublasLtMatrixLayoutDestroy(plan.d);
    cublasLtMatmulDescDestroy(plan.desc);
  }
  cudaFree(workspace_);
  cublasLtDestroy(handle_);
}

LtMatmul::Plan& LtMatmul::plan_for(const GemmDesc& g) {
  Key key{g.trans_a,
          g.trans_b,
          g.m,
          g.n,
          g.k,
          g.lda,
          g.ldb,
          g.ldd,
          g.in,
          g.out,
          g.beta != 0,
          g.bias != nullptr,
          alignment_of(g.A),
          alignment_of(g.B),
          alignment_of(g.D),
          alignment_of(g.bias)};
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;

  Plan plan;
  const cudaDataType_t in_type = cuda_type(g.in), d_type = cuda_type(g.out);
  // bf16 inputs accumulate in f32 on tensor cores either way; f32 inputs stay f32 unless TF32
  // was asked for.
  const cublasComputeType_t compute =
      g.in == DType::kF32 && allow_tf32_ ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  AX_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.desc, compute, CUDA_R_32F));
  set_desc(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N);
  set_desc(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N);
  if (g.bias != nullptr) {
    set_desc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
    set_desc(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias);
  }
  // Stored shapes: a transposed operand is stored with its dimensions swapped.
  AX_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.a, in_type, g.trans_a ? g.k : g.m,
                                             g.trans_a ? g.m : g.k, g.lda));
  AX_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.b, in_type, g.trans_b ? g.n : g.k,
                                             g.trans_b ? g.k : g.n, g.ldb));
  AX_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.d, d_type, g.m, g.n, g.ldd));

  cublasLtMatmulPreference_t pref;
  AX_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  set_pref(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, kWorkspaceBytes);
  set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, uint32_t(std::get<12>(key)));
  set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, uint32_t(std::get<13>(key)));
  set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, uint32_t(std::get<14>(key)));
  set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, uint32_t(std::get<14>(key)));
  // Split-K partial sums only in f32: the in-place and output-type schemes add them in the
  // output's dtype, which for a bf16 output rounds every partial sum to bf16 (measured on an
  // H200: 2 to 3 bf16 steps off the f32-summed reference in 4 op-table GEMMs;
  // docs/cuda-backend.md).
  set_pref(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
           uint32_t(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  AX_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.a, plan.b, plan.d, plan.d,
                                                 pref, 1, &result, &found));
  cublasLtMatmulPreferenceDestroy(pref);
  AX_CHECK(found > 0) << "cuBLASLt has no algorithm for a GEMM of " << dtype_name(g.in) << " into "
                      << dtype_name(g.out) << " m=" << g.m << " n=" << g.n << " k=" << g.k
                      << " lda=" << g.lda << " ldb=" << g.ldb << " ldd=" << g.ldd
                      << (g.bias ? " with bias" : "");
  plan.algo = result.algo;
  return plans_.emplace(key, plan).first->second;
}

void LtMatmul::run(const GemmDesc& g, cudaStream_t stream) {
  if (g.m == 0 || g.n == 0) return;
  if (g.k == 0) {
    // An empty sum (cuBLASLt rejects k = 0): D = beta · D, and our callers pass beta 0 or 1.
    AX_CHECK(g.bias == nullptr && g.ldd == g.m) << "empty GEMM with a bias or strided output";
    if (g.beta == 0) {
      AX_CUDA_CHECK(cudaMemsetAsync(g.D, 0, g.m * g.n * dtype_size(g.out), stream));
    }
    return;
  }
  const GemmSpans spans = gemm_spans(g);
  if (std::max({spans.a, spans.b, spans.d}) <= kMaxGemmSpan) {
    run_piece(g, stream);
    return;
  }
  for (const GemmDesc& piece : split_gemm(g)) run_piece(piece, stream);
}

void LtMatmul::run_piece(const GemmDesc& g, cudaStream_t stream) {
  Plan& plan = plan_for(g);
  if (g.bias != nullptr) set_desc(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias);
  const float alpha = 1.0f;
  AX_CUBLAS_CHECK(cublasLtMatmul(handle_, plan.desc, &alpha, g.A, plan.a, g.B, plan.b, &g.beta, g.D,
                                 plan.d, g.D, plan.d, &plan.algo, workspace_, kWorkspaceBytes,
                                 stream));
}

}  // namespace ax::train::cuda
