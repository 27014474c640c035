// Dropout's keep/drop decision as a hash of (seed, row key, feature) instead of a random stream
// (a counter-based generator, as Philox is in cuRAND, with SplitMix64's mixer): any element's
// decision can be computed alone, in any order, on the host or the device, so the CPU and CUDA
// backends draw the same masks, a backward pass draws its forward's mask again instead of
// storing it, and a row keyed by its place in the data gets the same mask whatever the mesh.
// Compiled by the host compiler and by nvcc (the CUDA kernels include it).
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define AX_DROPOUT_FN __host__ __device__ __forceinline__
#else
#define AX_DROPOUT_FN inline
#endif

namespace ax::train {

// The element's 32 random bits: the high half of SplitMix64's mixer over seed + (row_key, feature)
// (a bijection of its input, so distinct (row_key, feature) pairs of one seed never collide).
AX_DROPOUT_FN uint32_t dropout_bits(uint64_t seed, uint32_t row_key, uint32_t feature) {
  uint64_t x = seed + ((static_cast<uint64_t>(row_key) << 32) | feature);
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return static_cast<uint32_t>((x ^ (x >> 31)) >> 32);
}

AX_DROPOUT_FN bool dropout_keep(uint64_t seed, uint32_t row_key, uint32_t feature,
                                uint32_t threshold) {
  return dropout_bits(seed, row_key, feature) >= threshold;
}

// The threshold for a drop probability in [0, 1): round(rate · 2³²), so an element is dropped
// with probability threshold / 2³², within 2⁻³³ of rate.
inline uint32_t dropout_threshold(double rate) {
  const long long t = std::llround(rate * 4294967296.0);
  return static_cast<uint32_t>(t < 0 ? 0 : (t > 0xffffffffLL ? 0xffffffffLL : t));
}

}  // namespace ax::train

#undef AX_DROPOUT_FN
