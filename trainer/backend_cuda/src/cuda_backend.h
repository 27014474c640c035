// The CUDA backend: bf16 (or f32, chosen at creation) activations and compute weights; f32
// statistics, parameter gradients, master weights and optimizer state; all on one stream that
// the backend owns. Methods are defined in cuda_backend.cc (device, memory, optimizer, the
// factory) and cuda_ops.cc (the ops' view checks and launches); the kernels live in the .cu
// files (cuda_kernels.h).
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "ax/trainer/backend/backend.h"
#include "ax/trainer/backend/op_checks.h"
#include "cuda_matmul.h"

namespace ax::train::cuda {

class CudaBackend final : public Backend {
 public:
  // `device` exists and options.act is bf16 or f32 (make_cuda_backend checked); makes the
  // device current on the calling thread.
  static StatusOr<std::unique_ptr<CudaBackend>> create(int device,
                                                       const CudaBackendOptions& options);
  ~CudaBackend() override;

  std::string name() const override { return name_; }
  std::string device_model() const override { return model_; }
  DType compute_dtype() const override { return plan_.act; }
  double peak_flops() const override { return peak_flops_; }
  void* native_stream() const override { return stream_; }
  int device_ordinal() const override { return device_; }

  StatusOr<void*> alloc(size_t bytes) override;
  void free(void* ptr) override;
  void copy_from_host(Tensor dst, const void* src) override;
  void copy_to_host(void* dst, Tensor src) override;
  void copy(Tensor dst, Tensor src) override;
  void zero(Tensor t) override;
  void synchronize() override;

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
  CudaBackend() = default;
  // Device scratch of at least `bytes` (column partials, attention row sums, position-bias
  // partials). It grows, never
  // shrinks: after the first training step no op allocates.
  void* scratch(size_t bytes);
  // (cos, sin) of t · rope_inv_freq(rope, HD)[j] at [2·(t·HD/2 + j)], f32 on the device,
  // computed on the host in f64 as the CPU backend does. Rebuilt when HD or the rotation changes
  // or T grows past the table's; a shorter T reads a prefix of the same layout.
  const float* rope_table(int64_t T, int64_t head_dim, const RopeSpec& rope);

  // AttnShape::tensor_core_shared for this device and its options.
  size_t tensor_core_shared() const { return tensor_core_attention_ ? max_shared_per_block_ : 0; }

  int device_ = 0;
  DTypePlan plan_{DType::kBF16};  // ax/trainer/op_checks.h
  cudaStream_t stream_ = nullptr;
  std::string name_;
  std::string model_;  // prop.name
  double peak_flops_ = 0;
  size_t max_shared_per_block_ = 0;
  bool tensor_core_attention_ = false;  // options and environment allow it, and sm_80 or later
  std::unique_ptr<LtMatmul> matmul_;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  double* sum_scratch_ = nullptr;  // kSumSquaresBlocks + 1 doubles
  float* rope_table_ = nullptr;
  size_t rope_table_floats_ = 0;
  int64_t rope_T_ = 0, rope_head_dim_ = 0;
  RopeSpec rope_;
};

}  // namespace ax::train::cuda
