// Tensor views and the arena they live in. A Tensor does not own memory: parameters, gradients,
// optimizer state and activations are slices of a few allocations planned up front (llm.c's
// layout tables), and ops receive views with their shapes.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>

#include "ax/common/check.h"

namespace ax::train {

enum class DType : uint8_t { kF32, kBF16, kI32 };
size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);

// bf16 is the top half of an f32: widening is exact; narrowing rounds to nearest even (NaN stays
// NaN), as the CUDA backend's __float2bfloat16_rn does.
inline uint16_t bf16_from_f32(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}
inline float f32_from_bf16(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline constexpr int kMaxDims = 4;

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::kF32;
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};

  Tensor() = default;
  Tensor(void* d, DType t, std::initializer_list<int64_t> dims);

  bool empty() const { return data == nullptr; }
  int64_t numel() const;
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  int64_t dim(int i) const { return shape[i < 0 ? ndim + i : i]; }
  // Size of the last dimension and product of the others (rows × cols view).
  int64_t cols() const { return ndim == 0 ? 1 : shape[ndim - 1]; }
  int64_t rows() const { return cols() == 0 ? 0 : numel() / cols(); }
  // Same memory, another shape with the same element count.
  Tensor view(std::initializer_list<int64_t> dims) const;
  std::string shape_string() const;  // "(8, 256, 384) f32"

  template <typename T>
  T* as() const {
    AX_CHECK(dtype_matches<T>()) << "tensor " << shape_string() << " accessed with wrong type";
    return static_cast<T*>(data);
  }

 private:
  template <typename T>
  bool dtype_matches() const;
};

template <>
inline bool Tensor::dtype_matches<float>() const {
  return dtype == DType::kF32;
}
template <>
inline bool Tensor::dtype_matches<int32_t>() const {
  return dtype == DType::kI32;
}
template <>
inline bool Tensor::dtype_matches<uint16_t>() const {
  return dtype == DType::kBF16;
}

// Bump allocator over one backend allocation: plan by calling take() with sizes first in a
// dry run (base == nullptr, counts bytes), allocate once, then take() again in the same order.
class Arena {
 public:
  explicit Arena(void* base = nullptr, size_t capacity = SIZE_MAX) : base_(base), cap_(capacity) {}
  Tensor take(DType dtype, std::initializer_list<int64_t> dims);
  size_t used() const { return used_; }
  // Back to an earlier used(): what is taken next overlays what was taken since (plans that are
  // never alive at once share the bytes; the caller then moves on past the largest).
  void rewind(size_t used) {
    AX_CHECK_LE(used, used_);
    used_ = used;
  }
  void advance_to(size_t used) { used_ = std::max(used_, used); }

 private:
  void* base_;
  size_t cap_;
  size_t used_ = 0;
};

}  // namespace ax::train
