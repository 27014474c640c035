// The ops of the CUDA backend: check the views (dtype and shape, aborting on a mismatch as
// backend.h says), then launch. Activations and compute weights are bf16, statistics and
// parameter gradients f32. Unlike the CPU backend, token and target ids are not range-checked
// here: they live on the device (Model::forward checks them on the host).
#include <utility>

#include "ax/trainer/op_checks.h"
#include "cuda_backend.h"
#include "cuda_kernels.h"

namespace ax::train::cuda {
namespace {

constexpr DType kAct = DType::kBF16;
constexpr DType kF32 = DType::kF32;

bf16* act(const Tensor& t) { return static_cast<bf16*>(t.data); }
const bf16* act_or_null(const Tensor& t) { return t.empty() ? nullptr : act(t); }
float* f32(const Tensor& t) { return t.as<float>(); }
float* f32_or_null(const Tensor& t) { return t.empty() ? nullptr : t.as<float>(); }

struct EmbeddingDims {
  int64_t B, T, C;
};
EmbeddingDims embedding_dims(const Tensor& tokens, const Tensor& table, DType table_dtype,
                             const Tensor& pos, const Tensor& acts, const char* op,
                             const char* table_name, const char* pos_name, const char* acts_name) {
  expect_dtype(tokens, DType::kI32, op, "tokens");
  AX_CHECK_EQ(tokens.ndim, 2) << op << ": tokens is " << tokens.shape_string();
  expect_dtype(table, table_dtype, op, table_name);
  AX_CHECK_EQ(table.ndim, 2) << op << ": " << table_name << " is " << table.shape_string();
  EmbeddingDims d{tokens.dim(0), tokens.dim(1), table.dim(1)};
  expect_shape(acts, kAct, {d.B, d.T, d.C}, op, acts_name);
  if (!pos.empty()) {
    expect_dtype(pos, table_dtype, op, pos_name);
    AX_CHECK(pos.ndim == 2 && pos.dim(0) >= d.T && pos.dim(1) == d.C)
        << op << ": " << pos_name << " is " << pos.shape_string() << " for T=" << d.T
        << ", C=" << d.C;
  }
  return d;
}

// (B, T, rows of (NH + 2·KVH)·HD) with an even HD.
struct HeadDims {
  int64_t B, T, R, HD;
};
HeadDims head_dims(const Tensor& t, int num_heads, int num_kv_heads, const char* op,
                   const char* arg) {
  expect_dtype(t, kAct, op, arg);
  AX_CHECK(t.ndim == 3 && num_heads > 0 && num_kv_heads > 0 && num_heads % num_kv_heads == 0)
      << op << ": " << arg << " " << t.shape_string() << " with " << num_heads << " heads and "
      << num_kv_heads << " kv heads";
  int64_t heads = num_heads + 2 * num_kv_heads, R = t.dim(2);
  AX_CHECK_EQ(R % heads, 0) << op << ": " << arg << " " << t.shape_string() << " is not " << heads
                            << " heads";
  return {t.dim(0), t.dim(1), R, R / heads};
}

}  // namespace

// ---- embedding and norms ----

void CudaBackend::embedding_forward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe) {
  // out (B, T, C), tokens (B, T) i32, wte (Vp, C), wpe (maxT, C) or empty.
  auto [B, T, C] =
      embedding_dims(tokens, wte, kAct, wpe, out, "embedding_forward", "wte", "wpe", "out");
  cuda::embedding_forward(act(out), tokens.as<int32_t>(), act(wte), act_or_null(wpe), B, T, C,
                          stream_);
}

void CudaBackend::embedding_backward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens) {
  // dwte (Vp, C) f32, dwpe (maxT, C) f32 or empty, dout (B, T, C), tokens (B, T) i32.
  auto [B, T, C] =
      embedding_dims(tokens, dwte, kF32, dwpe, dout, "embedding_backward", "dwte", "dwpe", "dout");
  cuda::embedding_backward(f32(dwte), f32_or_null(dwpe), act(dout), tokens.as<int32_t>(), B, T, C,
                           stream_);
}

