// What MFU counts: the model FLOPs of a token (docs/trainer.md "MFU").
#pragma once

#include <cstdint>

namespace ax::train {

// Model FLOPs per token, forward + backward: 6 N + 12 L H Q T (PaLM), where N counts the
// parameters that take part in matmuls (the LM head once; not an untied input embedding) and
// the second term the attention products. `causal` halves the attention term, as MaxText counts
// it: a causal kernel skips the masked half, so PaLM's whole count (what NVIDIA's published
// figures use, causal = false) can exceed what the hardware executes and read above 100 %.
double flops_per_token(int64_t matmul_params, int64_t layers, int64_t heads, int64_t head_dim,
                       int64_t seq_len, bool causal);

}  // namespace ax::train
