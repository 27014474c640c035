#include "cuda_matmul.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "ax/common/check.h"
#include "ax/common/device_check.h"
#include "ax/common/env.h"
#include "ax/common/strings.h"

namespace ax::train::cuda {
namespace {

// 32 MiB: what cuBLAS asks for on Hopper; Ampere needs less.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

// Algorithms asked of the heuristic per plan: enough to find one without split-K among them.
constexpr int kHeuristicResults = 8;

const EnvKnob<bool> kGemmLog(
    "AX_CUDA_GEMM_LOG", false,
    "CUDA backend: print each cuBLASLt GEMM plan when it is made (shape, dtypes, bias, beta, "
    "alignments, the algorithm's configuration and the heuristic's other candidates) to stderr");
const EnvKnob<std::string> kGemmSplitK(
    "AX_CUDA_GEMM_SPLIT_K", "not-for-bf16",
    "CUDA backend: 'not-for-bf16' (a bf16 output takes the heuristic's first algorithm that does "
    "not split K) or 'heuristic' (its first algorithm, split-K or not)",
    {"not-for-bf16", "heuristic"});

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

// An algorithm's configuration attribute (0 when this cuBLASLt does not answer for it).
template <typename T>
T algo_config(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
  T value{};
  size_t written = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &value, sizeof(value), &written) !=
      CUBLAS_STATUS_SUCCESS) {
    return T{};
  }
  return value;
}

int split_k_of(const cublasLtMatmulAlgo_t& algo) {
  return algo_config<int32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM);
}

const char* reduction_name(uint32_t scheme) {
  switch (scheme) {
    case CUBLASLT_REDUCTION_SCHEME_NONE:
      return "none";
    case CUBLASLT_REDUCTION_SCHEME_INPLACE:
      return "inplace";
    case CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE:
      return "compute-type";
    case CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE:
      return "output-type";
    default:
      return "?";
  }
}

// One candidate of the heuristic, as AX_CUDA_GEMM_LOG prints it.
std::string describe_algo(const cublasLtMatmulHeuristicResult_t& r) {
  const cublasLtMatmulAlgo_t& a = r.algo;
  uint64_t numerics = 0;
  size_t written = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&a, CUBLASLT_ALGO_CAP_NUMERICAL_IMPL_FLAGS, &numerics,
                                        sizeof(numerics), &written) != CUBLAS_STATUS_SUCCESS) {
    numerics = 0;
  }
  char flags[32];
  std::snprintf(flags, sizeof flags, "0x%llx", static_cast<unsigned long long>(numerics));
  const uint32_t reduction = algo_config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME);
  return str_cat("id=", algo_config<int32_t>(a, CUBLASLT_ALGO_CONFIG_ID),
                 " tile=", algo_config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_TILE_ID),
                 " stages=", algo_config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_STAGES_ID),
                 " splitK=", split_k_of(a), " reduction=", reduction_name(reduction),
                 " swizzle=", algo_config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING),
                 " custom=", algo_config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION),
                 " inner=", algo_config<uint16_t>(a, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID),
                 " cluster=", algo_config<uint16_t>(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID),
                 " numerics=", flags, " waves=", r.wavesCount, " workspace=", r.workspaceSize);
}

}  // namespace

StatusOr<LtMatmul::EnvOptions> LtMatmul::env_options() {
  EnvOptions o;
  AX_ASSIGN_OR_RETURN(o.log, kGemmLog.get());
  AX_ASSIGN_OR_RETURN(std::string split_k, kGemmSplitK.get());
  o.bf16_without_split_k = split_k == "not-for-bf16";
  return o;
}

size_t LtMatmul::workspace_bytes() { return kWorkspaceBytes; }

LtMatmul::LtMatmul(bool allow_tf32, EnvOptions env) : allow_tf32_(allow_tf32), env_(env) {
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
  // output's dtype, which for a bf16 output rounds every partial sum to bf16. (Set after 4
  // op-table GEMMs were 2 to 3 bf16 steps off the CPU on an H200; the same 4 failed with it, so
  // that was not the whole cause: see the choice of algorithm below.)
  set_pref(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
           uint32_t(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE));
  cublasLtMatmulHeuristicResult_t results[kHeuristicResults] = {};
  int found = 0;
  AX_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.a, plan.b, plan.d, plan.d,
                                                 pref, kHeuristicResults, results, &found));
  cublasLtMatmulPreferenceDestroy(pref);
  AX_CHECK(found > 0) << "cuBLASLt has no algorithm for a GEMM of " << dtype_name(g.in) << " into "
                      << dtype_name(g.out) << " m=" << g.m << " n=" << g.n << " k=" << g.k
                      << " lda=" << g.lda << " ldb=" << g.ldb << " ldd=" << g.ldd
                      << (g.bias ? " with bias" : "");
  // A bf16 output takes the heuristic's first algorithm that keeps K whole (as TransformerEngine
  // does since its PR #3440, after split-K partials kept in bf16 on L40). The 4 op-table GEMMs
  // that failed parity on an H200 (twice, the second time with the f32 reduction above) all add
  // something to the product (the bias, or the old values with beta 1), and as many of their
  // elements were off as a GEMM that rounds the product to bf16 before that addition would put
  // off, while 15 others with such an addition passed: something the algorithms chosen for those
  // shapes do, split-K or not. AX_CUDA_GEMM_LOG and the parity harness's f64 check are to say
  // (docs/cuda-backend.md "GEMMs"); AX_CUDA_GEMM_SPLIT_K=heuristic turns this choice off.
  int chosen = 0;
  const bool avoid_split_k = g.out == DType::kBF16 && env_.bf16_without_split_k;
  if (avoid_split_k) {
    for (int i = 0; i < found; ++i) {
      if (results[i].state == CUBLAS_STATUS_SUCCESS && split_k_of(results[i].algo) <= 1) {
        chosen = i;
        break;
      }
    }
  }
  plan.algo = results[chosen].algo;
  if (env_.log) {
    std::string line = str_cat(
        "cuda gemm plan: m=", g.m, " n=", g.n, " k=", g.k, " transa=", g.trans_a ? "T" : "N",
        " transb=", g.trans_b ? "T" : "N", " lda=", g.lda, " ldb=", g.ldb, " ldd=", g.ldd,
        " in=", dtype_name(g.in), " out=", dtype_name(g.out),
        " compute=", compute == CUBLAS_COMPUTE_32F_FAST_TF32 ? "32F_FAST_TF32" : "32F",
        " bias=", g.bias ? dtype_name(g.out) : "none", " beta=", g.beta,
        " align A=", std::get<12>(key), " B=", std::get<13>(key), " D=", std::get<14>(key),
        " bias=", std::get<15>(key), " | chose ", chosen, " of ", found,
        avoid_split_k ? " (bf16 output: the first without split-K)" : " (the heuristic's first)",
        ": ", describe_algo(results[chosen]));
    for (int i = 0; i < found; ++i) {
      if (i != chosen) line += str_cat(" | [", i, "] ", describe_algo(results[i]));
    }
    std::fprintf(stderr, "%s\n", line.c_str());
  }
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
