// Single-precision GEMM for the CPU backend: OpenBLAS when it can be loaded, otherwise (or
// with AX_CPU_GEMM=builtin) a blocked loop kernel. Each call runs on the calling thread;
// CpuBackend splits large GEMMs over its own pool, so OpenBLAS always runs single-threaded and
// never spins beside the pool.
//
// OpenBLAS picks its kernels (OPENBLAS_CORETYPE or cpuid) once, when the library loads, so the
// backend loads it itself with dlopen on first use, after choosing the core: see
// AX_OPENBLAS_CORETYPE in cpu_blas.cc. A binary that links libopenblas directly has loaded it
// before main(); the backend then uses that copy as it is and says so.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace ax::train::cpu {

enum class Trans : uint8_t { kNo, kYes };

// C (M, N) = alpha · op(A) (M, K) · op(B) (K, N) + beta · C, row-major, leading dimensions
// lda/ldb/ldc as stored. beta == 0 overwrites C (NaNs in C do not propagate).
struct GemmArgs {
  Trans ta = Trans::kNo, tb = Trans::kNo;
  int64_t M = 0, N = 0, K = 0;
  float alpha = 1;
  const float* A = nullptr;
  int64_t lda = 0;
  const float* B = nullptr;
  int64_t ldb = 0;
  float beta = 0;
  float* C = nullptr;
  int64_t ldc = 0;
};

class Gemm {
 public:
  // use_openblas: load OpenBLAS (once per process) and use it when that succeeds.
  explicit Gemm(bool use_openblas);
  // "OpenBLAS 0.3.21 core Cooperlake" or "builtin GEMM".
  const std::string& description() const { return description_; }
  void operator()(const GemmArgs& g) const;
  // 2·M·N·K of every call so far: the FLOPs this backend's GEMMs executed.
  double flops() const { return static_cast<double>(flops_.load(std::memory_order_relaxed)); }

 private:
  void* sgemm_ = nullptr;  // cblas_sgemm of the loaded OpenBLAS
  std::string description_;
  mutable std::atomic<int64_t> flops_{0};
};

}  // namespace ax::train::cpu
