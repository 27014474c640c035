// The check family for CUDA, cuBLAS and NCCL calls. A failing call logs the statement, the error
// name and text, the rank and the device, runs the registered abort hook (which aborts the NCCL
// communicator so peers do not hang), and exits non-zero. Include only from code compiled with
// the CUDA toolkit's headers.
//
//   AX_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, stream));
//   AX_CUBLAS_CHECK(cublasLtMatmul(...));
//   AX_NCCL_CHECK(ncclAllReduce(...));
#pragma once

#include <functional>

namespace ax {

// Called once before the process exits on a device error (e.g. ncclCommAbort on every
// communicator). Replaces any earlier hook.
void set_device_abort_hook(std::function<void()> hook);

namespace internal {
[[noreturn]] void device_check_failed(const char* library, const char* statement, int code,
                                      const char* error_name, const char* error_text,
                                      const char* file, int line);
// The device ordinal this process drives, named in the message (-1 = unknown).
void set_error_device(int device);
}  // namespace internal
}  // namespace ax

#if defined(__CUDACC__) || defined(CUDART_VERSION) || __has_include(<cuda_runtime_api.h>)
#include <cuda_runtime_api.h>

#define AX_CUDA_CHECK(stmt)                                                                       \
  do {                                                                                            \
    cudaError_t ax_err_ = (stmt);                                                                 \
    if (ax_err_ != cudaSuccess)                                                                   \
      ::ax::internal::device_check_failed("CUDA", #stmt, static_cast<int>(ax_err_),               \
                                          cudaGetErrorName(ax_err_), cudaGetErrorString(ax_err_), \
                                          __FILE__, __LINE__);                                    \
  } while (0)
#endif

#if defined(CUBLAS_VER_MAJOR) || defined(CUBLASLT_H_)
#define AX_CUBLAS_CHECK(stmt)                                                                  \
  do {                                                                                         \
    cublasStatus_t ax_err_ = (stmt);                                                           \
    if (ax_err_ != CUBLAS_STATUS_SUCCESS)                                                      \
      ::ax::internal::device_check_failed("cuBLAS", #stmt, static_cast<int>(ax_err_),          \
                                          cublasGetStatusName(ax_err_),                        \
                                          cublasGetStatusString(ax_err_), __FILE__, __LINE__); \
  } while (0)
#endif

#if defined(NCCL_MAJOR)
#define AX_NCCL_CHECK(stmt)                                                                      \
  do {                                                                                           \
    ncclResult_t ax_err_ = (stmt);                                                               \
    if (ax_err_ != ncclSuccess && ax_err_ != ncclInProgress)                                     \
      ::ax::internal::device_check_failed("NCCL", #stmt, static_cast<int>(ax_err_),              \
                                          "ncclResult_t", ncclGetErrorString(ax_err_), __FILE__, \
                                          __LINE__);                                             \
  } while (0)
#endif
