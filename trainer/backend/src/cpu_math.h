// Scalar building blocks for the CPU kernels, written so that GCC vectorises the loops that use
// them at -O2/-O3 without -ffast-math: no calls, no branches, and reductions over a fixed number
// of independent lanes (so the summation order, and the result, is the same on every ISA).
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>

// Kernels that pay for wider vectors get an AVX-512 and an AVX2 clone beside the baseline
// x86-64 one, picked when the program loads (GCC function multiversioning); the build needs no
// -march flag and runs on any x86-64 CPU.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define AX_CPU_KERNEL __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define AX_CPU_KERNEL
#endif

namespace ax::train::cpu {

inline constexpr int kLanes = 16;

// e^x with a relative error below 2e-7: x = n·ln2 + r with |r| <= ln2/2, a degree-7 polynomial
// for e^r (Cephes' expf coefficients), 2^n added to the exponent bits. Returns 0 below -87.3
// (where e^x leaves the normal floats) and e^88 above 88 (callers never rely on overflow).
inline float exp_f32(float x) {
  constexpr float kLo = -87.33654f, kHi = 88.0f;
  constexpr float kRound = 12582912.0f;  // 1.5 · 2^23: adding it rounds to an integer
  float xc = std::min(std::max(x, kLo), kHi);
  float n = (xc * 1.44269504088896341f + kRound) - kRound;
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float er = p * (r * r) + r + 1.0f;
  float two_n = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  return x < kLo ? 0.0f : er * two_n;
}

// tanh through e^2x: exact limits ±1, absolute error ~1e-7 near 0.
inline float tanh_f32(float x) { return 1.0f - 2.0f / (exp_f32(2.0f * x) + 1.0f); }

inline float sigmoid_f32(float x) { return 1.0f / (1.0f + exp_f32(-x)); }

inline float sum_f32(const float* x, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) acc[l] += x[i + l];
  }
  float s = 0;
  for (int l = 0; l < kLanes; ++l) s += acc[l];
  for (; i < n; ++i) s += x[i];
  return s;
}

inline float dot_f32(const float* a, const float* b, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) acc[l] += a[i + l] * b[i + l];
  }
  float s = 0;
  for (int l = 0; l < kLanes; ++l) s += acc[l];
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// Σ (x - shift)², for variances.
inline float sum_sq_dev_f32(const float* x, float shift, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      float d = x[i + l] - shift;
      acc[l] += d * d;
    }
  }
  float s = 0;
  for (int l = 0; l < kLanes; ++l) s += acc[l];
  for (; i < n; ++i) s += (x[i] - shift) * (x[i] - shift);
  return s;
}

inline float max_f32(const float* x, int64_t n) {
  float acc[kLanes];
  for (int l = 0; l < kLanes; ++l) acc[l] = -3.402823466e38f;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) acc[l] = std::max(acc[l], x[i + l]);
  }
  float m = acc[0];
  for (int l = 1; l < kLanes; ++l) m = std::max(m, acc[l]);
  for (; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

// Σ e^(x - shift) over n values.
inline float sum_exp_f32(const float* x, float shift, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) acc[l] += exp_f32(x[i + l] - shift);
  }
  float s = 0;
  for (int l = 0; l < kLanes; ++l) s += acc[l];
  for (; i < n; ++i) s += exp_f32(x[i] - shift);
  return s;
}

// x = e^(x - shift) over n values, returning their sum.
inline float exp_in_place_sum(float* x, float shift, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      x[i + l] = exp_f32(x[i + l] - shift);
      acc[l] += x[i + l];
    }
  }
  float s = 0;
  for (int l = 0; l < kLanes; ++l) s += acc[l];
  for (; i < n; ++i) {
    x[i] = exp_f32(x[i] - shift);
    s += x[i];
  }
  return s;
}

}  // namespace ax::train::cpu
