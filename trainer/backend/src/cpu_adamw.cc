// AdamW on the CPU, in ax's reference rounding: every float operation rounded on its own, in the
// order below, no fused multiply-add. This file is compiled with -ffp-contract=off
// (trainer/CMakeLists.txt): GCC's default contracts a·b + c into an FMA where the target has one,
// so the x86-64-v3/v4 clones would round differently from the baseline clone and from the CUDA
// kernel (cuda_pointwise.cu's adamw_kernel, whose __fmul_rn/__fadd_rn round each operation).
// With it, both backends give the same bits on any CPU (docs/precision.md "AdamW's reference
// rounding").
#include <cmath>

#include "cpu_backend.h"
#include "cpu_math.h"

namespace ax::train::cpu {
namespace {

// torch.optim.AdamW (torch 1.13, single-tensor path) in the same float operations and order:
//   p *= 1 - lr·wd;  m = m·b1 + (1-b1)·g;  v = v·b2 + ((1-b2)·g)·g;
//   p += (-lr/bc1 · m) / (sqrt(v)/sqrt(bc2) + eps).
AX_CPU_KERNEL
void adamw_kernel(float* __restrict p, const float* __restrict g, float* __restrict m,
                  float* __restrict v, int64_t n, AdamWScalars s) {
  for (int64_t i = 0; i < n; ++i) {
    float grad = s.grad_scale * g[i];
    float param = p[i] * s.decay;
    float mi = m[i] * s.beta1 + s.one_minus_beta1 * grad;
    float vi = v[i] * s.beta2 + (s.one_minus_beta2 * grad) * grad;
    m[i] = mi;
    v[i] = vi;
    float denom = std::sqrt(vi) / s.bias2_sqrt + s.eps;
    p[i] = param + (s.neg_step_size * mi) / denom;
  }
}

constexpr int64_t kGrain = 1 << 14;  // elements per parallel chunk, at least

}  // namespace

void CpuBackend::adamw_update(Tensor params, Tensor grads, Tensor m, Tensor v,
                              const AdamWArgs& args) {
  const int64_t n = check_adamw_update(params, grads, m, v);
  const AdamWScalars s = adamw_scalars(args);
  float* p = params.as<float>();
  const float* g = grads.as<float>();
  float* pm = m.as<float>();
  float* pv = v.as<float>();
  pool_.parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
    adamw_kernel(p + b, g + b, pm + b, pv + b, e - b, s);
  });
}

}  // namespace ax::train::cpu
