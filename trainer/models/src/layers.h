// The building blocks of the models: each block declares its parameters in a ParamLayout
// (under a name prefix), binds their views from the ParamStore, plans its activations in an
// Arena, and runs forward / backward on a Backend. A decoder-only model stacks them (model.cc); an
// encoder-decoder can reuse the same norms, attention and MLPs.
//
// Gradient convention (backend.h): parameter gradients and `dinp` are accumulated (+=); a caller
// zeroes a scratch gradient before handing it to a block.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ax/trainer/backend/backend.h"
#include "ax/trainer/backend/tensor.h"
#include "ax/trainer/models/model.h"
#include "ax/trainer/parallel/param_store.h"

namespace ax::train::layers {

// The tensor-parallel group as the layers see it: this rank's index, the group size and an
// in-place sum over the group (nothing to do when alone; a failure ends the process).
struct TensorGroup {
  int rank = 0, size = 1;
  comm::Communicator* comm = nullptr;
  void all_reduce(Tensor t) const;
};

// What the blocks of a transformer read from the model config, resolved once (BlockOptions::of).
struct BlockOptions {
  int64_t dim = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0, hidden = 0;
  bool rms_norm = false;
  double norm_eps = 1e-5;
  std::optional<Glu> glu;  // a gated MLP (SwiGLU, GeGLU); none: GELU
  bool rope = false;
  RopeSpec rope_spec;  // with rope: theta and scaling
  bool bias = true;
  double init_std = 0.02;      // every matrix that reads the residual stream (qkv, fc)
  double proj_std = 0.02;      // attention's projection into the residual stream
  double mlp_proj_std = 0.02;  // the MLP's projection into the residual stream
  static BlockOptions of(const ModelConfig& config);
};

// Dropout in a training forward pass (docs/t5.md "Dropout"). Each site of the model (a layer's
// branch output, MLP hidden units, embeddings, final norms) has a number; its mask is a hash of
// the step's seed, the site, the row's key and the feature (Backend::dropout_forward), so no
// mask is stored, the backward pass draws it again, and rows keyed by their place in the data
// get the same masks on every mesh.
struct Dropout {
  double rate = 0;
  bool active = false;  // this forward pass drops (training, rate > 0)
  uint64_t seed = 0;    // the step's

  DropoutSpec spec(uint32_t site, int64_t feature_offset) const;
};

// One site of a forward pass: `keys` (N) i32 key the rows of the tensor it drops from.
struct DropSite {
  const Dropout* dropout = nullptr;
  Tensor keys;
  uint32_t site = 0;
  int64_t feature_offset = 0;  // a tensor-parallel rank's first column of a split feature axis

