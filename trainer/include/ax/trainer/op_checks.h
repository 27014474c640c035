// For Backend implementations: the argument checks every op starts with (a mismatch is a bug in
// model code: abort naming the op, the argument and both shapes, as backend.h says) and the
// host-side scalars of an AdamW step, derived once so that every backend computes the same bits.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <utility>

#include "ax/trainer/adamw_scalars.h"
#include "ax/trainer/backend.h"
#include "ax/trainer/tensor.h"

namespace ax::train {

// t is non-empty and of `dtype`.
void expect_dtype(const Tensor& t, DType dtype, const char* op, const char* arg);
// t is a non-empty `rows` × `cols` matrix of `dtype` (leading dimensions multiply to rows).
void expect_matrix(const Tensor& t, DType dtype, int64_t rows, int64_t cols, const char* op,
                   const char* arg);
// t has exactly the shape `dims` and the dtype.
void expect_shape(const Tensor& t, DType dtype, std::initializer_list<int64_t> dims, const char* op,
                  const char* arg);
// The ce_shard_* ops' logits (N, Vl) of `dtype`, with 0 <= v_count <= Vl real columns, and their
// targets (N) i32 when given; returns {N, Vl}.
std::pair<int64_t, int64_t> expect_vocab_shard(const Tensor& logits, DType dtype,
                                               const Tensor& targets, int64_t v_count,
                                               const char* op);

// torch.optim.AdamW's scalars (torch 1.13, single-tensor path), in double from the float
// hyperparameters as torch derives them. Checks that args.step is 1-based.
AdamWScalars adamw_scalars(const AdamWArgs& args);

}  // namespace ax::train
