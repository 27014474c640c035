// Attention on tensor cores for the CUDA backend: the device context that runs attention_tc.h's
// block programs (CUDA threads, __syncthreads, nvcuda::wmma), the kernels, and their launchers,
// which cuda_attention.cu calls for the calls the kernels take (cuda_attention.h).
#include <mma.h>

#include <algorithm>
#include <type_traits>

#include "attention_tc.h"
#include "cuda_attention.h"
#include "cuda_common.cuh"

namespace ax::train::cuda {
namespace {

// The device context of attention_tc.h's block programs.
struct TensorCoreCtx {
  __device__ void sync() const { __syncthreads(); }
  template <class F>
  __device__ void for_each(int n, F f) const {
    for (int i = threadIdx.x; i < n; i += tc::kThreads) f(i);
  }
  template <class F>
  __device__ void for_each_warp(int n, F f) const {
    for (int i = threadIdx.x / kWarp; i < n; i += tc::kWarps) f(i);
  }
  // c (16×16 f32, pitch ldc) = (load_c ? c : 0) + A·B over k (a multiple of 16): A 16×k bf16,
  // row-major (col-major when kTransA), B k×16 bf16, row-major (col-major when kTransB). One
  // warp, all lanes.
  template <bool kTransA, bool kTransB>
  __device__ void mma16(float* c, int ldc, bool load_c, const bf16* a, int lda, const bf16* b,
                        int ldb, int k) const {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    namespace wmma = nvcuda::wmma;
    using LayoutA = std::conditional_t<kTransA, wmma::col_major, wmma::row_major>;
    using LayoutB = std::conditional_t<kTransB, wmma::col_major, wmma::row_major>;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, LayoutA> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, LayoutB> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
    if (load_c) {
      wmma::load_matrix_sync(fc, c, ldc, wmma::mem_row_major);
    } else {
      wmma::fill_fragment(fc, 0.0f);
    }
    for (int kk = 0; kk < k; kk += 16) {
      wmma::load_matrix_sync(fa, kTransA ? a + kk * lda : a + kk, lda);
      wmma::load_matrix_sync(fb, kTransB ? b + kk : b + kk * ldb, ldb);
      wmma::mma_sync(fc, fa, fb, fc);
    }
    wmma::store_matrix_sync(c, fc, ldc, wmma::mem_row_major);
#else
    __trap();  // the host never launches these kernels before sm_80 (tensor_core_shared = 0)
#endif
  }
  static __device__ float exp(float x) { return expf(x); }
  static __device__ float log(float x) { return logf(x); }
  static __device__ float f32(bf16 x) { return to_f32(x); }
  // A product nvcc may not fuse with the add or subtract that follows (the forward and backward
  // programs must compute the same score).
  static __device__ float mul(float a, float b) { return __fmul_rn(a, b); }
  static __device__ bf16 round(float x) { return to_bf16(x); }
  static __device__ void copy8(bf16* dst, const bf16* src) {
    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
  }
  static __device__ void zero8(bf16* dst) {
    *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
  }
  static __device__ void store8(bf16* dst, const float* v) {
    __align__(16) bf16 t[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) t[e] = to_bf16(v[e]);
    copy8(dst, t);
  }
  static __device__ void add8(bf16* dst, const float* v) {
    __align__(16) bf16 t[8];
    copy8(t, dst);
#pragma unroll
    for (int e = 0; e < 8; ++e) t[e] = to_bf16(to_f32(t[e]) + v[e]);
    copy8(dst, t);
  }
};

// grid (query tiles, NH, B).
__global__ void __launch_bounds__(tc::kThreads)
    tc_forward_kernel(bf16* out, float* lse, const bf16* q, const bf16* kv, const int32_t* q_seg,
                      const int32_t* k_seg, tc::Bias<bf16> bias, tc::Shape d) {
  extern __shared__ __align__(128) unsigned char tc_smem[];
  tc::forward_block(TensorCoreCtx{}, tc_smem, out, lse, q, kv, q_seg, k_seg, bias, d,
                    int64_t{blockIdx.x} * tc::kTile, blockIdx.y, blockIdx.z);
}

// grid (key tiles, KVH, B).
__global__ void __launch_bounds__(tc::kThreads)
    tc_backward_kv_kernel(bf16* dkv, const bf16* dout, const float* lse, const float* D,
                          const bf16* q, const bf16* kv, const int32_t* q_seg, const int32_t* k_seg,
                          tc::Bias<bf16> bias, tc::Shape d) {
  extern __shared__ __align__(128) unsigned char tc_smem[];
  tc::backward_kv_block(TensorCoreCtx{}, tc_smem, dkv, dout, lse, D, q, kv, q_seg, k_seg, bias, d,
                        int64_t{blockIdx.x} * tc::kTile, blockIdx.y, blockIdx.z);
}

// grid (query tiles, NH, batch chunks): dQ of a query tile of one head over a chunk of batch
// rows in order (one row unless a shared bias's gradient is wanted: DbiasOut, as the CUDA-core
// dQ kernel), and the bias gradient into the chunk's slot.
__global__ void __launch_bounds__(tc::kThreads)
    tc_backward_q_kernel(bf16* dq, const bf16* dout, const float* lse, const float* D,
                         const bf16* q, const bf16* kv, const int32_t* q_seg, const int32_t* k_seg,
                         tc::Bias<bf16> bias, DbiasOut dbias, int64_t B, tc::Shape d) {
  extern __shared__ __align__(128) unsigned char tc_smem[];
  const int64_t b_begin = int64_t{blockIdx.z} * dbias.rows_per_block;
  const int64_t b_end = min(B, b_begin + dbias.rows_per_block);
  float* slot = dbias.out == nullptr ? nullptr
                                     : dbias.out + blockIdx.z * dbias.slot_stride +
                                           int64_t{blockIdx.y} * d.Tq * d.Tk;
  tc::backward_q_rows(TensorCoreCtx{}, tc_smem, dq, dout, lse, D, q, kv, q_seg, k_seg, bias, slot,
                      dbias.assign, d, int64_t{blockIdx.x} * tc::kTile, blockIdx.y, b_begin, b_end);
}

tc::Bias<bf16> tc_bias(const AttnShape& s, const AttnMasks<bf16>& m) {
  return {m.bias, m.bias_batch == 1 ? 0 : s.NH * s.Tq * s.Tk};
}

size_t tc_bytes(tc::Kernel k, int64_t HD) { return tc::layout_for(k, HD).bytes; }

}  // namespace

void tc_attention_init(size_t max_shared_bytes) {
  const int tc = static_cast<int>(std::min(max_shared_bytes, tc::shared_bytes(tc::kMaxHeadDim)));
  AX_CUDA_CHECK(
      cudaFuncSetAttribute(tc_forward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, tc));
  AX_CUDA_CHECK(
      cudaFuncSetAttribute(tc_backward_kv_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, tc));
  AX_CUDA_CHECK(
      cudaFuncSetAttribute(tc_backward_q_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, tc));
}

void tc_attention_forward(bf16* out, float* lse, const bf16* q, const bf16* kv, const AttnShape& s,
                          const AttnMasks<bf16>& m, cudaStream_t stream) {
  const Dims d = dims_of(s);
  tc_forward_kernel<<<grid_of(ceil_div(s.Tq, tc::kTile), s.NH, s.B), tc::kThreads,
                      tc_bytes(tc::Kernel::kForward, s.HD), stream>>>(
      out, lse, q, kv, m.q_segments, m.k_segments, tc_bias(s, m), d);
  AX_CUDA_CHECK_LAUNCH();
}

void tc_attention_backward(bf16* dq, bf16* dkv, const bf16* dout, const float* lse,
                           const float* row_dots, const bf16* q, const bf16* kv, const AttnShape& s,
                           const AttnMasks<bf16>& m, const DbiasPlan& plan, const DbiasOut& out_db,
                           cudaStream_t stream) {
  const Dims d = dims_of(s);
  const tc::Bias<bf16> bias = tc_bias(s, m);
  if (s.Tk > 0) {
    tc_backward_kv_kernel<<<grid_of(ceil_div(s.Tk, tc::kTile), s.KVH, s.B), tc::kThreads,
                            tc_bytes(tc::Kernel::kBackwardKV, s.HD), stream>>>(
        dkv, dout, lse, row_dots, q, kv, m.q_segments, m.k_segments, bias, d);
    AX_CUDA_CHECK_LAUNCH();
  }
  tc_backward_q_kernel<<<grid_of(ceil_div(s.Tq, tc::kTile), s.NH, plan.chunks), tc::kThreads,
                         tc_bytes(tc::Kernel::kBackwardQ, s.HD), stream>>>(
      dq, dout, lse, row_dots, q, kv, m.q_segments, m.k_segments, bias, out_db, s.B, d);
  AX_CUDA_CHECK_LAUNCH();
}

}  // namespace ax::train::cuda
