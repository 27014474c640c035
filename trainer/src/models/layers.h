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
#include <string>
#include <vector>

#include "ax/trainer/backend.h"
#include "ax/trainer/model.h"
#include "ax/trainer/param_store.h"
#include "ax/trainer/tensor.h"

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
  bool swiglu = false;
  bool rope = false;
  double rope_theta = 10000;
  bool bias = true;
  double init_std = 0.02;
  double proj_std = 0.02;  // the projections into the residual stream
  static BlockOptions of(const ModelConfig& config);
};

// How a Linear is split over the tensor group (Megatron): kColumn splits the output features
// (its weight's rows and its bias), in blocks: packed qkv has three (q, k, v), SwiGLU's fc two
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
  float rope_theta = 10000.f;
  bool causal = true;
  Linear qkv, proj;

  int64_t qkv_dim() const { return (num_heads + 2 * num_kv_heads) * head_dim; }
  // The packed qkv's heads, causal mask and 1/sqrt(head_dim) scale, for the attention op, with
  // the batch's segment ids (B, T) i32 or none.
  AttentionSpec spec(Tensor segments) const;
  void declare(ParamLayout* layout, const std::string& prefix, const BlockOptions& options,
               const TensorGroup& tp);
  void bind(const ParamStore& store);
  void plan(Arena* arena, DType dtype, int64_t batch, int64_t seq, Acts* acts) const;
  void plan_scratch(Arena* arena, DType dtype, int64_t batch, int64_t seq, Scratch* scratch) const;
  // out (N, C) = proj(attention(qkv(inp))); inp (N, C). segments (B, T) i32 or empty: tokens of
  // different segments never attend.
  void forward(Backend& be, Tensor out, Tensor inp, const Acts& acts, const Scratch& scratch,
               Tensor segments = {}) const;
  void backward(Backend& be, Tensor dinp, Tensor dout, Tensor inp, const Acts& acts,
                const Scratch& scratch, Tensor segments = {}) const;
};

// fc → GELU or SwiGLU → proj.
struct Mlp {
  struct Acts {
    Tensor fch;  // (N, F) GELU or (N, 2F) SwiGLU
    Tensor act;  // (N, F)
  };
  struct Scratch {
    Tensor dfch;  // (N, F or 2F)
    Tensor dact;  // (N, F)
  };
  bool swiglu = false;
  int64_t hidden = 0;  // this rank's width (hidden_dim / tensor group size)
  TensorGroup tp;
  Linear fc, proj;

  void declare(ParamLayout* layout, const std::string& prefix, const BlockOptions& options,
               const TensorGroup& tp);
  void bind(const ParamStore& store);
  void plan(Arena* arena, DType dtype, int64_t rows, Acts* acts) const;
  void plan_scratch(Arena* arena, DType dtype, int64_t rows, Scratch* scratch) const;
  void forward(Backend& be, Tensor out, Tensor inp, const Acts& acts) const;
  void backward(Backend& be, Tensor dinp, Tensor dout, Tensor inp, const Acts& acts,
                const Scratch& scratch) const;
};

// A pre-norm transformer layer: x + attn(ln1(x)), then + mlp(ln2(·)).
struct DecoderLayer {
  struct Acts {
    Norm::Acts ln1, ln2;
    SelfAttention::Acts attn;
    Mlp::Acts mlp;
    Tensor res_mid;  // (N, C) after the attention residual
    Tensor res_out;  // (N, C)
  };
  struct Scratch {
    Tensor branch;  // (N, C) output of a branch before its residual add
    Tensor dln;     // (N, C) gradient at a norm's output
    SelfAttention::Scratch attn;
    Mlp::Scratch mlp;
  };
  Norm ln1, ln2;
  SelfAttention attn;
  Mlp mlp;
  TensorGroup tp;

  // With a tensor group, each branch's input gradient and output are summed over the group.
  void declare(ParamLayout* layout, const std::string& prefix, const BlockOptions& options,
               const TensorGroup& tp = {});
  void bind(const ParamStore& store);
  void plan(Arena* arena, DType dtype, int64_t batch, int64_t seq, int64_t dim, Acts* acts) const;
  void plan_scratch(Arena* arena, DType dtype, int64_t batch, int64_t seq, int64_t dim,
                    Scratch* scratch) const;
  void forward(Backend& be, Tensor res_in, const Acts& acts, const Scratch& scratch,
               Tensor segments = {}) const;
  // On entry dres holds d(res_out); on return d(res_in).
  void backward(Backend& be, Tensor dres, Tensor res_in, const Acts& acts, const Scratch& scratch,
                Tensor segments = {}) const;
};

}  // namespace ax::train::layers
