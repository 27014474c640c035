#include "cpu_backend.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "ax/common/build_config.h"
#include "ax/common/env.h"
#include "ax/common/strings.h"
#include "cpu_math.h"

namespace ax::train {
namespace cpu {
namespace {

const EnvKnob<std::string> kCpuGemm("AX_CPU_GEMM", "auto",
                                    "GEMMs of the CPU backend: 'auto' (OpenBLAS when it loads) "
                                    "or 'builtin' (the loop kernel, for tests and comparisons)",
                                    {"auto", "builtin"});

// Read by the CUDA backend, declared here so that --help-env lists it in every build (a knob
// registers when its object file is linked, and this one always is).
const EnvKnob<std::string> kCudaAttention(
    "AX_CUDA_ATTENTION", "tensor-cores",
    "attention kernels of the CUDA backend: 'tensor-cores' (for the calls they take) or "
    "'cuda-cores' (the f32 CUDA-core kernels for every call)",
    {"tensor-cores", "cuda-cores"});

constexpr int64_t kRowGrain = 1 << 14;  // elements per parallel chunk, at least

// Rows per chunk so that a chunk holds about kRowGrain elements.
int64_t row_grain(int64_t cols) {
  return std::max<int64_t>(1, kRowGrain / std::max<int64_t>(cols, 1));
}

AX_CPU_KERNEL
double sum_squares_kernel(const float* x, int64_t n) {
  constexpr int kL = 8;
  double acc[kL] = {};
  int64_t i = 0;
  for (; i + kL <= n; i += kL) {
    for (int l = 0; l < kL; ++l) acc[l] += static_cast<double>(x[i + l]) * x[i + l];
  }
  double s = 0;
  for (int l = 0; l < kL; ++l) s += acc[l];
  for (; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

AX_CPU_KERNEL
void add_kernel(float* out, const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

}  // namespace

CpuBackend::CpuBackend(int threads, bool use_openblas)
    : pool_(threads), gemm_(use_openblas), scratch_(threads) {}

std::string CpuBackend::name() const {
  return str_cat("cpu (", pool_.size(), pool_.size() == 1 ? " thread, " : " threads, ",
                 gemm_.description(), ")");
}

// Peak FLOP/s is measured, not taken from a datasheet: CPU clocks under turbo, in VMs and with
// AVX-512 down-clocking are not knowable from /proc. Once per backend: two warm-up sgemms of
// 1536 × 1536 × 768 on all threads (clocks ramp up, the pool's threads wake, pages fault in),
// then the best single call over at least 0.15 s and 5 calls. A short cold measurement (the
// first version: 3 calls of a quarter of the size, ~10 ms) read lower than what training steps
// then reached. MFU on the CPU reads as the fraction of the attainable GEMM rate.
double CpuBackend::peak_flops() const {
  std::call_once(peak_once_, [this] {
    constexpr int64_t M = 1536, N = 1536, K = 768;
    constexpr double kMinSeconds = 0.15;
    constexpr int kWarmup = 2, kMinCalls = 5, kMaxCalls = 40;
    std::vector<float> a(M * K, 0.5f), b(K * N, 0.25f), c(M * N);
    const double counted_before = gemm_.flops();
    const auto start = std::chrono::steady_clock::now();
    double best = 1e30;
    for (int call = 0; call < kWarmup + kMaxCalls; ++call) {
      auto t0 = std::chrono::steady_clock::now();
      gemm_parallel({Trans::kNo, Trans::kNo, M, N, K, 1, a.data(), K, b.data(), N, 0, c.data(), N});
      auto t1 = std::chrono::steady_clock::now();
      if (call < kWarmup) continue;
      best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
      if (call + 1 - kWarmup >= kMinCalls &&
          std::chrono::duration<double>(t1 - start).count() >= kMinSeconds) {
        break;
      }
    }
    peak_flops_ = 2.0 * M * N * K / best;
    measurement_flops_ = gemm_.flops() - counted_before;
  });
  return peak_flops_;
}

double CpuBackend::executed_matmul_flops() const { return gemm_.flops() - measurement_flops_; }

StatusOr<void*> CpuBackend::alloc(size_t bytes) {
  size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (p == nullptr) return ResourceExhausted("cpu backend: cannot allocate ", human_bytes(bytes));
  std::memset(p, 0, rounded);
  allocations_.on_alloc(p, rounded);
  return p;
}

void CpuBackend::free(void* ptr) {
  allocations_.on_free(ptr);
  std::free(ptr);
}

void CpuBackend::copy_from_host(Tensor dst, const void* src) {
  AX_CHECK(!dst.empty()) << "copy_from_host: dst is empty";
  std::memcpy(dst.data, src, dst.bytes());
}

void CpuBackend::copy_to_host(void* dst, Tensor src) {
  AX_CHECK(!src.empty()) << "copy_to_host: src is empty";
  std::memcpy(dst, src.data, src.bytes());
}

void CpuBackend::copy(Tensor dst, Tensor src) {
  AX_CHECK(!dst.empty() && !src.empty()) << "copy: empty tensor";
  AX_CHECK_EQ(dst.numel(), src.numel())
      << "copy: " << dst.shape_string() << " from " << src.shape_string();
  AX_CHECK(dst.ndim == src.ndim && dst.shape == src.shape)
      << "copy: " << dst.shape_string() << " from " << src.shape_string();
  int64_t n = dst.numel();
  if (dst.dtype == src.dtype) {
    size_t size = dtype_size(dst.dtype);
    pool_.parallel_for(n, kRowGrain * 4, [&](int64_t b, int64_t e) {
      std::memmove(static_cast<char*>(dst.data) + b * size,
                   static_cast<const char*>(src.data) + b * size, (e - b) * size);
    });
  } else if (dst.dtype == DType::kBF16 && src.dtype == DType::kF32) {
    uint16_t* d = dst.as<uint16_t>();
    const float* s = src.as<float>();
    pool_.parallel_for(n, kRowGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) d[i] = bf16_from_f32(s[i]);
    });
  } else if (dst.dtype == DType::kF32 && src.dtype == DType::kBF16) {
    float* d = dst.as<float>();
    const uint16_t* s = src.as<uint16_t>();
    pool_.parallel_for(n, kRowGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) d[i] = f32_from_bf16(s[i]);
    });
  } else {
    AX_CHECK(false) << "copy: no cast from " << src.shape_string() << " to " << dst.shape_string();
  }
}

void CpuBackend::zero(Tensor t) {
  if (t.empty()) return;
  auto* p = static_cast<char*>(t.data);
  size_t size = dtype_size(t.dtype);
  pool_.parallel_for(t.numel(), kRowGrain * 4,
                     [&](int64_t b, int64_t e) { std::memset(p + b * size, 0, (e - b) * size); });
}

void CpuBackend::gemm_parallel(const GemmArgs& g) const {
  constexpr int64_t kAlign = 16;  // split on multiples of 16 rows/columns
  constexpr int64_t kMinSplitWork = 1 << 20;
  bool by_rows = g.M >= g.N;
  int64_t len = by_rows ? g.M : g.N;
  int64_t parts = std::min<int64_t>(pool_.size(), len / kAlign);
  if (parts <= 1 || g.M * g.N * g.K < kMinSplitWork) {
    gemm_(g);
    return;
  }
  pool_.run(parts, [&](int64_t p, int) {
    int64_t b = len * p / parts / kAlign * kAlign;
    int64_t e = p + 1 == parts ? len : len * (p + 1) / parts / kAlign * kAlign;
    GemmArgs s = g;
    if (by_rows) {
      s.M = e - b;
      s.A = g.ta == Trans::kNo ? g.A + b * g.lda : g.A + b;
      s.C = g.C + b * g.ldc;
    } else {
      s.N = e - b;
      s.B = g.tb == Trans::kNo ? g.B + b : g.B + b * g.ldb;
      s.C = g.C + b;
    }
    gemm_(s);
  });
}

float* CpuBackend::scratch(int thread, size_t floats) {
  auto& buffer = scratch_[thread];
  if (buffer.size() < floats) buffer.resize(floats);
  return buffer.data();
}

void CpuBackend::matmul_forward(Tensor out, Tensor inp, Tensor weight, Tensor bias) {
  // out (N, OC), inp (N, C), weight (OC, C), bias (OC) or empty.
  auto [N, C, OC] = check_matmul_forward(kPlan, out, inp, weight, bias);
  float* o = out.as<float>();
  float beta = 0;
  if (!bias.empty()) {
    const float* b = bias.as<float>();
    pool_.parallel_for(N, row_grain(OC), [&](int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n) std::memcpy(o + n * OC, b, OC * sizeof(float));
    });
    beta = 1;
  }
  gemm_parallel({Trans::kNo, Trans::kYes, N, OC, C, 1, inp.as<float>(), C, weight.as<float>(), C,
                 beta, o, OC});
}

