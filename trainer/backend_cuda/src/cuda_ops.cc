// The ops of the CUDA backend: check the views (dtype and shape, aborting on a mismatch as
// backend.h says), then launch the kernels' instantiation for the plan's activation type (bf16
// or f32); statistics and parameter gradients are f32 either way. Unlike the CPU backend, token,
// target and position-bucket ids are not range-checked here: they live on the device
// (Model::forward checks tokens and targets on the host; the cross-entropy kernels never read
// past a row, the position-bias kernels never past the table: cuda_kernels.h).
#include <utility>

#include "attention_plan.h"
#include "ax/trainer/backend/op_checks.h"
#include "cuda_backend.h"
#include "cuda_kernels.h"

namespace ax::train::cuda {
namespace {

// Calls f.template operator()<Act>() with Act the C++ type of `act` (bf16 or float).
template <typename F>
void with_act(DType act, F&& f) {
  if (act == DType::kF32) {
    f.template operator()<float>();
  } else {
    f.template operator()<bf16>();
  }
}

template <typename Act>
Act* ptr(const Tensor& t) {
  return static_cast<Act*>(t.data);
}
template <typename Act>
Act* ptr_or_null(const Tensor& t) {
  return t.empty() ? nullptr : ptr<Act>(t);
}
float* f32(const Tensor& t) { return t.as<float>(); }
float* f32_or_null(const Tensor& t) { return t.empty() ? nullptr : t.as<float>(); }

}  // namespace

// ---- embedding and norms ----

void CudaBackend::embedding_forward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe) {
  // out (B, T, C), tokens (B, T) i32, wte (Vp, C), wpe (maxT, C) or empty.
  auto [B, T, Vp, C] = check_embedding_forward(plan_, out, tokens, wte, wpe);
  with_act(plan_.act, [&]<typename Act>() {
    cuda::embedding_forward(ptr<Act>(out), tokens.as<int32_t>(), ptr<Act>(wte),
                            ptr_or_null<Act>(wpe), B, T, C, stream_);
  });
}

void CudaBackend::embedding_backward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens) {
  // dwte (Vp, C) f32, dwpe (maxT, C) f32 or empty, dout (B, T, C), tokens (B, T) i32.
  auto [B, T, Vp, C] = check_embedding_backward(plan_, dwte, dwpe, dout, tokens);
  with_act(plan_.act, [&]<typename Act>() {
    cuda::embedding_backward(f32(dwte), f32_or_null(dwpe), ptr<Act>(dout), tokens.as<int32_t>(), B,
                             T, C, stream_);
  });
}

void CudaBackend::layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight,
                                    Tensor bias, float eps) {
  // out (N, C), mean (N) f32, rstd (N) f32, inp (N, C), weight (C), bias (C) or empty.
  auto [N, C] = check_layernorm_forward(plan_, out, mean, rstd, inp, weight, bias);
  with_act(plan_.act, [&]<typename Act>() {
    norm_forward(ptr<Act>(out), f32(mean), f32(rstd), ptr<Act>(inp), ptr<Act>(weight),
                 ptr_or_null<Act>(bias), N, C, eps, stream_);
  });
}

void CudaBackend::layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout,
                                     Tensor inp, Tensor weight, Tensor mean, Tensor rstd) {
  // dinp (N, C), dweight (C) f32, dbias (C) f32 or empty, dout (N, C), inp (N, C), weight (C),
  // mean (N) f32, rstd (N) f32.
  auto [N, C] =
      check_layernorm_backward(plan_, dinp, dweight, dbias, dout, inp, weight, mean, rstd);
  auto* partials = static_cast<float*>(scratch(column_grads_scratch_floats(N, C) * sizeof(float)));
  with_act(plan_.act, [&]<typename Act>() {
    norm_backward_inputs(ptr<Act>(dinp), ptr<Act>(dout), ptr<Act>(inp), ptr<Act>(weight), f32(mean),
                         f32(rstd), N, C, stream_);
    column_grads(f32(dweight), f32_or_null(dbias), ptr<Act>(dout), ptr<Act>(inp), f32(mean),
                 f32(rstd), N, C, partials, stream_);
  });
}

