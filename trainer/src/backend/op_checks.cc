#include "ax/trainer/op_checks.h"

#include <cmath>

#include "ax/common/check.h"

namespace ax::train {

void expect_dtype(const Tensor& t, DType dtype, const char* op, const char* arg) {
  AX_CHECK(!t.empty()) << op << ": " << arg << " is empty";
  AX_CHECK(t.dtype == dtype) << op << ": " << arg << " is " << t.shape_string() << ", expected "
                             << dtype_name(dtype);
}

void expect_matrix(const Tensor& t, DType dtype, int64_t rows, int64_t cols, const char* op,
                   const char* arg) {
  expect_dtype(t, dtype, op, arg);
  AX_CHECK(t.rows() == rows && t.cols() == cols) << op << ": " << arg << " is " << t.shape_string()
                                                 << ", expected " << rows << " rows of " << cols;
}

void expect_shape(const Tensor& t, DType dtype, std::initializer_list<int64_t> dims, const char* op,
                  const char* arg) {
  expect_dtype(t, dtype, op, arg);
  bool same = t.ndim == static_cast<int>(dims.size());
  int i = 0;
  for (int64_t d : dims) same = same && t.shape[i++] == d;
  if (!same) {
    Tensor want(nullptr, dtype, {});
    for (int64_t d : dims) want.shape[want.ndim++] = d;
    AX_CHECK(false) << op << ": " << arg << " is " << t.shape_string() << ", expected "
                    << want.shape_string();
  }
}

std::pair<int64_t, int64_t> expect_vocab_shard(const Tensor& logits, DType dtype,
                                               const Tensor& targets, int64_t v_count,
                                               const char* op) {
  const int64_t N = logits.rows(), Vl = logits.cols();
  expect_matrix(logits, dtype, N, Vl, op, "logits");
  if (!targets.empty()) {
    expect_dtype(targets, DType::kI32, op, "targets");
    AX_CHECK_EQ(targets.numel(), N) << op << ": targets is " << targets.shape_string();
  }
  AX_CHECK(v_count >= 0 && v_count <= Vl)
      << op << ": v_count=" << v_count << " for logits " << logits.shape_string();
  return {N, Vl};
}

AdamWScalars adamw_scalars(const AdamWArgs& args) {
  AX_CHECK_GE(args.step, 1) << "adamw_update: step is 1-based";
  const double bias1 =
      1.0 - std::pow(static_cast<double>(args.beta1), static_cast<double>(args.step));
  const double bias2 =
      1.0 - std::pow(static_cast<double>(args.beta2), static_cast<double>(args.step));
  return {
      args.grad_scale,
      static_cast<float>(1.0 - static_cast<double>(args.lr) * args.weight_decay),
      args.beta1,
      static_cast<float>(1.0 - args.beta1),
      args.beta2,
      static_cast<float>(1.0 - args.beta2),
      static_cast<float>(std::sqrt(bias2)),
      args.eps,
      static_cast<float>(-(args.lr / bias1)),
  };
}

}  // namespace ax::train
