// The CUDA backend's peak FLOP/s table (trainer/backend_cuda/src/gpu_peak.h) on devices described
// by hand, as cudaGetDeviceProperties names them: datasheet dense figures for the boards we train
// on, SMs × clock × the per-SM rate elsewhere, and the peak each dtype plan's MFU is against.
#include "gpu_peak.h"

#include <gtest/gtest.h>

namespace ax::train::cuda {
namespace {

constexpr double kT = 1e12;

GpuPeak peak(const char* name, int major, int minor, int sms, int clock_mhz) {
  return gpu_peak({name, major, minor, sms, clock_mhz * 1000});
}

void expect_peak(const GpuPeak& p, double bf16, double tf32, double fp32, const char* what) {
  EXPECT_DOUBLE_EQ(p.bf16, bf16 * kT) << what;
  EXPECT_DOUBLE_EQ(p.tf32, tf32 * kT) << what;
  EXPECT_DOUBLE_EQ(p.fp32, fp32 * kT) << what;
}

TEST(GpuPeakTest, HopperDatasheets) {
  for (const char* name : {"NVIDIA H100 80GB HBM3", "NVIDIA H800", "NVIDIA H800 80GB HBM3",
                           "NVIDIA H200", "NVIDIA GH200 480GB"}) {
    expect_peak(peak(name, 9, 0, 132, 1980), 989.4, 494.7, 66.9, name);
  }
  for (const char* name : {"NVIDIA H100 PCIe", "NVIDIA H800 PCIe"}) {
    expect_peak(peak(name, 9, 0, 114, 1755), 756.5, 378, 51, name);
  }
  // A PCIe board whose name does not say so is still told apart by its 114 SMs.
  expect_peak(peak("NVIDIA H800", 9, 0, 114, 1755), 756.5, 378, 51, "H800 with 114 SMs");
  for (const char* name : {"NVIDIA H100 NVL", "NVIDIA H200 NVL"}) {
    expect_peak(peak(name, 9, 0, 132, 1785), 835.5, 417.5, 60, name);
  }
}

// H20: 78 SMs whose tensor cores are held to 148 TFLOP/s dense bf16 — a quarter of what
// SMs × clock × 4096 would claim (632 TFLOP/s at 1.98 GHz), which the old table returned.
TEST(GpuPeakTest, H20IsNotSmsTimesClock) {
  expect_peak(peak("NVIDIA H20", 9, 0, 78, 1980), 148, 74, 44, "H20");
  // "H200" contains "H20" but is not one.
  expect_peak(peak("NVIDIA H200", 9, 0, 132, 1980), 989.4, 494.7, 66.9, "H200");
}

TEST(GpuPeakTest, AmpereDatasheets) {
  for (const char* name :
       {"NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe", "NVIDIA A800-SXM4-80GB"}) {
    expect_peak(peak(name, 8, 0, 108, 1410), 312, 156, 19.5, name);
  }
  expect_peak(peak("NVIDIA A30", 8, 0, 56, 1440), 165, 82, 10.3, "A30");
}

TEST(GpuPeakTest, OtherDevicesFromSmsAndClock) {
  // L40S: 142 SMs at 2.52 GHz, 1024 bf16 FLOP per SM and clock: 366 TFLOP/s (datasheet 362).
  GpuPeak l40s = peak("NVIDIA L40S", 8, 9, 142, 2520);
  EXPECT_NEAR(l40s.bf16, 362 * kT, 0.02 * 362 * kT);
  EXPECT_DOUBLE_EQ(l40s.tf32, l40s.bf16 / 2);
  EXPECT_NEAR(l40s.fp32, 91.6 * kT, 0.02 * 91.6 * kT);
  // GeForce accumulates bf16 in f32 at half rate: RTX 4090 165 TFLOP/s.
  EXPECT_NEAR(peak("NVIDIA GeForce RTX 4090", 8, 9, 128, 2520).bf16, 165.2 * kT, 0.01 * 165 * kT);
  // An sm_90 part the table does not name: SMs × clock × 4096.
  EXPECT_DOUBLE_EQ(peak("NVIDIA H1", 9, 0, 100, 1000).bf16, 100 * 1e9 * 4096);
  // An architecture without a rate: unknown, so no MFU is printed.
  expect_peak(peak("Tesla V100-SXM2-16GB", 7, 0, 80, 1530), 0, 0, 0, "V100");
}

TEST(GpuPeakTest, MfuIsAgainstThePlansMath) {
  const GpuPeak h100 = peak("NVIDIA H100 80GB HBM3", 9, 0, 132, 1980);
  EXPECT_DOUBLE_EQ(h100.for_mode(DType::kBF16, false), 989.4 * kT);
  EXPECT_DOUBLE_EQ(h100.for_mode(DType::kBF16, true), 989.4 * kT);  // bf16 GEMMs ignore TF32
  EXPECT_DOUBLE_EQ(h100.for_mode(DType::kF32, true), 494.7 * kT);
  EXPECT_DOUBLE_EQ(h100.for_mode(DType::kF32, false), 66.9 * kT);
}

}  // namespace
}  // namespace ax::train::cuda
