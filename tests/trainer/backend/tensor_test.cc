#include "ax/trainer/backend/tensor.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace ax::train {
namespace {

TEST(Tensor, ShapeNumelAndView) {
  float buf[24];
  Tensor t(buf, DType::kF32, {2, 3, 4});
  EXPECT_EQ(t.ndim, 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.bytes(), 96u);
  EXPECT_EQ(t.dim(-1), 4);
  EXPECT_EQ(t.rows(), 6);
  EXPECT_EQ(t.cols(), 4);
  EXPECT_EQ(t.shape_string(), "(2, 3, 4) f32");
  Tensor v = t.view({6, 4});
  EXPECT_EQ(v.data, t.data);
  EXPECT_EQ(v.shape_string(), "(6, 4) f32");
  EXPECT_EQ(t.as<float>(), buf);
  EXPECT_TRUE(Tensor().empty());
  EXPECT_EQ(Tensor(nullptr, DType::kF32, {}).numel(), 1);
}

TEST(Tensor, DtypeSizesAndNames) {
  EXPECT_EQ(dtype_size(DType::kF32), 4u);
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(dtype_size(DType::kI32), 4u);
  EXPECT_STREQ(dtype_name(DType::kBF16), "bf16");
  EXPECT_STREQ(dtype_name(DType::kI32), "i32");
}

TEST(TensorDeathTest, ViewWithOtherNumelAborts) {
  float buf[6];
  Tensor t(buf, DType::kF32, {2, 3});
  EXPECT_DEATH(t.view({4, 2}), "view \\(4, 2\\) f32 of \\(2, 3\\) f32");
}

TEST(TensorDeathTest, WrongTypeAccessAborts) {
  float buf[6];
  Tensor t(buf, DType::kF32, {2, 3});
  EXPECT_DEATH(t.as<int32_t>(), "accessed with wrong type");
}

TEST(Arena, DryRunThenRealRunGiveSameAlignedLayout) {
  Arena plan;
  Tensor a = plan.take(DType::kF32, {3});
  Tensor b = plan.take(DType::kBF16, {5, 7});
  Tensor c = plan.take(DType::kI32, {1});
  EXPECT_EQ(a.data, nullptr);
  EXPECT_EQ(plan.used(), 64u + 128u + 4u);
  alignas(64) static char memory[256];
  Arena real(memory, sizeof(memory));
  Tensor a2 = real.take(DType::kF32, {3});
  Tensor b2 = real.take(DType::kBF16, {5, 7});
  Tensor c2 = real.take(DType::kI32, {1});
  EXPECT_EQ(real.used(), plan.used());
  EXPECT_EQ(a2.data, memory);
  EXPECT_EQ(b2.data, memory + 64);
  EXPECT_EQ(c2.data, memory + 192);
  EXPECT_EQ(b2.shape_string(), b.shape_string());
  EXPECT_EQ(c2.numel(), c.numel());
}

TEST(ArenaDeathTest, OverflowAborts) {
  alignas(64) static char memory[128];
  Arena arena(memory, sizeof(memory));
  arena.take(DType::kF32, {16});
  EXPECT_DEATH(arena.take(DType::kF32, {17}), "arena of 128 bytes is full");
  Arena plan;
  EXPECT_DEATH(plan.take(DType::kF32, {int64_t{1} << 62, 8}), "arena size overflows");
}

}  // namespace
}  // namespace ax::train