void CudaBackend::layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight,
                                    Tensor bias, float eps) {
  // out (N, C), mean (N) f32, rstd (N) f32, inp (N, C), weight (C), bias (C) or empty.
  constexpr const char* kOp = "layernorm_forward";
  int64_t N = inp.rows(), C = inp.cols();
  expect_matrix(inp, kAct, N, C, kOp, "inp");
  expect_matrix(out, kAct, N, C, kOp, "out");
  expect_shape(mean, kF32, {N}, kOp, "mean");
  expect_shape(rstd, kF32, {N}, kOp, "rstd");
  expect_shape(weight, kAct, {C}, kOp, "weight");
  if (!bias.empty()) expect_shape(bias, kAct, {C}, kOp, "bias");
  norm_forward(act(out), f32(mean), f32(rstd), act(inp), act(weight), act_or_null(bias), N, C, eps,
               stream_);
}

void CudaBackend::layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout,
                                     Tensor inp, Tensor weight, Tensor mean, Tensor rstd) {
  // dinp (N, C), dweight (C) f32, dbias (C) f32 or empty, dout (N, C), inp (N, C), weight (C),
  // mean (N) f32, rstd (N) f32.
  constexpr const char* kOp = "layernorm_backward";
  int64_t N = inp.rows(), C = inp.cols();
  expect_matrix(inp, kAct, N, C, kOp, "inp");
  expect_matrix(dout, kAct, N, C, kOp, "dout");
  expect_matrix(dinp, kAct, N, C, kOp, "dinp");
  expect_shape(weight, kAct, {C}, kOp, "weight");
  expect_shape(dweight, kF32, {C}, kOp, "dweight");
  expect_shape(mean, kF32, {N}, kOp, "mean");
  expect_shape(rstd, kF32, {N}, kOp, "rstd");
  if (!dbias.empty()) expect_shape(dbias, kF32, {C}, kOp, "dbias");
  norm_backward_inputs(act(dinp), act(dout), act(inp), act(weight), f32(mean), f32(rstd), N, C,
                       stream_);
  auto* partials = static_cast<float*>(scratch(column_grads_scratch_floats(N, C) * sizeof(float)));
  column_grads(f32(dweight), f32_or_null(dbias), act(dout), act(inp), f32(mean), f32(rstd), N, C,
               partials, stream_);
}

void CudaBackend::rmsnorm_forward(Tensor out, Tensor rstd, Tensor inp, Tensor weight, float eps) {
  // out (N, C), rstd (N) f32, inp (N, C), weight (C).
  constexpr const char* kOp = "rmsnorm_forward";
  int64_t N = inp.rows(), C = inp.cols();
  expect_matrix(inp, kAct, N, C, kOp, "inp");
  expect_matrix(out, kAct, N, C, kOp, "out");
  expect_shape(rstd, kF32, {N}, kOp, "rstd");
  expect_shape(weight, kAct, {C}, kOp, "weight");
  norm_forward(act(out), nullptr, f32(rstd), act(inp), act(weight), nullptr, N, C, eps, stream_);
}

void CudaBackend::rmsnorm_backward(Tensor dinp, Tensor dweight, Tensor dout, Tensor inp,
                                   Tensor weight, Tensor rstd) {
  // dinp (N, C), dweight (C) f32, dout (N, C), inp (N, C), weight (C), rstd (N) f32.
  constexpr const char* kOp = "rmsnorm_backward";
  int64_t N = inp.rows(), C = inp.cols();
  expect_matrix(inp, kAct, N, C, kOp, "inp");
  expect_matrix(dout, kAct, N, C, kOp, "dout");
  expect_matrix(dinp, kAct, N, C, kOp, "dinp");
  expect_shape(weight, kAct, {C}, kOp, "weight");
  expect_shape(dweight, kF32, {C}, kOp, "dweight");
  expect_shape(rstd, kF32, {N}, kOp, "rstd");
  norm_backward_inputs(act(dinp), act(dout), act(inp), act(weight), nullptr, f32(rstd), N, C,
                       stream_);
  auto* partials = static_cast<float*>(scratch(column_grads_scratch_floats(N, C) * sizeof(float)));
  column_grads(f32(dweight), nullptr, act(dout), act(inp), nullptr, f32(rstd), N, C, partials,
               stream_);
}

// ---- matmul ----
// Row-major X (rows, cols) is cuBLAS's column-major cols × rows, so out = inp · Wᵀ is
// outᵀ (OC × N) = W_cm (C × OC)ᵀ · inp_cm (C × N).

