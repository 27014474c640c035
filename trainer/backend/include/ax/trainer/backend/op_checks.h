// For Backend implementations: the argument checks every op starts with (a mismatch is a bug in
// model code: abort naming the op, the argument and both shapes, as backend.h says) and the
// host-side scalars of an AdamW step, derived once so that every backend computes the same bits.
//
// Each op has one check_<op> that every backend calls with its dtype plan, so a view the CUDA
// backend would refuse is refused by the CPU backend in the same plan (cpu-bf16) with the same
// message. The plan (backend.h "Dtypes"): activations, their gradients and compute weights in
// `act`; statistics (mean, rstd, lse, losses, rowmax, sums), parameter gradients, master weights
// and optimizer state in f32; token and target ids in i32.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <utility>

#include "ax/trainer/backend/adamw_scalars.h"
#include "ax/trainer/backend/backend.h"
#include "ax/trainer/backend/tensor.h"

namespace ax::train {

struct DTypePlan {
  DType act = DType::kF32;
};

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

// ---- One check per op (argument order as in backend.h); each returns the op's sizes. ----

struct EmbeddingDims {
  int64_t B, T, Vp, C;
};
EmbeddingDims check_embedding_forward(DTypePlan p, const Tensor& out, const Tensor& tokens,
                                      const Tensor& wte, const Tensor& wpe);
EmbeddingDims check_embedding_backward(DTypePlan p, const Tensor& dwte, const Tensor& dwpe,
                                       const Tensor& dout, const Tensor& tokens);

struct RowDims {
  int64_t N, C;
};
RowDims check_layernorm_forward(DTypePlan p, const Tensor& out, const Tensor& mean,
                                const Tensor& rstd, const Tensor& inp, const Tensor& weight,
                                const Tensor& bias);
RowDims check_layernorm_backward(DTypePlan p, const Tensor& dinp, const Tensor& dweight,
                                 const Tensor& dbias, const Tensor& dout, const Tensor& inp,
                                 const Tensor& weight, const Tensor& mean, const Tensor& rstd);
RowDims check_rmsnorm_forward(DTypePlan p, const Tensor& out, const Tensor& rstd, const Tensor& inp,
                              const Tensor& weight);
RowDims check_rmsnorm_backward(DTypePlan p, const Tensor& dinp, const Tensor& dweight,
                               const Tensor& dout, const Tensor& inp, const Tensor& weight,
                               const Tensor& rstd);

struct MatmulDims {
  int64_t N, C, OC;
};
MatmulDims check_matmul_forward(DTypePlan p, const Tensor& out, const Tensor& inp,
                                const Tensor& weight, const Tensor& bias);
MatmulDims check_matmul_backward(DTypePlan p, const Tensor& dinp, const Tensor& dweight,
                                 const Tensor& dbias, const Tensor& dout, const Tensor& inp,
                                 const Tensor& weight);

// A packed qkv row: R = (NH + 2·KVH)·HD.
struct HeadDims {
  int64_t B, T, R, HD;
};
// RoPE: `y` (out or dinp) and `x` (inp or dout) are (B, T, R) with an even HD.
HeadDims check_rope(DTypePlan p, const Tensor& y, const Tensor& x, int num_heads, int num_kv_heads,
                    const char* op, const char* y_name, const char* x_name);
// Attention: sizes of q (B, Tq, Rq), kv (B, Tk, Rkv) and the spec; bias_batch is Bb (0: none).
struct AttentionDims {
  int64_t B, Tq, Tk, NH, KVH, HD, Rq, Rkv, bias_batch;
  bool segments;
};
AttentionDims check_attention_forward(DTypePlan p, const Tensor& out, const Tensor& lse,
                                      const Tensor& q, const Tensor& kv, const AttentionSpec& s);
AttentionDims check_attention_backward(DTypePlan p, const Tensor& dq, const Tensor& dkv,
                                       const Tensor& dbias, const Tensor& dout, const Tensor& out,
                                       const Tensor& lse, const Tensor& q, const Tensor& kv,
                                       const AttentionSpec& s);

// GELU: every view (rows, cols) alike; returns {rows, cols}.
RowDims check_gelu_forward(DTypePlan p, const Tensor& out, const Tensor& inp);
RowDims check_gelu_backward(DTypePlan p, const Tensor& dinp, const Tensor& dout, const Tensor& inp);
// Dropout: returns {N, F} for out/inp/dinp/dout (N, F), row_keys (N) i32; the features'
// indices (spec.feature_offset + f) must fit in 32 bits.
RowDims check_dropout_forward(DTypePlan p, const Tensor& out, const Tensor& inp,
                              const Tensor& row_keys, const DropoutSpec& spec);
RowDims check_dropout_backward(DTypePlan p, const Tensor& dinp, const Tensor& dout,
                               const Tensor& row_keys, const DropoutSpec& spec);
// Gated linear units: returns {N, F} for out/dout (N, F) and inp/dinp (N, 2F); `glu` is one of
// the enum's values.
RowDims check_glu_forward(DTypePlan p, const Tensor& out, const Tensor& inp, Glu glu);
RowDims check_glu_backward(DTypePlan p, const Tensor& dinp, const Tensor& dout, const Tensor& inp,
                           Glu glu);
// add_forward takes the activation dtype (the residual stream) or f32 (gradient shards), the
// same for all three views; returns {rows, cols}.
RowDims check_add(DTypePlan p, const Tensor& out, const Tensor& a, const Tensor& b);

// T5's relative position bias: table (num_buckets, NH) in the activation dtype (dtable f32),
// buckets (Bb, Tq, Tk) i32, bias (Bb, NH, Tq, Tk) in the activation dtype (dbias f32). The
// bucket ids are not read (the CPU backend range-checks them itself).
struct PositionBiasDims {
  int64_t Bb, NH, Tq, Tk, num_buckets;
};
PositionBiasDims check_position_bias_forward(DTypePlan p, const Tensor& bias, const Tensor& table,
                                             const Tensor& buckets);
PositionBiasDims check_position_bias_backward(DTypePlan p, const Tensor& dtable,
                                              const Tensor& dbias, const Tensor& buckets);

// Cross-entropy over (N, Vp) logits with V real columns and a finite z_loss >= 0; returns
// {N, Vp}.
std::pair<int64_t, int64_t> check_cross_entropy_forward(DTypePlan p, const Tensor& losses,
                                                        const Tensor& logits, const Tensor& targets,
                                                        int64_t V, float z_loss);
std::pair<int64_t, int64_t> check_cross_entropy_backward(DTypePlan p, const Tensor& dlogits,
                                                         const Tensor& logits,
                                                         const Tensor& targets, int64_t V,
                                                         float z_loss);
// The vocabulary-shard trio; each returns {N, Vl}.
std::pair<int64_t, int64_t> check_ce_shard_max(DTypePlan p, const Tensor& rowmax,
                                               const Tensor& logits, int64_t v_count);
std::pair<int64_t, int64_t> check_ce_shard_sums(DTypePlan p, const Tensor& sums,
                                                const Tensor& logits, const Tensor& rowmax,
                                                const Tensor& targets, int64_t v_count);
std::pair<int64_t, int64_t> check_ce_shard_backward(DTypePlan p, const Tensor& dlogits,
                                                    const Tensor& logits, const Tensor& lse,
                                                    const Tensor& targets, int64_t v_count,
                                                    float z_loss);

// f32 views of one element count; returns it.
int64_t check_sum_squares(const Tensor& x);
int64_t check_adamw_update(const Tensor& params, const Tensor& grads, const Tensor& m,
                           const Tensor& v);

// torch.optim.AdamW's scalars (torch 1.13, single-tensor path), in double from the float
// hyperparameters as torch derives them. Checks that args.step is 1-based.
AdamWScalars adamw_scalars(const AdamWArgs& args);

}  // namespace ax::train