  bool on() const { return dropout != nullptr && dropout->active; }
  // In place: t (N, F) = dropout(t).
  void forward(Backend& be, Tensor t) const;
  // dinp (N, F) += the gradient through the mask of dout.
  void backward(Backend& be, Tensor dinp, Tensor dout) const;
  // The gradient at the site's input: dout itself when the site drops nothing, else dout through
  // the mask, written into `scratch` (N, F).
  Tensor gradient(Backend& be, Tensor dout, Tensor scratch) const;
};

// What a layer reads besides its residual stream; every field may be empty.
struct LayerContext {
  Tensor segments{};         // (B, T) i32: tokens of different segments never attend
  Tensor bias{};             // self-attention's additive position bias (1, NH, T, T) (T5)
  Tensor dbias{};            // backward: its f32 gradient, accumulated (+=) over the layers
  Tensor memory{};           // cross-attention's keys and values come from (B·Te, C): the encoder
  Tensor dmemory{};          // backward: the memory's gradient, accumulated (+=); partial per
                             // tensor rank (the caller sums it over the group once)
  Tensor memory_segments{};  // (B, Te) i32: segments of the memory's rows
  const Dropout* dropout = nullptr;  // none, or the model's (active or not)
  Tensor dropout_keys{};             // (B·T) i32: the rows' keys, the same at every position
  // Sequence parallelism (docs/sharding.md "Sequence parallelism"): the T positions are the
  // slice [first_position, first_position + T) of longer rows, whose other slices the ranks of
  // `seq` hold; self-attention gathers the whole row's keys and values over it
  // (seq_attention.h), RoPE turns by the true positions. Null: whole rows.
  comm::Communicator* seq = nullptr;
  int64_t first_position = 0;
};

// How a Linear is split over the tensor group (Megatron): kColumn splits the output features
// (its weight's rows and its bias), in blocks: packed qkv has three (q, k, v), a gated fc two
// (gate, up), each split evenly; kRow splits the input features (the weight's columns); its bias
// is whole on every rank and added by rank 0 only, so the sum over the group adds it once.
struct LinearSplit {
  enum Kind { kNone, kColumn, kRow } kind = kNone;
  std::vector<int64_t> blocks;  // kColumn: logical sizes of the blocks of the output features
};

// y = x · Wᵀ + b. W (out, in), b (out). `out` and `in` are logical sizes; with a split, this
// rank's weight is its part of them.
struct Linear {
  std::string weight_name, bias_name;  // bias_name "" = no bias
  ParamViews weight, bias;
  bool bias_in_forward = true;  // false on row-parallel ranks other than 0

  void declare(ParamLayout* layout, const std::string& prefix, int64_t out, int64_t in,
               bool has_bias, double init_std, const TensorGroup& tp = {},
               const LinearSplit& split = {});
  void bind(const ParamStore& store);
  void forward(Backend& be, Tensor out, Tensor inp) const;  // out (N,out), inp (N,in)
  void backward(Backend& be, Tensor dinp, Tensor dout, Tensor inp) const;
};

// LayerNorm (with optional bias) or RMSNorm over the last dimension.
struct Norm {
  struct Acts {
    Tensor out;   // (N, C)
    Tensor mean;  // (N) f32, LayerNorm only
    Tensor rstd;  // (N) f32
  };
  bool rms = false;
  float eps = 1e-5f;
  std::string weight_name, bias_name;
  ParamViews weight, bias;

  void declare(ParamLayout* layout, const std::string& prefix, int64_t dim, bool rms, bool has_bias,
               double eps);
  void bind(const ParamStore& store);
  void plan(Arena* arena, DType dtype, int64_t rows, int64_t dim, Acts* acts) const;
  void forward(Backend& be, const Acts& acts, Tensor inp) const;
  void backward(Backend& be, Tensor dinp, Tensor dout, Tensor inp, const Acts& acts) const;
};

// Self-attention with a packed qkv projection, optional RoPE and grouped-query heads.
struct SelfAttention {
  struct Acts {
    Tensor qkv;  // (B, T, (NH+2KVH)*HD), after RoPE: what attention reads
    Tensor out;  // (B, T, NH*HD)
    Tensor lse;  // (B, NH, T) f32
  };
  // Shared by all layers (only one layer runs at a time).
  struct Scratch {
    Tensor qkv_pre;   // (B, T, QKV) before RoPE (rope only)
    Tensor dqkv;      // (B, T, QKV)
    Tensor dqkv_pre;  // (B, T, QKV) (rope only)
    Tensor dout;      // (B, T, NH*HD)
  };
  int num_heads = 0, num_kv_heads = 0;  // this rank's heads (all / tensor group size)
  int64_t head_dim = 0;
  TensorGroup tp;
  bool rope = false;
  RopeSpec rope_spec;
  bool causal = true;
  Linear qkv, proj;