void CudaBackend::matmul_forward(Tensor out, Tensor inp, Tensor weight, Tensor bias) {
  // out (N, OC), inp (N, C), weight (OC, C), bias (OC) or empty.
  constexpr const char* kOp = "matmul_forward";
  expect_dtype(weight, kAct, kOp, "weight");
  AX_CHECK_EQ(weight.ndim, 2) << kOp << ": weight is " << weight.shape_string();
  int64_t OC = weight.dim(0), C = weight.dim(1), N = inp.rows();
  expect_matrix(inp, kAct, N, C, kOp, "inp");
  expect_matrix(out, kAct, N, OC, kOp, "out");
  if (!bias.empty()) expect_shape(bias, kAct, {OC}, kOp, "bias");
  GemmDesc g;
  g.trans_a = true;
  g.m = OC;
  g.n = N;
  g.k = C;
  g.A = weight.data;
  g.lda = C;
  g.B = inp.data;
  g.ldb = C;
  g.D = out.data;
  g.ldd = OC;
  g.bias = bias.empty() ? nullptr : bias.data;
  matmul_->run(g, stream_);
}

void CudaBackend::matmul_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout,
                                  Tensor inp, Tensor weight) {
  // dinp (N, C) or empty, dweight (OC, C) f32, dbias (OC) f32 or empty, dout (N, OC),
  // inp (N, C), weight (OC, C).
  constexpr const char* kOp = "matmul_backward";
  expect_dtype(weight, kAct, kOp, "weight");
  AX_CHECK_EQ(weight.ndim, 2) << kOp << ": weight is " << weight.shape_string();
  int64_t OC = weight.dim(0), C = weight.dim(1), N = inp.rows();
  expect_matrix(inp, kAct, N, C, kOp, "inp");
  expect_matrix(dout, kAct, N, OC, kOp, "dout");
  expect_shape(dweight, kF32, {OC, C}, kOp, "dweight");
  if (!dinp.empty()) {
    // dinpᵀ (C × N) += W_cm (C × OC) · dout_cm (OC × N).
    expect_matrix(dinp, kAct, N, C, kOp, "dinp");
    GemmDesc g;
    g.m = C;
    g.n = N;
    g.k = OC;
    g.A = weight.data;
    g.lda = C;
    g.B = dout.data;
    g.ldb = OC;
    g.D = dinp.data;
    g.ldd = C;
    g.beta = 1;
    matmul_->run(g, stream_);
  }
  // dweightᵀ (C × OC) += inp_cm (C × N) · dout_cmᵀ (N × OC), accumulated in f32.
  GemmDesc g;
  g.trans_b = true;
  g.m = C;
  g.n = OC;
  g.k = N;
  g.A = inp.data;
  g.lda = C;
  g.B = dout.data;
  g.ldb = OC;
  g.D = dweight.data;
  g.ldd = C;
  g.d_f32 = true;
  g.beta = 1;
  matmul_->run(g, stream_);
  if (!dbias.empty()) {
    expect_shape(dbias, kF32, {OC}, kOp, "dbias");
    auto* partials =
        static_cast<float*>(scratch(column_grads_scratch_floats(N, OC) * sizeof(float)));
    column_grads(nullptr, f32(dbias), act(dout), nullptr, nullptr, nullptr, N, OC, partials,
                 stream_);
  }
}

// ---- RoPE and attention ----

void CudaBackend::rope_forward(Tensor out, Tensor inp, int num_heads, int num_kv_heads,
                               float theta) {
  // out, inp (B, T, (NH + 2·KVH)·HD).
  auto d = head_dims(inp, num_heads, num_kv_heads, "rope_forward", "inp");
  AX_CHECK_EQ(d.HD % 2, 0) << "rope_forward: odd head_dim " << d.HD;
  expect_shape(out, kAct, {d.B, d.T, d.R}, "rope_forward", "out");
  const float* table = rope_table(d.T, d.HD, theta);
  cuda::rope_forward(act(out), act(inp), table, d.B, d.T, d.R, num_heads + num_kv_heads, d.HD,
                     stream_);
}

void CudaBackend::rope_backward(Tensor dinp, Tensor dout, int num_heads, int num_kv_heads,
                                float theta) {
  // dinp, dout (B, T, (NH + 2·KVH)·HD).
  auto d = head_dims(dout, num_heads, num_kv_heads, "rope_backward", "dout");
  AX_CHECK_EQ(d.HD % 2, 0) << "rope_backward: odd head_dim " << d.HD;
  expect_shape(dinp, kAct, {d.B, d.T, d.R}, "rope_backward", "dinp");
  const float* table = rope_table(d.T, d.HD, theta);
  cuda::rope_backward(act(dinp), act(dout), table, d.B, d.T, d.R, num_heads + num_kv_heads, d.HD,
                      stream_);
}

