// Helpers for the backend suites: tensors allocated through a backend and freed with it,
// deterministic random fills, and host read-back.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <random>
#include <vector>

#include "ax/trainer/backend/backend.h"

namespace ax::train::testing {

// Owns the tensors it allocates from one backend.
class Buffers {
 public:
  explicit Buffers(Backend& backend) : be_(backend) {}
  ~Buffers() {
    for (void* p : owned_) be_.free(p);
  }
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;

  Tensor make(DType dtype, const std::vector<int64_t>& dims) {
    Tensor t(nullptr, dtype, {});
    for (int64_t d : dims) t.shape[t.ndim++] = d;
    auto mem = be_.alloc(t.bytes());
    EXPECT_TRUE(mem.ok()) << mem.status().to_string();
    t.data = *mem;
    owned_.push_back(t.data);
    return t;
  }
  Tensor f32(const std::vector<int64_t>& dims, const std::vector<float>& values = {}) {
    Tensor t = make(DType::kF32, dims);
    if (!values.empty()) set(t, values);
    return t;
  }
  Tensor i32(const std::vector<int64_t>& dims, const std::vector<int32_t>& values) {
    Tensor t = make(DType::kI32, dims);
    EXPECT_EQ(static_cast<int64_t>(values.size()), t.numel());
    be_.copy_from_host(t, values.data());
    return t;
  }
  void set(Tensor t, const std::vector<float>& values) {
    EXPECT_EQ(static_cast<int64_t>(values.size()), t.numel());
    be_.copy_from_host(t, values.data());
  }
  std::vector<float> read(Tensor t) {
    std::vector<float> v(t.numel());
    be_.copy_to_host(v.data(), t);
    return v;
  }

 private:
  Backend& be_;
  std::vector<void*> owned_;
};

inline std::vector<float> normal(std::mt19937& rng, int64_t n, float stddev = 1.0f,
                                 float mean = 0.0f) {
  std::normal_distribution<float> dist(mean, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

inline std::vector<int32_t> ints(std::mt19937& rng, int64_t n, int32_t lo, int32_t hi) {
  std::uniform_int_distribution<int32_t> dist(lo, hi - 1);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// A CPU backend with the builtin GEMM kernel instead of OpenBLAS.
inline std::unique_ptr<Backend> make_builtin_gemm_backend(int threads) {
  setenv("AX_CPU_GEMM", "builtin", 1);
  auto be = make_cpu_backend(threads);
  unsetenv("AX_CPU_GEMM");
  return be;
}

// Self-attention over a packed (B, T, (NH + 2·KVH)·HD) qkv with the 1/sqrt(HD) scale.
inline AttentionSpec packed_attention(int NH, int KVH, int HD, bool causal) {
  AttentionSpec s;
  s.num_heads = NH;
  s.num_kv_heads = KVH;
  s.causal = causal;
  s.scale = 1.0f / std::sqrt(static_cast<float>(HD));
  s.k_offset = static_cast<int64_t>(NH) * HD;
  return s;
}

}  // namespace ax::train::testing