  int64_t qkv_dim() const { return (num_heads + 2 * num_kv_heads) * head_dim; }
  // The packed qkv's heads, causal mask and 1/sqrt(head_dim) scale, for the attention op, with
  // the batch's segment ids (B, T) i32 and position bias, or none.
  AttentionSpec spec(const LayerContext& ctx) const;
  void declare(ParamLayout* layout, const std::string& prefix, const BlockOptions& options,
               const TensorGroup& tp);
  void bind(const ParamStore& store);
  void plan(Arena* arena, DType dtype, int64_t batch, int64_t seq, Acts* acts) const;
  void plan_scratch(Arena* arena, DType dtype, int64_t batch, int64_t seq, Scratch* scratch) const;
  // out (N, C) = proj(attention(qkv(inp))); inp (N, C). Reads ctx's segments and bias;
  // backward accumulates ctx.dbias.
  void forward(Backend& be, Tensor out, Tensor inp, const Acts& acts, const Scratch& scratch,
               const LayerContext& ctx) const;
  void backward(Backend& be, Tensor dinp, Tensor dout, Tensor inp, const Acts& acts,
                const Scratch& scratch, const LayerContext& ctx) const;
};

// Attention from the residual stream (queries) to a memory (keys and values: the encoder's
// output), T5's EncDecAttention: separate q and kv projections, no mask but the segments, no
// position bias.
struct CrossAttention {
  struct Acts {
    Tensor q;    // (B, T, NH*HD)
    Tensor kv;   // (B, Te, 2*KVH*HD)
    Tensor out;  // (B, T, NH*HD)
    Tensor lse;  // (B, NH, T) f32
  };
  struct Scratch {
    Tensor dq, dkv, dout;
  };
  int num_heads = 0, num_kv_heads = 0;  // this rank's heads
  int64_t head_dim = 0;
  Linear q, kv, proj;

  AttentionSpec spec(const LayerContext& ctx) const;
  void declare(ParamLayout* layout, const std::string& prefix, const BlockOptions& options,
               const TensorGroup& tp);
  void bind(const ParamStore& store);
  void plan(Arena* arena, DType dtype, int64_t batch, int64_t seq, int64_t memory_seq,
            Acts* acts) const;
  void plan_scratch(Arena* arena, DType dtype, int64_t batch, int64_t seq, int64_t memory_seq,
                    Scratch* scratch) const;
  void forward(Backend& be, Tensor out, Tensor inp, const Acts& acts,
               const LayerContext& ctx) const;
  // dinp += the queries' input gradient, ctx.dmemory += the keys' and values'.
  void backward(Backend& be, Tensor dinp, Tensor dout, Tensor inp, const Acts& acts,
                const Scratch& scratch, const LayerContext& ctx) const;
};

// T5's relative position bias of one stack: a (buckets, NH) table, split over the tensor group
// by heads, and the bucket of each (query, key) pair, computed once on the host
// (position_buckets.h). forward gives the (1, NH, T, T) bias every layer of the stack adds.
struct RelativeBias {
  std::string name;
  ParamViews table;
  int num_heads = 0;  // this rank's
  int64_t seq = 0;
  Tensor buckets;  // (1, T, T) i32
  Tensor bias;     // (1, NH, T, T), compute dtype
  Tensor dbias;    // (1, NH, T, T) f32

  void declare(ParamLayout* layout, const std::string& prefix, int64_t num_buckets,
               const BlockOptions& options, const TensorGroup& tp);
  void bind(const ParamStore& store);
  void plan(Arena* arena, DType dtype, int64_t seq_len);
  // After the allocation: the bucket ids onto the device.
  void upload(Backend& be, bool bidirectional, int num_buckets, int max_distance) const;
  void forward(Backend& be) const;
  // table.dw += the gradient of dbias (summed over the stack's layers by their backward).
  void backward(Backend& be) const;
};

// fc → GELU, or a gated linear unit (SwiGLU, GeGLU) over fc's two halves → proj.
struct Mlp {
  struct Acts {
    Tensor fch;  // (N, F) GELU or (N, 2F) gated: the gate, then the up projection
    Tensor act;  // (N, F)
  };
  struct Scratch {
    Tensor dfch;   // (N, F or 2F)
    Tensor dact;   // (N, F)
    Tensor ddrop;  // (N, F) the gradient before the hidden units' dropout (dropout only)
  };
  std::optional<Glu> glu;  // none: GELU
  int64_t hidden = 0;      // this rank's width (hidden_dim / tensor group size)
  TensorGroup tp;
  Linear fc, proj;