void CudaBackend::rmsnorm_forward(Tensor out, Tensor rstd, Tensor inp, Tensor weight, float eps) {
  // out (N, C), rstd (N) f32, inp (N, C), weight (C).
  auto [N, C] = check_rmsnorm_forward(plan_, out, rstd, inp, weight);
  with_act(plan_.act, [&]<typename Act>() {
    norm_forward(ptr<Act>(out), nullptr, f32(rstd), ptr<Act>(inp), ptr<Act>(weight),
                 static_cast<const Act*>(nullptr), N, C, eps, stream_);
  });
}

void CudaBackend::rmsnorm_backward(Tensor dinp, Tensor dweight, Tensor dout, Tensor inp,
                                   Tensor weight, Tensor rstd) {
  // dinp (N, C), dweight (C) f32, dout (N, C), inp (N, C), weight (C), rstd (N) f32.
  auto [N, C] = check_rmsnorm_backward(plan_, dinp, dweight, dout, inp, weight, rstd);
  auto* partials = static_cast<float*>(scratch(column_grads_scratch_floats(N, C) * sizeof(float)));
  with_act(plan_.act, [&]<typename Act>() {
    norm_backward_inputs(ptr<Act>(dinp), ptr<Act>(dout), ptr<Act>(inp), ptr<Act>(weight), nullptr,
                         f32(rstd), N, C, stream_);
    column_grads(f32(dweight), nullptr, ptr<Act>(dout), ptr<Act>(inp), nullptr, f32(rstd), N, C,
                 partials, stream_);
  });
}

// ---- matmul ----
// Row-major X (rows, cols) is cuBLAS's column-major cols × rows, so out = inp · Wᵀ is
// outᵀ (OC × N) = W_cm (C × OC)ᵀ · inp_cm (C × N).

void CudaBackend::matmul_forward(Tensor out, Tensor inp, Tensor weight, Tensor bias) {
  // out (N, OC), inp (N, C), weight (OC, C), bias (OC) or empty.
  auto [N, C, OC] = check_matmul_forward(plan_, out, inp, weight, bias);
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
  g.in = g.out = plan_.act;
  g.bias = bias.empty() ? nullptr : bias.data;
  matmul_->run(g, stream_);
}

