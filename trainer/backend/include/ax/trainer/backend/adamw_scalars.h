// The scalars of one AdamW step as every backend's kernel takes them. No includes, so that the
// CUDA kernels (compiled as C++17 by nvcc) can use the same struct as the C++20 host code.
#pragma once

namespace ax::train {

struct AdamWScalars {
  float grad_scale, decay, beta1, one_minus_beta1, beta2, one_minus_beta2, bias2_sqrt, eps,
      neg_step_size;
};

}  // namespace ax::train