void CpuBackend::matmul_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                                 Tensor weight) {
  // dinp (N, C) or empty, dweight (OC, C), dbias (OC) or empty, dout (N, OC), inp (N, C),
  // weight (OC, C).
  auto [N, C, OC] = check_matmul_backward(kPlan, dinp, dweight, dbias, dout, inp, weight);
  const float* dy = dout.as<float>();
  if (!dinp.empty()) {
    gemm_parallel({Trans::kNo, Trans::kNo, N, C, OC, 1, dy, OC, weight.as<float>(), C, 1,
                   dinp.as<float>(), C});
  }
  gemm_parallel({Trans::kYes, Trans::kNo, OC, C, N, 1, dy, OC, inp.as<float>(), C, 1,
                 dweight.as<float>(), C});
  if (!dbias.empty()) {
    float* db = dbias.as<float>();
    // Column blocks: each thread sums its columns over all rows in order (deterministic).
    pool_.parallel_for(OC, 64, [&](int64_t o0, int64_t o1) {
      for (int64_t n = 0; n < N; ++n) {
        const float* row = dy + n * OC;
        for (int64_t o = o0; o < o1; ++o) db[o] += row[o];
      }
    });
  }
}

void CpuBackend::add_forward(Tensor out, Tensor a, Tensor b) {
  check_add(kPlan, out, a, b);
  float* o = out.as<float>();
  const float* pa = a.as<float>();
  const float* pb = b.as<float>();
  pool_.parallel_for(out.numel(), kRowGrain, [&](int64_t i0, int64_t i1) {
    add_kernel(o + i0, pa + i0, pb + i0, i1 - i0);
  });
}

