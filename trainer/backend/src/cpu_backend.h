// The CPU reference backend: fp32 everywhere, row loops spread over a small thread pool, GEMMs
// (matmuls and per-head attention products) through OpenBLAS or the builtin kernel. Every op
// gives the same bits for any thread count except where a GEMM is split across threads. The
// ops are defined in cpu_backend.cc (memory, matmul, optimizer), cpu_norms.cc (embedding,
// LayerNorm, RMSNorm), cpu_pointwise.cc (GELU, gated linear units, RoPE, cross-entropy),
// cpu_attention.cc and cpu_position_bias.cc.
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include "ax/trainer/backend/backend.h"
#include "ax/trainer/backend/op_checks.h"
#include "cpu_blas.h"
#include "cpu_threads.h"

namespace ax::train::cpu {

// Every view here is f32 (ax/trainer/op_checks.h's plan with f32 activations).
inline constexpr DTypePlan kPlan{DType::kF32};

class CpuBackend final : public Backend {
 public:
  CpuBackend(int threads, bool use_openblas);

  std::string name() const override;
  DType compute_dtype() const override { return DType::kF32; }
  double peak_flops() const override;
  double executed_matmul_flops() const override;

  StatusOr<void*> alloc(size_t bytes) override;
  void free(void* ptr) override;
  void copy_from_host(Tensor dst, const void* src) override;
  void copy_to_host(void* dst, Tensor src) override;
  void copy(Tensor dst, Tensor src) override;
  void zero(Tensor t) override;
  void synchronize() override {}

  void embedding_forward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe) override;
  void embedding_backward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens) override;
  void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight,
                         Tensor bias, float eps) override;
  void layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                          Tensor weight, Tensor mean, Tensor rstd) override;
  void rmsnorm_forward(Tensor out, Tensor rstd, Tensor inp, Tensor weight, float eps) override;
  void rmsnorm_backward(Tensor dinp, Tensor dweight, Tensor dout, Tensor inp, Tensor weight,
                        Tensor rstd) override;
  void matmul_forward(Tensor out, Tensor inp, Tensor weight, Tensor bias) override;
  void matmul_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                       Tensor weight) override;
  void rope_forward(Tensor out, Tensor inp, int num_heads, int num_kv_heads, const RopeSpec& rope,
                    int64_t first_position) override;
  void rope_backward(Tensor dinp, Tensor dout, int num_heads, int num_kv_heads,
                     const RopeSpec& rope, int64_t first_position) override;
  void attention_forward(Tensor out, Tensor lse, Tensor q, Tensor kv,
                         const AttentionSpec& spec) override;
  void attention_backward(Tensor dq, Tensor dkv, Tensor dbias, Tensor dout, Tensor out, Tensor lse,
                          Tensor q, Tensor kv, const AttentionSpec& spec) override;
  void gelu_forward(Tensor out, Tensor inp) override;
  void gelu_backward(Tensor dinp, Tensor dout, Tensor inp) override;
  void glu_forward(Tensor out, Tensor inp, Glu glu) override;
  void glu_backward(Tensor dinp, Tensor dout, Tensor inp, Glu glu) override;
  void dropout_forward(Tensor out, Tensor inp, Tensor row_keys, const DropoutSpec& spec) override;
  void dropout_backward(Tensor dinp, Tensor dout, Tensor row_keys,
                        const DropoutSpec& spec) override;
  void add_forward(Tensor out, Tensor a, Tensor b) override;
  void position_bias_forward(Tensor bias, Tensor table, Tensor buckets) override;
  void position_bias_backward(Tensor dtable, Tensor dbias, Tensor buckets) override;
  void cross_entropy_forward(Tensor losses, Tensor logits, Tensor targets, int64_t V,
                             float z_loss) override;
  void cross_entropy_backward(Tensor dlogits, Tensor logits, Tensor targets, int64_t V, float dloss,
                              float z_loss) override;
  void ce_shard_max(Tensor rowmax, Tensor logits, int64_t v_count) override;
  void ce_shard_sums(Tensor sums, Tensor logits, Tensor rowmax, Tensor targets, int64_t v_begin,
                     int64_t v_count) override;
  void ce_shard_backward(Tensor dlogits, Tensor logits, Tensor lse, Tensor targets, int64_t v_begin,
                         int64_t v_count, float dloss, float z_loss) override;
  double sum_squares(Tensor x) override;
  void adamw_update(Tensor params, Tensor grads, Tensor m, Tensor v,
                    const AdamWArgs& args) override;

 private:
  // A GEMM split over the pool by rows of C (or columns when C has few rows).
  void gemm_parallel(const GemmArgs& g) const;
  // Per-thread scratch of at least `floats` floats; grows on first use only.
  float* scratch(int thread, size_t floats);
  // cos/sin of t · rope_inv_freq(rope, HD)[j], (T, HD/2) each, recomputed when HD or the
  // rotation changes or T grows past the table's.
  void update_rope_table(int64_t T, int64_t head_dim, const RopeSpec& rope);

  mutable ThreadPool pool_;  // running a job leaves no trace: const ops may use it
  Gemm gemm_;
  std::vector<std::vector<float>> scratch_;  // one per pool thread
  std::vector<double> partials_;             // sum_squares chunk sums
  std::vector<float> rope_cos_, rope_sin_;   // (T, HD/2)
  int64_t rope_T_ = 0, rope_head_dim_ = 0;
  RopeSpec rope_;
  mutable std::once_flag peak_once_;
  mutable double peak_flops_ = 0;
  mutable double measurement_flops_ = 0;  // the peak measurement's own GEMMs
};

}  // namespace ax::train::cpu