void CudaBackend::attention_forward(Tensor out, Tensor lse, Tensor qkv, int num_heads,
                                    int num_kv_heads, bool causal) {
  // out (B, T, NH·HD), lse (B, NH, T) f32, qkv (B, T, (NH + 2·KVH)·HD).
  constexpr const char* kOp = "attention_forward";
  auto d = head_dims(qkv, num_heads, num_kv_heads, kOp, "qkv");
  AX_CHECK(d.HD <= kAttnMaxHeadDim && attention_shared_bytes(d.HD) <= max_shared_per_block_)
      << kOp << ": head_dim " << d.HD << " is more than this device's attention kernels take";
  expect_shape(out, kAct, {d.B, d.T, num_heads * d.HD}, kOp, "out");
  expect_shape(lse, kF32, {d.B, num_heads, d.T}, kOp, "lse");
  cuda::attention_forward(act(out), f32(lse), act(qkv),
                          {d.B, d.T, num_heads, num_kv_heads, d.HD, causal}, stream_);
}

void CudaBackend::attention_backward(Tensor dqkv, Tensor dout, Tensor out, Tensor lse, Tensor qkv,
                                     int num_heads, int num_kv_heads, bool causal) {
  // dqkv (B, T, (NH + 2·KVH)·HD), dout (B, T, NH·HD), out (B, T, NH·HD), lse (B, NH, T) f32,
  // qkv (B, T, (NH + 2·KVH)·HD).
  constexpr const char* kOp = "attention_backward";
  auto d = head_dims(qkv, num_heads, num_kv_heads, kOp, "qkv");
  AX_CHECK(d.HD <= kAttnMaxHeadDim && attention_shared_bytes(d.HD) <= max_shared_per_block_)
      << kOp << ": head_dim " << d.HD << " is more than this device's attention kernels take";
  expect_shape(dqkv, kAct, {d.B, d.T, d.R}, kOp, "dqkv");
  expect_shape(dout, kAct, {d.B, d.T, num_heads * d.HD}, kOp, "dout");
  expect_shape(out, kAct, {d.B, d.T, num_heads * d.HD}, kOp, "out");
  expect_shape(lse, kF32, {d.B, num_heads, d.T}, kOp, "lse");
  auto* row_dots = static_cast<float*>(scratch(d.B * num_heads * d.T * sizeof(float)));
  cuda::attention_backward(act(dqkv), act(dout), act(out), f32(lse), act(qkv), row_dots,
                           {d.B, d.T, num_heads, num_kv_heads, d.HD, causal}, stream_);
}

// ---- point-wise ----

void CudaBackend::gelu_forward(Tensor out, Tensor inp) {
  int64_t rows = inp.rows(), cols = inp.cols();
  expect_matrix(inp, kAct, rows, cols, "gelu_forward", "inp");
  expect_matrix(out, kAct, rows, cols, "gelu_forward", "out");
  cuda::gelu_forward(act(out), act(inp), inp.numel(), stream_);
}

void CudaBackend::gelu_backward(Tensor dinp, Tensor dout, Tensor inp) {
  int64_t rows = inp.rows(), cols = inp.cols();
  expect_matrix(inp, kAct, rows, cols, "gelu_backward", "inp");
  expect_matrix(dout, kAct, rows, cols, "gelu_backward", "dout");
  expect_matrix(dinp, kAct, rows, cols, "gelu_backward", "dinp");
  cuda::gelu_backward(act(dinp), act(dout), act(inp), inp.numel(), stream_);
}

void CudaBackend::swiglu_forward(Tensor out, Tensor inp) {
  // out (N, F), inp (N, 2F).
  int64_t N = out.rows(), F = out.cols();
  expect_matrix(out, kAct, N, F, "swiglu_forward", "out");
  expect_matrix(inp, kAct, N, 2 * F, "swiglu_forward", "inp");
  cuda::swiglu_forward(act(out), act(inp), N, F, stream_);
}

void CudaBackend::swiglu_backward(Tensor dinp, Tensor dout, Tensor inp) {
  // dinp (N, 2F), dout (N, F), inp (N, 2F).
  int64_t N = dout.rows(), F = dout.cols();
  expect_matrix(dout, kAct, N, F, "swiglu_backward", "dout");
  expect_matrix(inp, kAct, N, 2 * F, "swiglu_backward", "inp");
  expect_matrix(dinp, kAct, N, 2 * F, "swiglu_backward", "dinp");
  cuda::swiglu_backward(act(dinp), act(dout), act(inp), N, F, stream_);
}