double CpuBackend::sum_squares(Tensor x) {
  constexpr int64_t kChunk = 1 << 16;  // fixed chunks: the same sum for any thread count
  const int64_t n = check_sum_squares(x);
  const float* p = x.as<float>();
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  if (static_cast<int64_t>(partials_.size()) < chunks) partials_.resize(chunks);
  pool_.run(chunks, [&](int64_t c, int) {
    int64_t b = c * kChunk;
    partials_[c] = sum_squares_kernel(p + b, std::min(kChunk, n - b));
  });
  double s = 0;
  for (int64_t c = 0; c < chunks; ++c) s += partials_[c];
  return s;
}

}  // namespace cpu

std::unique_ptr<Backend> make_cpu_backend(int threads) {
  AX_CHECK_GE(threads, 0);
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  auto gemm = cpu::kCpuGemm.get();
  AX_CHECK(gemm.ok()) << gemm.status().to_string();
  bool use_openblas = AX_HAVE_OPENBLAS && *gemm == "auto";
  return std::make_unique<cpu::CpuBackend>(threads, use_openblas);
}

StatusOr<bool> tensor_core_attention_from_env() {
  AX_ASSIGN_OR_RETURN(std::string kernels, cpu::kCudaAttention.get());
  return kernels == "tensor-cores";
}

}  // namespace ax::train
