// Peak dense FLOP/s of NVIDIA GPUs for MFU, per GEMM math: bf16 tensor cores, TF32 tensor cores,
// and f32 on CUDA cores. Datasheet values for the parts we train on (with structured sparsity
// the datasheets double these; MFU is against the dense figure), else SMs × clock × the
// architecture's rate per SM and clock. Pure host logic without CUDA headers, so the table is
// unit-tested in every build (tests/trainer/backend/gpu_peak_test.cc).
#pragma once

#include <string>

#include "ax/trainer/backend/tensor.h"

namespace ax::train::cuda {

// What the CUDA runtime says about a device (cudaDeviceProp and cudaDevAttrClockRate).
struct GpuIdentity {
  std::string name;  // "NVIDIA H100 80GB HBM3"
  int major = 0, minor = 0;
  int sms = 0;        // multiProcessorCount
  int clock_khz = 0;  // the boost clock
};

// FLOP/s; 0 where unknown.
struct GpuPeak {
  double bf16 = 0;  // bf16 tensor cores, f32 accumulation
  double tf32 = 0;  // TF32 tensor cores
  double fp32 = 0;  // f32 fused multiply-adds on CUDA cores (a GEMM in f32 without TF32)

  // The peak of the math a CUDA backend's GEMMs run with activations `act`: bf16 tensor cores,
  // or for f32 TF32 tensor cores when allowed, else CUDA cores.
  double for_mode(DType act, bool allow_tf32) const;
};

GpuPeak gpu_peak(const GpuIdentity& gpu);

}  // namespace ax::train::cuda
