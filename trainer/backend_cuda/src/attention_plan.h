// How the CUDA attention backward pass splits the gradient of a bias shared by the batch
// (bias (1, NH, Tq, Tk)): the dQ kernel's blocks each walk a chunk of batch rows in order and add
// their rows' bias gradients into one slot (cuda_attention.cu). One chunk adds straight into
// dbias; several write scratch partials that a last kernel sums in chunk order. The plan depends
// on the shapes only, so every device and every run gives the same bits. Pure host arithmetic
// without CUDA headers, so it is unit-tested in every build
// (tests/trainer/backend/attention_plan_test.cc).
#pragma once

#include <cstdint>

namespace ax::train::cuda {

// The dQ kernel's tiles and the plan's bounds: enough dQ blocks to fill a large GPU twice over
// (132 SMs × 2 blocks of 256 threads at ~128 registers), and partials of at most 64 MiB.
inline constexpr int64_t kAttnQueryTile = 32;
inline constexpr int64_t kDbiasTargetBlocks = 512;
inline constexpr int64_t kDbiasMaxPartialBytes = int64_t{64} << 20;

struct DbiasPlan {
  int64_t rows_per_chunk;  // batch rows one dQ block walks (1 unless the bias is shared)
  int64_t chunks;          // ceil(B / rows_per_chunk): the dQ grid's z extent
  bool partials;           // chunks > 1 for a shared bias: scratch partials, then their sum
};

// shared_dbias: bias_batch = 1 and its gradient is wanted.
DbiasPlan dbias_plan(int64_t B, int64_t Tq, int64_t Tk, int64_t NH, bool shared_dbias);

// Floats of scratch the backward pass needs: the row sums D = Σ dout·out (B·NH·Tq), then the
// partials (chunks · NH·Tq·Tk) when the plan has them.
int64_t attention_backward_scratch_floats(int64_t B, int64_t Tq, int64_t Tk, int64_t NH,
                                          bool shared_dbias);

}  // namespace ax::train::cuda
