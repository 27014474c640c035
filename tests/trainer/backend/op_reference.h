// Naive double-precision references of the backend ops, for the op table (op_table.h): the
// formulas of backend.h written out loop by loop, from the float inputs. Each returns the
// outputs and, where written, what the backward pass adds to each gradient ("d<input>").
#pragma once

#include <cstdint>
#include <optional>

#include "op_table.h"

namespace ax::train::optable {

struct EmbeddingShape {
  int64_t B, T, Vp, C, wpe_rows;  // wpe_rows 0: no position table
};
Want embedding_reference(const EmbeddingShape& s, const Host& h);

struct NormShape {
  int64_t N, C;
  bool bias;
  float eps;
};
Want layernorm_reference(const NormShape& s, const Host& h);
Want rmsnorm_reference(const NormShape& s, const Host& h);

struct MatmulShape {
  int64_t N, C, OC;
  bool bias;   // the forward pass adds a bias
  bool dinp;   // the backward pass computes dinp
  bool dbias;  // ... and dbias (also without a forward bias)
};
Want matmul_reference(const MatmulShape& s, const Host& h);

// Llama 3.1's frequency scaling of RoPE (Hugging Face's rope_type "llama3").
struct Llama3Scaling {
  double factor, low_freq_factor, high_freq_factor, original_max_positions;
};
struct RopeShape {
  int64_t B, T;
  int NH, KVH;
  int64_t HD;
  float theta;
  int64_t position = 0;  // of the first row
  std::optional<Llama3Scaling> llama3;
};
Want rope_reference(const RopeShape& s, const Host& h);

// q "q" (B, Tq, Rq) and kv "kv" (B, Tk, Rkv), or both "qkv" when packed; "bias" and the segment
// ids "q_segments", "k_segments" when the case has them.
struct AttentionShape {
  int64_t B, Tq, Tk;
  int NH, KVH;
  int64_t HD;
  bool causal;
  float scale;
  int64_t bias_batch;  // 0: no bias
  bool segments, packed;
  int64_t Rq, Rkv, k_offset;
  // AttentionSpec's first positions of the queries and the keys (a slice of a row).
  int64_t q_first = 0, k_first = 0;
};
Want attention_reference(const AttentionShape& s, const Host& h);

Want gelu_reference(const Host& h);
Want glu_reference(int64_t N, int64_t F, Glu glu, const Host& h);
Want dropout_reference(int64_t N, int64_t F, const DropoutSpec& spec, const Host& h);
Want add_reference(const Host& h);

struct PositionBiasShape {
  int64_t Bb, NH, Tq, Tk, K;
};
Want position_bias_reference(const PositionBiasShape& s, const Host& h);

struct CrossEntropyShape {
  int64_t N, V, Vp;
  float z_loss, dloss;
};
Want cross_entropy_reference(const CrossEntropyShape& s, const Host& h);

struct ShardShape {
  int64_t N, Vl, v_begin, v_count;
  float z_loss, dloss;
};
Want ce_shard_reference(const ShardShape& s, const Host& h);

struct AdamWShape {
  int64_t n, steps;
  AdamWArgs args;   // of the first step; the step count goes up by one per step
  bool same_grads;  // every step reads grads row 0, else row s
};
// torch.optim.AdamW, single-tensor path: decoupled decay first, then the bias-corrected step.
Want adamw_reference(const AdamWShape& s, const Host& h);

}  // namespace ax::train::optable
