// GEMMs of the CUDA backend through cuBLASLt: bf16 inputs, f32 accumulation, bf16 or f32
// output, an optional fused bias epilogue. Descriptors and the heuristic's algorithm are cached
// per shape, so a training step queries the heuristic only on its first pass.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <tuple>

namespace ax::train::cuda {

// D = op(A) · op(B) + beta · D in cuBLAS's column-major terms: D is m × n (leading dimension
// ldd), op(A) m × k, op(B) k × n; a transposed operand is stored k × m (or n × k).
struct GemmDesc {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  const void* A = nullptr;  // bf16
  int64_t lda = 0;
  const void* B = nullptr;  // bf16
  int64_t ldb = 0;
  void* D = nullptr;  // bf16 or f32 (d_f32)
  int64_t ldd = 0;
  bool d_f32 = false;
  float beta = 0;
  const void* bias = nullptr;  // bf16 (m), added to every column; forward only
};

class LtMatmul {
 public:
  LtMatmul();
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
  // Everything the algorithm choice depends on, pointer alignments included.
  using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool,
                         bool, bool, int, int, int, int>;
  Plan& plan_for(const GemmDesc& g);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::map<Key, Plan> plans_;
};

}  // namespace ax::train::cuda
