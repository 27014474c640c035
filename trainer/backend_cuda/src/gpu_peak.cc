#include "gpu_peak.h"

#include <cctype>

namespace ax::train::cuda {
namespace {

constexpr double kT = 1e12;

bool has(const std::string& name, const char* part) { return name.find(part) != std::string::npos; }

// "H20" as a whole model number: not the start of "H200".
bool is_h20(const GpuIdentity& gpu) {
  for (size_t at = gpu.name.find("H20"); at != std::string::npos;
       at = gpu.name.find("H20", at + 1)) {
    const size_t next = at + 3;
    if (next == gpu.name.size() || !std::isdigit(static_cast<unsigned char>(gpu.name[next]))) {
      return true;
    }
  }
  return false;
}

// Hopper (sm_90) datasheets. The SM count tells the boards apart when the name does not: H20
// has 78 SMs, the PCIe boards 114, SXM / H200 / GH200 132 (H100 NVL and H200 NVL have 132 SMs
// at a lower clock and power, so they go by name).
GpuPeak hopper(const GpuIdentity& gpu) {
  if (is_h20(gpu) || gpu.sms == 78) return {148 * kT, 74 * kT, 44 * kT};
  if (has(gpu.name, "NVL")) return {835.5 * kT, 417.5 * kT, 60 * kT};
  if (has(gpu.name, "PCIe") || gpu.sms == 114) return {756.5 * kT, 378 * kT, 51 * kT};
  if (gpu.sms >= 132) return {989.4 * kT, 494.7 * kT, 66.9 * kT};
  return {};
}

// Ampere (sm_80) datasheets: A100 and A800 (SXM and PCIe), A30.
GpuPeak ampere(const GpuIdentity& gpu) {
  if (has(gpu.name, "A100") || has(gpu.name, "A800")) return {312 * kT, 156 * kT, 19.5 * kT};
  if (has(gpu.name, "A30")) return {165 * kT, 82 * kT, 10.3 * kT};
  return {};
}

// Dense FLOP per SM per clock: {bf16 with f32 accumulation, TF32, f32 FMA}.
GpuPeak per_sm_clock(const GpuIdentity& gpu) {
  if (gpu.major == 8 && gpu.minor == 0) return {2048, 1024, 128};
  if (gpu.major == 8) {
    // sm_86 / sm_87 / sm_89 (A10, A40, L4, L40S); GeForce boards accumulate bf16 in f32 at half
    // that rate.
    const double tensor = has(gpu.name, "GeForce") ? 512 : 1024;
    return {tensor, tensor / 2, 256};
  }
  if (gpu.major == 9) return {4096, 2048, 256};
  if (gpu.major == 10) return {8192, 4096, 256};  // B200 class: an estimate until measured
  return {};
}

}  // namespace

double GpuPeak::for_mode(DType act, bool allow_tf32) const {
  if (act == DType::kBF16) return bf16;
  return allow_tf32 ? tf32 : fp32;
}

GpuPeak gpu_peak(const GpuIdentity& gpu) {
  GpuPeak sheet;
  if (gpu.major == 9 && gpu.minor == 0) sheet = hopper(gpu);
  if (gpu.major == 8 && gpu.minor == 0) sheet = ampere(gpu);
  if (sheet.bf16 > 0) return sheet;
  const GpuPeak rate = per_sm_clock(gpu);
  const double clocks = static_cast<double>(gpu.sms) * gpu.clock_khz * 1e3;
  return {rate.bf16 * clocks, rate.tf32 * clocks, rate.fp32 * clocks};
}

}  // namespace ax::train::cuda
