#include "ax/trainer/backend/tensor.h"

#include <sstream>

namespace ax::train {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kBF16:
      return 2;
    case DType::kI32:
      return 4;
  }
  AX_CHECK(false) << "unknown dtype " << static_cast<int>(dtype);
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kBF16:
      return "bf16";
    case DType::kI32:
      return "i32";
  }
  AX_CHECK(false) << "unknown dtype " << static_cast<int>(dtype);
  return "";
}

Tensor::Tensor(void* d, DType t, std::initializer_list<int64_t> dims) : data(d), dtype(t) {
  AX_CHECK_LE(dims.size(), static_cast<size_t>(kMaxDims)) << "too many dimensions";
  for (int64_t n : dims) {
    AX_CHECK_GE(n, 0) << "negative dimension";
    shape[ndim++] = n;
  }
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[i];
  return n;
}

Tensor Tensor::view(std::initializer_list<int64_t> dims) const {
  Tensor t(data, dtype, dims);
  AX_CHECK_EQ(t.numel(), numel()) << "view " << t.shape_string() << " of " << shape_string();
  return t;
}

std::string Tensor::shape_string() const {
  std::ostringstream os;
  os << "(";
  for (int i = 0; i < ndim; ++i) os << (i ? ", " : "") << shape[i];
  os << ") " << dtype_name(dtype);
  return os.str();
}

Tensor Arena::take(DType dtype, std::initializer_list<int64_t> dims) {
  constexpr size_t kAlign = 64;
  Tensor t(nullptr, dtype, dims);
  size_t offset = (used_ + kAlign - 1) / kAlign * kAlign;
  size_t bytes = dtype_size(dtype);
  bool overflow = offset < used_;
  for (int i = 0; i < t.ndim; ++i) {
    overflow |= __builtin_mul_overflow(bytes, static_cast<size_t>(t.shape[i]), &bytes);
  }
  AX_CHECK(!overflow && bytes <= SIZE_MAX - offset)
      << "arena size overflows taking " << t.shape_string();
  AX_CHECK_LE(offset + bytes, cap_) << "arena of " << cap_ << " bytes is full taking "
                                    << t.shape_string() << " at offset " << offset;
  if (base_ != nullptr) t.data = static_cast<char*>(base_) + offset;
  used_ = offset + bytes;
  return t;
}

}  // namespace ax::train
