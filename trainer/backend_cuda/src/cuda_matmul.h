// GEMMs of the CUDA backend through cuBLASLt: bf16 or f32 inputs, f32 accumulation, an output of
// the input type or f32, an optional fused bias epilogue. f32 inputs multiply in full f32
// (CUBLAS_COMPUTE_32F) unless TF32 tensor cores are allowed (train.allow_tf32). Descriptors and
// the heuristic's algorithm are cached per shape, so a training step queries the heuristic only
// on its first pass. A GEMM with an operand of 2^31 elements or more runs in pieces
// (gemm_split.h). Environment knobs (`--help-env`): AX_CUDA_GEMM_LOG=1 prints each plan and its
// algorithm's configuration to stderr when it is made; AX_CUDA_GEMM_SPLIT_K says whether a bf16
// output may take a split-K algorithm (docs/cuda-backend.md "GEMMs").
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "ax/common/status.h"
#include "gemm_split.h"

namespace ax::train::cuda {

class LtMatmul {
 public:
  // What the environment asks of the GEMMs (AX_CUDA_GEMM_LOG, AX_CUDA_GEMM_SPLIT_K).
  struct EnvOptions {
    bool log = false;  // each new plan to stderr
    // A bf16 output takes the heuristic's first algorithm that does not split K (the first
    // result when none of them does); false: the heuristic's first algorithm.
    bool bf16_without_split_k = true;
  };
  // InvalidArgument naming the variable for a value that does not parse.
  static StatusOr<EnvOptions> env_options();

  // allow_tf32: f32 GEMMs may round their inputs to TF32 (10-bit mantissas) on tensor cores.
  LtMatmul(bool allow_tf32, EnvOptions env);
  ~LtMatmul();
  LtMatmul(const LtMatmul&) = delete;
  LtMatmul& operator=(const LtMatmul&) = delete;

  void run(const GemmDesc& g, cudaStream_t stream);
  // The device workspace cuBLASLt may use (allocated by the constructor).
  const void* workspace() const { return workspace_; }
  static size_t workspace_bytes();

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  // Everything the algorithm choice depends on, dtypes and pointer alignments included.
  using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, DType,
                         DType, bool, bool, int, int, int, int>;
  Plan& plan_for(const GemmDesc& g);
  void run_piece(const GemmDesc& g, cudaStream_t stream);

  bool allow_tf32_ = false;
  EnvOptions env_;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::map<Key, Plan> plans_;
};

}  // namespace ax::train::cuda
