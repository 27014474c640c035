#include "cuda_backend.h"

#include <cuda_runtime.h>  // the typed cudaMalloc

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "ax/common/device_check.h"
#include "ax/common/strings.h"
#include "ax/trainer/backend/op_checks.h"
#include "cuda_kernels.h"
#include "gpu_peak.h"

namespace ax::train {
namespace cuda {
namespace {

std::string mode_name(const CudaBackendOptions& options) {
  if (options.act == DType::kBF16) return "";
  return options.allow_tf32 ? ", f32 activations, TF32 GEMMs" : ", f32 activations";
}

}  // namespace

StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::create(int device,
                                                           const CudaBackendOptions& options) {
  cudaError_t err = cudaSetDevice(device);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return FailedPrecondition("CUDA device ", device,
                              " does not answer: ", cudaGetErrorString(err));
  }
  internal::set_error_device(device);
  std::unique_ptr<CudaBackend> be(new CudaBackend());
  be->device_ = device;
  be->plan_.act = options.act;
  cudaDeviceProp prop;
  AX_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  int clock_khz = 0;
  AX_CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device));
  be->peak_flops_ =
      gpu_peak({prop.name, prop.major, prop.minor, prop.multiProcessorCount, clock_khz})
          .for_mode(options.act, options.allow_tf32);
  be->max_shared_per_block_ = prop.sharedMemPerBlockOptin;
  AX_ASSIGN_OR_RETURN(bool tensor_cores, tensor_core_attention_from_env());
  be->tensor_core_attention_ = options.tensor_core_attention && tensor_cores && prop.major >= 8;
  be->model_ = prop.name;
  be->name_ = str_cat("cuda:", device, " ", prop.name, " (", prop.multiProcessorCount, " SMs, ",
                      human_bytes(static_cast<double>(prop.totalGlobalMem)), ", sm_", prop.major,
                      prop.minor, ")", mode_name(options),
                      be->tensor_core_attention_ ? "" : ", attention on CUDA cores");
  AX_CUDA_CHECK(cudaStreamCreateWithFlags(&be->stream_, cudaStreamNonBlocking));
  AX_ASSIGN_OR_RETURN(LtMatmul::EnvOptions gemm_env, LtMatmul::env_options());
  be->matmul_ = std::make_unique<LtMatmul>(options.allow_tf32, gemm_env);
  be->allocations_.on_alloc(be->matmul_->workspace(), LtMatmul::workspace_bytes());
  AX_CUDA_CHECK(cudaMalloc(&be->sum_scratch_, (kSumSquaresBlocks + 1) * sizeof(double)));
  be->allocations_.on_alloc(be->sum_scratch_, (kSumSquaresBlocks + 1) * sizeof(double));
  attention_init(be->max_shared_per_block_);
  return be;
}

