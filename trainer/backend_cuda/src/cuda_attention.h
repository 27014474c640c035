// What cuda_attention.cu (the dispatch and the CUDA-core kernels) and cuda_attention_tc.cu (the
// tensor-core kernels) share: the kernels' shapes, where the dQ kernels put the bias gradient,
// their grids, and the tensor-core launchers.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "attention_plan.h"
#include "attention_tc.h"
#include "cuda_kernels.h"

namespace ax::train::cuda {

// The shapes both kernel sets read (attention_tc.h's; B only by the tensor-core kernels).
using Dims = tc::Shape;

inline Dims dims_of(const AttnShape& s) {
  return {s.B,   s.Tq,        s.Tk,         s.NH,       s.KVH,   s.HD,     s.Rq,
          s.Rkv, s.NH * s.HD, s.NH / s.KVH, s.k_offset, s.scale, s.causal, s.causal_shift};
}

// Where the dQ kernels (both sets) put the bias gradient. Block z of grid.z walks batch rows
// [z·rows_per_block, ...) and adds into slot z (out + z·slot_stride); with `assign` the first of
// its rows writes the slot instead (scratch partials, which start as garbage).
struct DbiasOut {
  float* out;  // null: no bias gradient
  int64_t slot_stride;
  int64_t rows_per_block;
  bool assign;
};

inline dim3 grid_of(int64_t tiles, int64_t heads, int64_t batch) {
  return dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(heads),
              static_cast<unsigned>(batch));
}

// ---- cuda_attention_tc.cu: the tensor-core kernels' launchers (bf16; tc::eligible shapes) ----

// Lets the tensor-core kernels use up to `max_shared_bytes` of dynamic shared memory
// (attention_init).
void tc_attention_init(size_t max_shared_bytes);
// attention_forward on tensor cores.
void tc_attention_forward(bf16* out, float* lse, const bf16* q, const bf16* kv, const AttnShape& s,
                          const AttnMasks<bf16>& m, cudaStream_t stream);
// attention_backward's dK, dV and dQ (and the bias gradient into out_db) on tensor cores, after
// row_dots = D = Σ dO·O; plan.chunks is the dQ grid's z extent.
void tc_attention_backward(bf16* dq, bf16* dkv, const bf16* dout, const float* lse,
                           const float* row_dots, const bf16* q, const bf16* kv, const AttnShape& s,
                           const AttnMasks<bf16>& m, const DbiasPlan& plan, const DbiasOut& out_db,
                           cudaStream_t stream);

}  // namespace ax::train::cuda
