// The building blocks of the models: each block declares its parameters in a ParamLayout
// (under a name prefix), plans its activations in an Arena, and runs forward / backward on a
// Backend. A decoder-only model stacks them (model.cc); an encoder-decoder can reuse the same
// norms, attention and MLPs.
//
// Gradient convention (backend.h): parameter gradients and `dinp` are accumulated (+=); a caller
// zeroes a scratch gradient before handing it to a block.
#pragma once

#include <cstdint>
#include <string>

#include "ax/trainer/backend.h"
#include "ax/trainer/model.h"
#include "ax/trainer/tensor.h"

namespace ax::train::layers {

// A parameter's compute-dtype weights and f32 gradient; both empty when the parameter is absent
// (a linear layer without bias).
struct Weights {
  Tensor w;
  Tensor dw;
};

// Resolves parameter names to views once the buffers exist.
class ParamBinder {
 public:
  ParamBinder(const ParamLayout& layout, void* weights, DType weight_dtype, void* grads)
      : layout_(layout), weights_(weights), weight_dtype_(weight_dtype), grads_(grads) {}
  Weights get(const std::string& name) const;  // empty for ""

 private:
  const ParamLayout& layout_;
  void* weights_;
  DType weight_dtype_;
  void* grads_;
};

// y = x · Wᵀ + b. W (out, in), b (out).
struct Linear {
  std::string weight_name, bias_name;  // bias_name "" = no bias
  Weights weight, bias;

  void declare(ParamLayout* layout, const std::string& prefix, int64_t out, int64_t in,
               bool has_bias, double init_std);
  void bind(const ParamBinder& binder);
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
  Weights weight, bias;

  void declare(ParamLayout* layout, const std::string& prefix, int64_t dim, bool rms, bool has_bias,
               double eps);
  void bind(const ParamBinder& binder);
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
  int num_heads = 0, num_kv_heads = 0;
  int64_t head_dim = 0;
  bool rope = false;
  float rope_theta = 10000.f;
  bool causal = true;
  Linear qkv, proj;

  int64_t qkv_dim() const { return (num_heads + 2 * num_kv_heads) * head_dim; }
  void declare(ParamLayout* layout, const std::string& prefix, const ModelConfig& config,
               double proj_std);
  void bind(const ParamBinder& binder);
  void plan(Arena* arena, DType dtype, int64_t batch, int64_t seq, Acts* acts) const;
  void plan_scratch(Arena* arena, DType dtype, int64_t batch, int64_t seq, Scratch* scratch) const;
  // out (N, C) = proj(attention(qkv(inp))); inp (N, C).
  void forward(Backend& be, Tensor out, Tensor inp, const Acts& acts, const Scratch& scratch) const;
  void backward(Backend& be, Tensor dinp, Tensor dout, Tensor inp, const Acts& acts,
                const Scratch& scratch) const;
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
  int64_t hidden = 0;
  Linear fc, proj;

  void declare(ParamLayout* layout, const std::string& prefix, const ModelConfig& config,
               double proj_std);
  void bind(const ParamBinder& binder);
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

  void declare(ParamLayout* layout, const std::string& prefix, const ModelConfig& config);
  void bind(const ParamBinder& binder);
  void plan(Arena* arena, DType dtype, int64_t batch, int64_t seq, int64_t dim, Acts* acts) const;
  void plan_scratch(Arena* arena, DType dtype, int64_t batch, int64_t seq, int64_t dim,
                    Scratch* scratch) const;
  void forward(Backend& be, Tensor res_in, const Acts& acts, const Scratch& scratch) const;
  // On entry dres holds d(res_out); on return d(res_in).
  void backward(Backend& be, Tensor dres, Tensor res_in, const Acts& acts,
                const Scratch& scratch) const;
};

}  // namespace ax::train::layers
