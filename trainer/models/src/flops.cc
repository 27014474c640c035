#include "ax/trainer/models/flops.h"

namespace ax::train {

double flops_per_token(int64_t matmul_params, int64_t layers, int64_t heads, int64_t head_dim,
                       int64_t seq_len, bool causal) {
  return 6.0 * static_cast<double>(matmul_params) +
         (causal ? 6.0 : 12.0) * static_cast<double>(layers) * static_cast<double>(heads) *
             static_cast<double>(head_dim) * static_cast<double>(seq_len);
}

}  // namespace ax::train