  void declare(ParamLayout* layout, const std::string& prefix, const BlockOptions& options,
               const TensorGroup& tp);
  void bind(const ParamStore& store);
  void plan(Arena* arena, DType dtype, int64_t rows, Acts* acts) const;
  void plan_scratch(Arena* arena, DType dtype, int64_t rows, Scratch* scratch,
                    bool dropout = false) const;
  // `drop`: dropout of the hidden units (act), in place (the projection reads them dropped).
  void forward(Backend& be, Tensor out, Tensor inp, const Acts& acts,
               const DropSite& drop = {}) const;
  void backward(Backend& be, Tensor dinp, Tensor dout, Tensor inp, const Acts& acts,
                const Scratch& scratch, const DropSite& drop = {}) const;
};

// A pre-norm transformer layer: x + attn(ln1(x)), then (with cross-attention, T5's decoder)
// + cross(ln_cross(·), memory), then + mlp(ln2(·)).
struct DecoderLayer {
  struct Acts {
    Norm::Acts ln1, ln_cross, ln2;
    SelfAttention::Acts attn;
    CrossAttention::Acts cross;
    Mlp::Acts mlp;
    Tensor res_mid;    // (N, C) after the attention residual
    Tensor res_cross;  // (N, C) after the cross-attention residual (cross-attention only)
    Tensor res_out;    // (N, C)
  };
  struct Scratch {
    Tensor branch;  // (N, C) output of a branch before its residual add
    Tensor dln;     // (N, C) gradient at a norm's output
    SelfAttention::Scratch attn;
    CrossAttention::Scratch cross;
    Mlp::Scratch mlp;
  };
  Norm ln1, ln_cross, ln2;
  SelfAttention attn;
  CrossAttention cross;
  bool has_cross = false;
  Mlp mlp;
  TensorGroup tp;
  // Dropout (ctx.dropout): sites dropout_site + kDrop* of the model's numbering; `dropout` plans
  // the scratch it needs.
  bool dropout = false;
  // T5x also drops the MLP's hidden units; GPT-2 and Megatron (the decoder-only families) do
  // not: only the branches' outputs and the embeddings.
  bool drop_hidden = true;
  uint32_t dropout_site = 0;
  enum : uint32_t { kDropAttn, kDropCross, kDropHidden, kDropMlp, kDropSites };

  // With a tensor group, each branch's input gradient and output are summed over the group.
  // cross_attention: the layer attends to a memory (plan's memory_seq rows per example).
  void declare(ParamLayout* layout, const std::string& prefix, const BlockOptions& options,
               const TensorGroup& tp = {}, bool cross_attention = false);
  void bind(const ParamStore& store);
  void plan(Arena* arena, DType dtype, int64_t batch, int64_t seq, int64_t dim, Acts* acts,
            int64_t memory_seq = 0) const;
  void plan_scratch(Arena* arena, DType dtype, int64_t batch, int64_t seq, int64_t dim,
                    Scratch* scratch, int64_t memory_seq = 0) const;
  Tensor residual_before_mlp(const Acts& acts) const {
    return has_cross ? acts.res_cross : acts.res_mid;
  }
  void forward(Backend& be, Tensor res_in, const Acts& acts, const Scratch& scratch,
               const LayerContext& ctx = {}) const;
  // On entry dres holds d(res_out); on return d(res_in).
  void backward(Backend& be, Tensor dres, Tensor res_in, const Acts& acts, const Scratch& scratch,
                const LayerContext& ctx = {}) const;
};

}  // namespace ax::train::layers
