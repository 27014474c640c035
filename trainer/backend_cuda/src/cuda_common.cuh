// Device helpers shared by the CUDA backend's kernels: loads and stores of the activation type in
// f32, warp and block reductions, launch checks.
//
// Activations and compute weights are bf16 or f32 (the backend's dtype plan, chosen when it is
// created). Kernels that touch them are templates on that type T, read it with to_f32 and write it
// with store / add_to, so each kernel body is written once, computes in f32 for both types, and
// rounds once (to nearest even) where it stores bf16.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ax/common/device_check.h"
#include "cuda_kernels.h"

namespace ax::train::cuda {

inline constexpr int kWarp = 32;

// Reports a failed launch (bad configuration, missing kernel image) where it happened.
#define AX_CUDA_CHECK_LAUNCH() AX_CUDA_CHECK(cudaGetLastError())

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A grid-stride loop: i runs over [0, n) in steps of the whole grid, in 64 bits.
#define AX_GRID_STRIDE(i, n)                                                \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); \
       i += int64_t{gridDim.x} * blockDim.x)

// Grid size for a grid-stride loop over n elements with `threads` per block.
inline unsigned grid_for(int64_t n, int threads, int64_t max_blocks = 65535LL * 16) {
  int64_t blocks = ceil_div(n, threads);
  if (blocks < 1) blocks = 1;
  return static_cast<unsigned>(blocks < max_blocks ? blocks : max_blocks);
}

__device__ __forceinline__ float to_f32(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ bf16 to_bf16(float x) { return __float2bfloat16_rn(x); }

// v as a T: rounded to nearest even for bf16, unchanged for f32.
template <typename T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ bf16 from_f32<bf16>(float v) {
  return to_bf16(v);
}
template <>
__device__ __forceinline__ float from_f32<float>(float v) {
  return v;
}
template <typename T>
__device__ __forceinline__ void store(T* dst, float v) {
  *dst = from_f32<T>(v);
}
// dst += v, added in f32 and rounded once.
template <typename T>
__device__ __forceinline__ void add_to(T* dst, float v) {
  *dst = from_f32<T>(to_f32(*dst) + v);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Online softmax state (max m, Σ e^(x - m) s) merged across lanes.
__device__ __forceinline__ void merge_max_sum(float& m, float& s, float m2, float s2) {
  float mn = fmaxf(m, m2);
  if (mn == -INFINITY) return;  // both empty
  s = s * expf(m - mn) + s2 * expf(m2 - mn);
  m = mn;
}

__device__ __forceinline__ void warp_max_sum(float& m, float& s) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) {
    float m2 = __shfl_xor_sync(0xffffffffu, m, o);
    float s2 = __shfl_xor_sync(0xffffffffu, s, o);
    merge_max_sum(m, s, m2, s2);
  }
}

// Block-wide reductions for blockDim.x a multiple of 32 (<= 1024); every thread gets the result.
// `shared` holds 32 floats (64 for block_max_sum); the block must not reuse it before a
// __syncthreads().
__device__ __forceinline__ float block_sum(float v, float* shared) {
  int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : 0.0f;
  return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v, float* shared) {
  int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : -INFINITY;
  return warp_max(v);
}

__device__ __forceinline__ void block_max_sum(float& m, float& s, float* shared) {
  int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  warp_max_sum(m, s);
  __syncthreads();
  if (lane == 0) {
    shared[warp] = m;
    shared[kWarp + warp] = s;
  }
  __syncthreads();
  m = lane < warps ? shared[lane] : -INFINITY;
  s = lane < warps ? shared[kWarp + lane] : 0.0f;
  warp_max_sum(m, s);
}

}  // namespace ax::train::cuda