void CudaBackend::add_forward(Tensor out, Tensor a, Tensor b) {
  int64_t rows = out.rows(), cols = out.cols();
  expect_matrix(out, kAct, rows, cols, "add_forward", "out");
  expect_matrix(a, kAct, rows, cols, "add_forward", "a");
  expect_matrix(b, kAct, rows, cols, "add_forward", "b");
  cuda::add_forward(act(out), act(a), act(b), out.numel(), stream_);
}

// ---- cross-entropy ----

void CudaBackend::cross_entropy_forward(Tensor losses, Tensor logits, Tensor targets, int64_t V) {
  // losses (N) f32, logits (N, Vp), targets (N) i32.
  constexpr const char* kOp = "cross_entropy_forward";
  int64_t N = logits.rows(), Vp = logits.cols();
  expect_matrix(logits, kAct, N, Vp, kOp, "logits");
  expect_shape(losses, kF32, {N}, kOp, "losses");
  expect_dtype(targets, DType::kI32, kOp, "targets");
  AX_CHECK_EQ(targets.numel(), N) << kOp << ": targets is " << targets.shape_string();
  AX_CHECK(V > 0 && V <= Vp) << kOp << ": V=" << V << " for logits " << logits.shape_string();
  cuda::cross_entropy_forward(f32(losses), act(logits), targets.as<int32_t>(), N, V, Vp, stream_);
}

void CudaBackend::cross_entropy_backward(Tensor dlogits, Tensor logits, Tensor targets, int64_t V,
                                         float dloss) {
  // dlogits (N, Vp) (may be logits itself), logits (N, Vp), targets (N) i32.
  constexpr const char* kOp = "cross_entropy_backward";
  int64_t N = logits.rows(), Vp = logits.cols();
  expect_matrix(logits, kAct, N, Vp, kOp, "logits");
  expect_matrix(dlogits, kAct, N, Vp, kOp, "dlogits");
  expect_dtype(targets, DType::kI32, kOp, "targets");
  AX_CHECK_EQ(targets.numel(), N) << kOp << ": targets is " << targets.shape_string();
  AX_CHECK(V > 0 && V <= Vp) << kOp << ": V=" << V << " for logits " << logits.shape_string();
  cuda::cross_entropy_backward(act(dlogits), act(logits), targets.as<int32_t>(), N, V, Vp, dloss,
                               stream_);
}


void CudaBackend::ce_shard_max(Tensor rowmax, Tensor logits, int64_t v_count) {
  auto [N, Vl] = expect_vocab_shard(logits, kAct, Tensor(), v_count, "ce_shard_max");
  expect_shape(rowmax, kF32, {N}, "ce_shard_max", "rowmax");
  cuda::ce_shard_max(f32(rowmax), act(logits), N, Vl, v_count, stream_);
}

void CudaBackend::ce_shard_sums(Tensor sums, Tensor logits, Tensor rowmax, Tensor targets,
                                int64_t v_begin, int64_t v_count) {
  constexpr const char* kOp = "ce_shard_sums";
  auto [N, Vl] = expect_vocab_shard(logits, kAct, targets, v_count, kOp);
  expect_shape(sums, kF32, {N, 2}, kOp, "sums");
  expect_shape(rowmax, kF32, {N}, kOp, "rowmax");
  cuda::ce_shard_sums(f32(sums), act(logits), f32(rowmax), targets.as<int32_t>(), N, Vl, v_begin,
                      v_count, stream_);
}

void CudaBackend::ce_shard_backward(Tensor dlogits, Tensor logits, Tensor lse, Tensor targets,
                                    int64_t v_begin, int64_t v_count, float dloss) {
  constexpr const char* kOp = "ce_shard_backward";
  auto [N, Vl] = expect_vocab_shard(logits, kAct, targets, v_count, kOp);
  expect_matrix(dlogits, kAct, N, Vl, kOp, "dlogits");
  expect_shape(lse, kF32, {N}, kOp, "lse");
  cuda::ce_shard_backward(act(dlogits), act(logits), f32(lse), targets.as<int32_t>(), N, Vl,
                          v_begin, v_count, dloss, stream_);
}

}  // namespace ax::train::cuda
