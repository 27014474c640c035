// The language-model output shared by the model families: the token table as this rank holds it
// (whole, or split by rows over the tensor group, Megatron's vocabulary parallelism), and the
// cross-entropy of the logits (N, Vl) with optional z-loss, whole or vocabulary-parallel.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ax/trainer/backend/backend.h"
#include "ax/trainer/parallel/param_store.h"
#include "layers.h"

namespace ax::train::layers {

// Rows [v_begin, v_begin + Vl) of the padded vocabulary Vp, of which the first v_count are real
// tokens (the real vocabulary is V <= Vp).
struct VocabShard {
  int64_t V = 0, Vp = 0, Vl = 0, v_begin = 0, v_count = 0;
  static VocabShard of(int64_t vocab, int64_t padded, const TensorGroup& tp);
  // A (Vp, C) table of this shard: its rows of the logical table.
  ParamSpec table(const std::string& name, int64_t C, double init_std, bool matmul,
                  const TensorGroup& tp) const;
  // Token ids onto the device as this shard's rows (-1 for ids another shard holds).
  void upload_ids(Backend& be, Tensor dst, std::span<const int32_t> ids) const;
};

// Row `row` of logits (N, Vp) on the host, its first V (real) columns; row_f32 (Vp) f32 is scratch
// for a bf16 copy. The vocabulary must be whole (not split over tensor ranks).
std::vector<float> logits_row(Backend& be, Tensor logits, Tensor row_f32, const VocabShard& vocab,
                              int64_t row);

// Softmax cross-entropy of logits (N, Vl) against targets (< 0 ignored).
struct LmLoss {
  VocabShard vocab;
  TensorGroup tp;
  float z_loss = 0;
  Tensor targets;            // (N) i32
  Tensor losses;             // (N) f32
  Tensor rowmax, sums, lse;  // split vocabulary only: (N), (N, 2), (N) f32

  void plan(Arena* arena, int64_t rows);
  // The sum of the per-token losses over the non-ignored targets; uploads the targets.
  double forward(Backend& be, Tensor logits, std::span<const int32_t> host_targets);
  // logits := dloss · d(loss)/d(logits) in place.
  void backward(Backend& be, Tensor logits, float dloss) const;

 private:
  double split_forward(Backend& be, Tensor logits, std::span<const int32_t> host_targets);
};

}  // namespace ax::train::layers