CudaBackend::~CudaBackend() {
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  matmul_.reset();
  cudaFree(scratch_);
  cudaFree(sum_scratch_);
  cudaFree(rope_table_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

StatusOr<void*> CudaBackend::alloc(size_t bytes) {
  void* p = nullptr;
  cudaError_t err = cudaMalloc(&p, std::max<size_t>(bytes, 1));
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // not sticky: clear it so later calls do not see it
    size_t free_bytes = 0, total_bytes = 0;
    AX_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    return ResourceExhausted("cuda:", device_, ": cannot allocate ",
                             human_bytes(static_cast<double>(bytes)), " (",
                             human_bytes(static_cast<double>(free_bytes)), " free of ",
                             human_bytes(static_cast<double>(total_bytes)), ")");
  }
  AX_CUDA_CHECK(err);
  AX_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
  allocations_.on_alloc(p, std::max<size_t>(bytes, 1));
  return p;
}

void CudaBackend::free(void* ptr) {
  allocations_.on_free(ptr);
  // cudaFree waits for the device, so kernels still reading ptr finish first.
  AX_CUDA_CHECK(cudaFree(ptr));
}

void CudaBackend::copy_from_host(Tensor dst, const void* src) {
  AX_CHECK(!dst.empty()) << "copy_from_host: dst is empty";
  // From pageable memory the call returns once src has been staged: the caller may reuse it.
  AX_CUDA_CHECK(cudaMemcpyAsync(dst.data, src, dst.bytes(), cudaMemcpyHostToDevice, stream_));
}

void CudaBackend::copy_to_host(void* dst, Tensor src) {
  AX_CHECK(!src.empty()) << "copy_to_host: src is empty";
  AX_CUDA_CHECK(cudaMemcpyAsync(dst, src.data, src.bytes(), cudaMemcpyDeviceToHost, stream_));
  AX_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::copy(Tensor dst, Tensor src) {
  AX_CHECK(!dst.empty() && !src.empty()) << "copy: empty tensor";
  AX_CHECK(dst.ndim == src.ndim && dst.shape == src.shape)
      << "copy: " << dst.shape_string() << " from " << src.shape_string();
  int64_t n = dst.numel();
  if (dst.dtype == src.dtype) {
    AX_CUDA_CHECK(
        cudaMemcpyAsync(dst.data, src.data, dst.bytes(), cudaMemcpyDeviceToDevice, stream_));
  } else if (dst.dtype == DType::kBF16 && src.dtype == DType::kF32) {
    cast_f32_to_bf16(static_cast<bf16*>(dst.data), src.as<float>(), n, stream_);
  } else if (dst.dtype == DType::kF32 && src.dtype == DType::kBF16) {
    cast_bf16_to_f32(dst.as<float>(), static_cast<const bf16*>(src.data), n, stream_);
  } else {
    AX_CHECK(false) << "copy: no cast from " << src.shape_string() << " to " << dst.shape_string();
  }
}

void CudaBackend::zero(Tensor t) {
  if (t.empty()) return;
  AX_CUDA_CHECK(cudaMemsetAsync(t.data, 0, t.bytes(), stream_));
}

void CudaBackend::synchronize() { AX_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

void* CudaBackend::scratch(size_t bytes) {
  if (bytes <= scratch_bytes_) return scratch_;
  allocations_.on_free(scratch_);
  AX_CUDA_CHECK(cudaFree(scratch_));  // waits for kernels still using the old buffer
  scratch_ = nullptr;
  AX_CUDA_CHECK(cudaMalloc(&scratch_, bytes));
  allocations_.on_alloc(scratch_, bytes);
  scratch_bytes_ = bytes;
  return scratch_;
}

const float* CudaBackend::rope_table(int64_t T, int64_t head_dim, const RopeSpec& rope) {
  const bool same = head_dim == rope_head_dim_ && rope == rope_;
  if (same && T <= rope_T_) return rope_table_;
  // A longer table for the same rotation grows geometrically: decoding asks for one position more
  // at every token, and an entry does not depend on the table's length.
  if (same) T = std::max(T, 2 * rope_T_);
  const std::vector<double> inv_freq = rope_inv_freq(rope, head_dim);
  const int64_t half = head_dim / 2;
  std::vector<float> host(static_cast<size_t>(2 * T * half));
  for (int64_t j = 0; j < half; ++j) {
    for (int64_t t = 0; t < T; ++t) {
      double angle = static_cast<double>(t) * inv_freq[j];
      host[2 * (t * half + j)] = static_cast<float>(std::cos(angle));
      host[2 * (t * half + j) + 1] = static_cast<float>(std::sin(angle));
    }
  }
  if (host.size() > rope_table_floats_) {
    allocations_.on_free(rope_table_);
    AX_CUDA_CHECK(cudaFree(rope_table_));
    rope_table_ = nullptr;
    AX_CUDA_CHECK(cudaMalloc(&rope_table_, host.size() * sizeof(float)));
    allocations_.on_alloc(rope_table_, host.size() * sizeof(float));
    rope_table_floats_ = host.size();
  }
  // The table is read by kernels already queued: copy in stream order, and keep the host copy
  // alive until it has landed.
  AX_CUDA_CHECK(cudaMemcpyAsync(rope_table_, host.data(), host.size() * sizeof(float),
                                cudaMemcpyHostToDevice, stream_));
  AX_CUDA_CHECK(cudaStreamSynchronize(stream_));
  rope_T_ = T;
  rope_head_dim_ = head_dim;
  rope_ = rope;
  return rope_table_;
}

double CudaBackend::sum_squares(Tensor x) {
  const int64_t n = check_sum_squares(x);
  return cuda::sum_squares(x.as<float>(), n, sum_scratch_, stream_);
}

void CudaBackend::adamw_update(Tensor params, Tensor grads, Tensor m, Tensor v,
                               const AdamWArgs& args) {
  const int64_t n = check_adamw_update(params, grads, m, v);
  const AdamWScalars s = adamw_scalars(args);
  cuda::adamw_update(params.as<float>(), grads.as<float>(), m.as<float>(), v.as<float>(), n, s,
                     stream_);
}

}  // namespace cuda

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

StatusOr<std::unique_ptr<Backend>> make_cuda_backend(int device,
                                                     const CudaBackendOptions& options) {
  if (options.act != DType::kBF16 && options.act != DType::kF32) {
    return InvalidArgument("CUDA backend with ", dtype_name(options.act),
                           " activations: expected bf16 or f32");
  }
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return FailedPrecondition("no CUDA device (", cudaGetErrorString(err), ")");
  }
  if (n == 0) return FailedPrecondition("no CUDA device");
  if (device < 0 || device >= n) {
    return InvalidArgument("CUDA device ", device, " does not exist: ", n,
                           n == 1 ? " device answers" : " devices answer");
  }
  AX_ASSIGN_OR_RETURN(std::unique_ptr<cuda::CudaBackend> be,
                      cuda::CudaBackend::create(device, options));
  return std::unique_ptr<Backend>(std::move(be));
}

}  // namespace ax::train