void CudaBackend::matmul_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout,
                                  Tensor inp, Tensor weight) {
  // dinp (N, C) or empty, dweight (OC, C) f32, dbias (OC) f32 or empty, dout (N, OC),
  // inp (N, C), weight (OC, C).
  auto [N, C, OC] = check_matmul_backward(plan_, dinp, dweight, dbias, dout, inp, weight);
  if (!dinp.empty()) {
    // dinpᵀ (C × N) += W_cm (C × OC) · dout_cm (OC × N).
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
    g.in = g.out = plan_.act;
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
  g.in = plan_.act;
  g.out = DType::kF32;
  g.beta = 1;
  matmul_->run(g, stream_);
  if (!dbias.empty()) {
    auto* partials =
        static_cast<float*>(scratch(column_grads_scratch_floats(N, OC) * sizeof(float)));
    with_act(plan_.act, [&]<typename Act>() {
      column_grads(nullptr, f32(dbias), ptr<Act>(dout), static_cast<const Act*>(nullptr), nullptr,
                   nullptr, N, OC, partials, stream_);
    });
  }
}

// ---- RoPE and attention ----

void CudaBackend::rope_forward(Tensor out, Tensor inp, int num_heads, int num_kv_heads,
                               const RopeSpec& rope, int64_t first_position) {
  // out, inp (B, T, (NH + 2·KVH)·HD); the table's rows from first_position on.
  auto d = check_rope(plan_, out, inp, num_heads, num_kv_heads, "rope_forward", "out", "inp");
  AX_CHECK_GE(first_position, 0) << "rope_forward";
  const float* table = rope_table(first_position + d.T, d.HD, rope) + first_position * d.HD;
  with_act(plan_.act, [&]<typename Act>() {
    cuda::rope_forward(ptr<Act>(out), ptr<Act>(inp), table, d.B, d.T, d.R, num_heads + num_kv_heads,
                       d.HD, stream_);
  });
}

void CudaBackend::rope_backward(Tensor dinp, Tensor dout, int num_heads, int num_kv_heads,
                                const RopeSpec& rope, int64_t first_position) {
  // dinp, dout (B, T, (NH + 2·KVH)·HD); the table's rows from first_position on.
  auto d = check_rope(plan_, dinp, dout, num_heads, num_kv_heads, "rope_backward", "dinp", "dout");
  AX_CHECK_GE(first_position, 0) << "rope_backward";
  const float* table = rope_table(first_position + d.T, d.HD, rope) + first_position * d.HD;
  with_act(plan_.act, [&]<typename Act>() {
    cuda::rope_backward(ptr<Act>(dinp), ptr<Act>(dout), table, d.B, d.T, d.R,
                        num_heads + num_kv_heads, d.HD, stream_);
  });
}

namespace {

// The attention kernels keep a tile of every head row in shared memory (cuda_attention.cu).
void expect_attention_fits(const AttentionDims& d, size_t max_shared, const char* op) {
  AX_CHECK(d.HD <= kAttnMaxHeadDim && attention_shared_bytes(d.HD) <= max_shared)
      << op << ": head_dim " << d.HD << " is more than this device's attention kernels take";
}

AttnShape attn_shape(const AttentionDims& d, const AttentionSpec& s, size_t tensor_core_shared) {
  return {d.B,
          d.Tq,
          d.Tk,
          d.NH,
          d.KVH,
          d.HD,
          d.Rq,
          d.Rkv,
          s.k_offset,
          s.scale,
          s.causal,
          s.q_first_position - s.k_first_position,
          tensor_core_shared};
}

template <typename Act>
AttnMasks<Act> attn_masks(const AttentionDims& d, const AttentionSpec& s) {
  AttnMasks<Act> m;
  m.bias = ptr_or_null<Act>(s.bias);
  m.bias_batch = d.bias_batch;
  if (d.segments) {
    m.q_segments = s.q_segments.as<int32_t>();
    m.k_segments = s.k_segments.as<int32_t>();
  }
  return m;
}

}  // namespace

void CudaBackend::attention_forward(Tensor out, Tensor lse, Tensor q, Tensor kv,
                                    const AttentionSpec& spec) {
  // out (B, Tq, NH·HD), lse (B, NH, Tq) f32, q (B, Tq, Rq), kv (B, Tk, Rkv).
  const AttentionDims d = check_attention_forward(plan_, out, lse, q, kv, spec);
  expect_attention_fits(d, max_shared_per_block_, "attention_forward");
  with_act(plan_.act, [&]<typename Act>() {
    cuda::attention_forward(ptr<Act>(out), f32(lse), ptr<Act>(q), ptr<Act>(kv),
                            attn_shape(d, spec, tensor_core_shared()), attn_masks<Act>(d, spec),
                            stream_);
  });
}

void CudaBackend::attention_backward(Tensor dq, Tensor dkv, Tensor dbias, Tensor dout, Tensor out,
                                     Tensor lse, Tensor q, Tensor kv, const AttentionSpec& spec) {
  // dq (B, Tq, Rq), dkv (B, Tk, Rkv) (may be dq), dbias (Bb, NH, Tq, Tk) f32 or empty, dout and
  // out (B, Tq, NH·HD), lse (B, NH, Tq) f32, q (B, Tq, Rq), kv (B, Tk, Rkv).
  const AttentionDims d =
      check_attention_backward(plan_, dq, dkv, dbias, dout, out, lse, q, kv, spec);
  expect_attention_fits(d, max_shared_per_block_, "attention_backward");
  const AttnShape shape = attn_shape(d, spec, tensor_core_shared());
  const bool shared_dbias = !dbias.empty() && d.bias_batch == 1;
  auto* floats = static_cast<float*>(scratch(
      attention_backward_scratch_floats(d.B, d.Tq, d.Tk, d.NH, shared_dbias) * sizeof(float)));
  with_act(plan_.act, [&]<typename Act>() {
    cuda::attention_backward(ptr<Act>(dq), ptr<Act>(dkv), f32_or_null(dbias), ptr<Act>(dout),
                             ptr<Act>(out), f32(lse), ptr<Act>(q), ptr<Act>(kv), floats, shape,
                             attn_masks<Act>(d, spec), stream_);
  });
}

// ---- point-wise ----

void CudaBackend::gelu_forward(Tensor out, Tensor inp) {
  check_gelu_forward(plan_, out, inp);
  with_act(plan_.act, [&]<typename Act>() {
    cuda::gelu_forward(ptr<Act>(out), ptr<Act>(inp), inp.numel(), stream_);
  });
}

void CudaBackend::gelu_backward(Tensor dinp, Tensor dout, Tensor inp) {
  check_gelu_backward(plan_, dinp, dout, inp);
  with_act(plan_.act, [&]<typename Act>() {
    cuda::gelu_backward(ptr<Act>(dinp), ptr<Act>(dout), ptr<Act>(inp), inp.numel(), stream_);
  });
}

void CudaBackend::glu_forward(Tensor out, Tensor inp, Glu glu) {
  // out (N, F), inp (N, 2F).
  auto [N, F] = check_glu_forward(plan_, out, inp, glu);
  with_act(plan_.act, [&]<typename Act>() {
    cuda::glu_forward(ptr<Act>(out), ptr<Act>(inp), N, F, glu == Glu::kGeGlu, stream_);
  });
}

void CudaBackend::glu_backward(Tensor dinp, Tensor dout, Tensor inp, Glu glu) {
  // dinp (N, 2F), dout (N, F), inp (N, 2F).
  auto [N, F] = check_glu_backward(plan_, dinp, dout, inp, glu);
  with_act(plan_.act, [&]<typename Act>() {
    cuda::glu_backward(ptr<Act>(dinp), ptr<Act>(dout), ptr<Act>(inp), N, F, glu == Glu::kGeGlu,
                       stream_);
  });
}

void CudaBackend::dropout_forward(Tensor out, Tensor inp, Tensor row_keys,
                                  const DropoutSpec& spec) {
  // out, inp (N, F), row_keys (N) i32.
  auto [N, F] = check_dropout_forward(plan_, out, inp, row_keys, spec);
  const cuda::DropoutArgs args{spec.seed, spec.threshold, spec.scale, spec.feature_offset};
  with_act(plan_.act, [&]<typename Act>() {
    cuda::dropout_forward(ptr<Act>(out), ptr<Act>(inp), row_keys.as<int32_t>(), N, F, args,
                          stream_);
  });
}

void CudaBackend::dropout_backward(Tensor dinp, Tensor dout, Tensor row_keys,
                                   const DropoutSpec& spec) {
  // dinp, dout (N, F), row_keys (N) i32.
  auto [N, F] = check_dropout_backward(plan_, dinp, dout, row_keys, spec);
  const cuda::DropoutArgs args{spec.seed, spec.threshold, spec.scale, spec.feature_offset};
  with_act(plan_.act, [&]<typename Act>() {
    cuda::dropout_backward(ptr<Act>(dinp), ptr<Act>(dout), row_keys.as<int32_t>(), N, F, args,
                           stream_);
  });
}

void CudaBackend::add_forward(Tensor out, Tensor a, Tensor b) {
  // The residual stream (the activation dtype) or FSDP's f32 gradient shards.
  check_add(plan_, out, a, b);
  with_act(out.dtype, [&]<typename Act>() {
    cuda::add_forward(ptr<Act>(out), ptr<Act>(a), ptr<Act>(b), out.numel(), stream_);
  });
}

// ---- T5's relative position bias ----

void CudaBackend::position_bias_forward(Tensor bias, Tensor table, Tensor buckets) {
  // bias (Bb, NH, Tq, Tk), table (num_buckets, NH), buckets (Bb, Tq, Tk) i32.
  const PositionBiasDims d = check_position_bias_forward(plan_, bias, table, buckets);
  with_act(plan_.act, [&]<typename Act>() {
    cuda::position_bias_forward(ptr<Act>(bias), ptr<Act>(table), buckets.as<int32_t>(), d.Bb, d.NH,
                                d.Tq, d.Tk, d.num_buckets, stream_);
  });
}

void CudaBackend::position_bias_backward(Tensor dtable, Tensor dbias, Tensor buckets) {
  // dtable (num_buckets, NH) f32, dbias (Bb, NH, Tq, Tk) f32, buckets (Bb, Tq, Tk) i32.
  const PositionBiasDims d = check_position_bias_backward(plan_, dtable, dbias, buckets);
  AX_CHECK_LE(d.num_buckets, position_bias_max_buckets())
      << "position_bias_backward: the CUDA kernel takes at most " << position_bias_max_buckets()
      << " buckets";
  auto* partials = static_cast<float*>(
      scratch(position_bias_scratch_floats(d.Bb, d.NH, d.Tq, d.num_buckets) * sizeof(float)));
  cuda::position_bias_backward(f32(dtable), f32(dbias), buckets.as<int32_t>(), d.Bb, d.NH, d.Tq,
                               d.Tk, d.num_buckets, partials, stream_);
}

// ---- cross-entropy ----

void CudaBackend::cross_entropy_forward(Tensor losses, Tensor logits, Tensor targets, int64_t V,
                                        float z_loss) {
  // losses (N) f32, logits (N, Vp), targets (N) i32.
  auto [N, Vp] = check_cross_entropy_forward(plan_, losses, logits, targets, V, z_loss);
  with_act(plan_.act, [&]<typename Act>() {
    cuda::cross_entropy_forward(f32(losses), ptr<Act>(logits), targets.as<int32_t>(), N, V, Vp,
                                z_loss, stream_);
  });
}

void CudaBackend::cross_entropy_backward(Tensor dlogits, Tensor logits, Tensor targets, int64_t V,
                                         float dloss, float z_loss) {
  // dlogits (N, Vp) (may be logits itself), logits (N, Vp), targets (N) i32.
  auto [N, Vp] = check_cross_entropy_backward(plan_, dlogits, logits, targets, V, z_loss);
  with_act(plan_.act, [&]<typename Act>() {
    cuda::cross_entropy_backward(ptr<Act>(dlogits), ptr<Act>(logits), targets.as<int32_t>(), N, V,
                                 Vp, dloss, z_loss, stream_);
  });
}

void CudaBackend::ce_shard_max(Tensor rowmax, Tensor logits, int64_t v_count) {
  auto [N, Vl] = check_ce_shard_max(plan_, rowmax, logits, v_count);
  with_act(plan_.act, [&]<typename Act>() {
    cuda::ce_shard_max(f32(rowmax), ptr<Act>(logits), N, Vl, v_count, stream_);
  });
}

void CudaBackend::ce_shard_sums(Tensor sums, Tensor logits, Tensor rowmax, Tensor targets,
                                int64_t v_begin, int64_t v_count) {
  auto [N, Vl] = check_ce_shard_sums(plan_, sums, logits, rowmax, targets, v_count);
  with_act(plan_.act, [&]<typename Act>() {
    cuda::ce_shard_sums(f32(sums), ptr<Act>(logits), f32(rowmax), targets.as<int32_t>(), N, Vl,
                        v_begin, v_count, stream_);
  });
}

void CudaBackend::ce_shard_backward(Tensor dlogits, Tensor logits, Tensor lse, Tensor targets,
                                    int64_t v_begin, int64_t v_count, float dloss, float z_loss) {
  auto [N, Vl] = check_ce_shard_backward(plan_, dlogits, logits, lse, targets, v_count, z_loss);
  with_act(plan_.act, [&]<typename Act>() {
    cuda::ce_shard_backward(ptr<Act>(dlogits), ptr<Act>(logits), f32(lse), targets.as<int32_t>(), N,
                            Vl, v_begin, v_count, dloss, z_loss, stream_);
  });
}

}  // namespace ax::train::cuda
