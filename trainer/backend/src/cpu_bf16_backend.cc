// The CPU backend in the CUDA backend's dtype plan (`--device cpu-bf16`): bf16 activations,
// activation gradients and compute weights; f32 statistics, parameter gradients, master weights
// and optimizer state (op_checks.h). Every op is checked against that plan with the same checks
// the CUDA backend runs, then widens its bf16 inputs to f32, runs the f32 reference op and rounds
// each bf16 output once, to nearest even — what a CUDA kernel does when it reads bf16, computes
// in f32 and stores bf16. A bf16 output that accumulates (+=) is widened first, so the sum is
// rounded once, as the CUDA kernels' read-add-round does.
//
// It exists so that every path only the GPU takes through the model, FSDP, tensor parallelism,
// checkpoints and the optimizer runs in CI (docs/precision.md).
#include <memory>
#include <vector>

#include "ax/common/strings.h"
#include "ax/trainer/backend/backend.h"
#include "ax/trainer/backend/op_checks.h"

namespace ax::train {
namespace {

constexpr DTypePlan kBf16{DType::kBF16};

// f32 buffers of one op: released when the op returns.
class Widened {
 public:
  explicit Widened(Backend& f32) : f32_(f32) {}

  // An f32 tensor of t's shape, uninitialised (empty stays empty).
  Tensor like(const Tensor& t) {
    if (t.empty()) return Tensor();
    buffers_.emplace_back(static_cast<size_t>(t.numel()));
    Tensor w = t;
    w.data = buffers_.back().data();
    w.dtype = DType::kF32;
    return w;
  }
  // The f32 values of a bf16 view; an f32 or i32 view (and an empty one) is returned as is.
  Tensor of(const Tensor& t) {
    if (t.empty() || t.dtype != DType::kBF16) return t;
    Tensor w = like(t);
    f32_.copy(w, t);
    return w;
  }
  // Rounds `w` into the bf16 view `t` (nothing when t is not bf16: w is t itself then).
  void store(const Tensor& t, const Tensor& w) {
    if (!t.empty() && t.dtype == DType::kBF16) f32_.copy(t, w);
  }

 private:
  Backend& f32_;
  std::vector<std::vector<float>> buffers_;
};

class CpuBf16Backend final : public Backend {
 public:
  explicit CpuBf16Backend(std::unique_ptr<Backend> f32) : f32_(std::move(f32)) {}

  std::string name() const override { return str_cat(f32_->name(), ", bf16 activations"); }
  DType compute_dtype() const override { return DType::kBF16; }
  double peak_flops() const override { return f32_->peak_flops(); }
  double executed_matmul_flops() const override { return f32_->executed_matmul_flops(); }

  StatusOr<void*> alloc(size_t bytes) override {
    AX_ASSIGN_OR_RETURN(void* p, f32_->alloc(bytes));
    allocations_.on_alloc(p, bytes);
    return p;
  }
  void free(void* ptr) override {
    allocations_.on_free(ptr);
    f32_->free(ptr);
  }
  void copy_from_host(Tensor dst, const void* src) override { f32_->copy_from_host(dst, src); }
  void copy_to_host(void* dst, Tensor src) override { f32_->copy_to_host(dst, src); }
  void copy(Tensor dst, Tensor src) override { f32_->copy(dst, src); }
  void zero(Tensor t) override { f32_->zero(t); }
  void synchronize() override {}

  void embedding_forward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe) override {
    check_embedding_forward(kBf16, out, tokens, wte, wpe);
    Widened w(*f32_);
    Tensor o = w.like(out);
    f32_->embedding_forward(o, tokens, w.of(wte), w.of(wpe));
    w.store(out, o);
  }
  void embedding_backward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens) override {
    check_embedding_backward(kBf16, dwte, dwpe, dout, tokens);
    Widened w(*f32_);
    f32_->embedding_backward(dwte, dwpe, w.of(dout), tokens);
  }

  void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight,
                         Tensor bias, float eps) override {
    check_layernorm_forward(kBf16, out, mean, rstd, inp, weight, bias);
    Widened w(*f32_);
    Tensor o = w.like(out);
    f32_->layernorm_forward(o, mean, rstd, w.of(inp), w.of(weight), w.of(bias), eps);
    w.store(out, o);
  }
  void layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                          Tensor weight, Tensor mean, Tensor rstd) override {
    check_layernorm_backward(kBf16, dinp, dweight, dbias, dout, inp, weight, mean, rstd);
    Widened w(*f32_);
    Tensor di = w.of(dinp);
    f32_->layernorm_backward(di, dweight, dbias, w.of(dout), w.of(inp), w.of(weight), mean, rstd);
    w.store(dinp, di);
  }
  void rmsnorm_forward(Tensor out, Tensor rstd, Tensor inp, Tensor weight, float eps) override {
    check_rmsnorm_forward(kBf16, out, rstd, inp, weight);
    Widened w(*f32_);
    Tensor o = w.like(out);
    f32_->rmsnorm_forward(o, rstd, w.of(inp), w.of(weight), eps);
    w.store(out, o);
  }
  void rmsnorm_backward(Tensor dinp, Tensor dweight, Tensor dout, Tensor inp, Tensor weight,
                        Tensor rstd) override {
    check_rmsnorm_backward(kBf16, dinp, dweight, dout, inp, weight, rstd);
    Widened w(*f32_);
    Tensor di = w.of(dinp);
    f32_->rmsnorm_backward(di, dweight, w.of(dout), w.of(inp), w.of(weight), rstd);
    w.store(dinp, di);
  }

  void matmul_forward(Tensor out, Tensor inp, Tensor weight, Tensor bias) override {
    check_matmul_forward(kBf16, out, inp, weight, bias);
    Widened w(*f32_);
    Tensor o = w.like(out);
    f32_->matmul_forward(o, w.of(inp), w.of(weight), w.of(bias));
    w.store(out, o);
  }
  void matmul_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                       Tensor weight) override {
    check_matmul_backward(kBf16, dinp, dweight, dbias, dout, inp, weight);
    Widened w(*f32_);
    Tensor di = w.of(dinp);
    f32_->matmul_backward(di, dweight, dbias, w.of(dout), w.of(inp), w.of(weight));
    w.store(dinp, di);
  }

  void rope_forward(Tensor out, Tensor inp, int num_heads, int num_kv_heads, const RopeSpec& rope,
                    int64_t first_position) override {
    check_rope(kBf16, out, inp, num_heads, num_kv_heads, "rope_forward", "out", "inp");
    Widened w(*f32_);
    Tensor x = w.of(inp);
    Tensor y = out.data == inp.data ? x : w.like(out);  // in place stays in place
    f32_->rope_forward(y, x, num_heads, num_kv_heads, rope, first_position);
    w.store(out, y);
  }
  void rope_backward(Tensor dinp, Tensor dout, int num_heads, int num_kv_heads,
                     const RopeSpec& rope, int64_t first_position) override {
    check_rope(kBf16, dinp, dout, num_heads, num_kv_heads, "rope_backward", "dinp", "dout");
    Widened w(*f32_);
    Tensor di = w.of(dinp);
    f32_->rope_backward(di, w.of(dout), num_heads, num_kv_heads, rope, first_position);
    w.store(dinp, di);
  }

  void attention_forward(Tensor out, Tensor lse, Tensor q, Tensor kv,
                         const AttentionSpec& spec) override {
    check_attention_forward(kBf16, out, lse, q, kv, spec);
    Widened w(*f32_);
    Tensor o = w.like(out);
    Tensor wq = w.of(q);
    AttentionSpec wide = spec;
    wide.bias = w.of(spec.bias);
    f32_->attention_forward(o, lse, wq, kv.data == q.data ? wq : w.of(kv), wide);
    w.store(out, o);
  }
  void attention_backward(Tensor dq, Tensor dkv, Tensor dbias, Tensor dout, Tensor out, Tensor lse,
                          Tensor q, Tensor kv, const AttentionSpec& spec) override {
    check_attention_backward(kBf16, dq, dkv, dbias, dout, out, lse, q, kv, spec);
    Widened w(*f32_);
    Tensor wq = w.of(q), wdq = w.of(dq);
    Tensor wkv = kv.data == q.data ? wq : w.of(kv);
    Tensor wdkv = dkv.data == dq.data ? wdq : w.of(dkv);  // one packed gradient stays one
    AttentionSpec wide = spec;
    wide.bias = w.of(spec.bias);
    f32_->attention_backward(wdq, wdkv, dbias, w.of(dout), w.of(out), lse, wq, wkv, wide);
    w.store(dq, wdq);
    if (dkv.data != dq.data) w.store(dkv, wdkv);
  }

  void gelu_forward(Tensor out, Tensor inp) override {
    check_gelu_forward(kBf16, out, inp);
    Widened w(*f32_);
    Tensor o = w.like(out);
    f32_->gelu_forward(o, w.of(inp));
    w.store(out, o);
  }
  void gelu_backward(Tensor dinp, Tensor dout, Tensor inp) override {
    check_gelu_backward(kBf16, dinp, dout, inp);
    Widened w(*f32_);
    Tensor di = w.of(dinp);
    f32_->gelu_backward(di, w.of(dout), w.of(inp));
    w.store(dinp, di);
  }
  void glu_forward(Tensor out, Tensor inp, Glu glu) override {
    check_glu_forward(kBf16, out, inp, glu);
    Widened w(*f32_);
    Tensor o = w.like(out);
    f32_->glu_forward(o, w.of(inp), glu);
    w.store(out, o);
  }
  void glu_backward(Tensor dinp, Tensor dout, Tensor inp, Glu glu) override {
    check_glu_backward(kBf16, dinp, dout, inp, glu);
    Widened w(*f32_);
    Tensor di = w.of(dinp);
    f32_->glu_backward(di, w.of(dout), w.of(inp), glu);
    w.store(dinp, di);
  }
  void dropout_forward(Tensor out, Tensor inp, Tensor row_keys, const DropoutSpec& spec) override {
    check_dropout_forward(kBf16, out, inp, row_keys, spec);
    Widened w(*f32_);
    Tensor o = w.like(out);
    f32_->dropout_forward(o, w.of(inp), row_keys, spec);
    w.store(out, o);
  }
  void dropout_backward(Tensor dinp, Tensor dout, Tensor row_keys,
                        const DropoutSpec& spec) override {
    check_dropout_backward(kBf16, dinp, dout, row_keys, spec);
    Widened w(*f32_);
    Tensor di = w.of(dinp);
    f32_->dropout_backward(di, w.of(dout), row_keys, spec);
    w.store(dinp, di);
  }
  void add_forward(Tensor out, Tensor a, Tensor b) override {
    check_add(kBf16, out, a, b);
    Widened w(*f32_);
    Tensor o = out.dtype == DType::kF32 ? out : w.like(out);
    f32_->add_forward(o, w.of(a), w.of(b));
    w.store(out, o);
  }

  void position_bias_forward(Tensor bias, Tensor table, Tensor buckets) override {
    check_position_bias_forward(kBf16, bias, table, buckets);
    Widened w(*f32_);
    Tensor o = w.like(bias);
    f32_->position_bias_forward(o, w.of(table), buckets);
    w.store(bias, o);  // a gather: the table's bf16 values, widened and rounded back exactly
  }
  void position_bias_backward(Tensor dtable, Tensor dbias, Tensor buckets) override {
    check_position_bias_backward(kBf16, dtable, dbias, buckets);
    f32_->position_bias_backward(dtable, dbias, buckets);
  }

  void cross_entropy_forward(Tensor losses, Tensor logits, Tensor targets, int64_t V,
                             float z_loss) override {
    check_cross_entropy_forward(kBf16, losses, logits, targets, V, z_loss);
    Widened w(*f32_);
    f32_->cross_entropy_forward(losses, w.of(logits), targets, V, z_loss);
  }
  void cross_entropy_backward(Tensor dlogits, Tensor logits, Tensor targets, int64_t V, float dloss,
                              float z_loss) override {
    check_cross_entropy_backward(kBf16, dlogits, logits, targets, V, z_loss);
    Widened w(*f32_);
    Tensor x = w.of(logits);
    Tensor d = dlogits.data == logits.data ? x : w.like(dlogits);
    f32_->cross_entropy_backward(d, x, targets, V, dloss, z_loss);
    w.store(dlogits, d);
  }
  void ce_shard_max(Tensor rowmax, Tensor logits, int64_t v_count) override {
    check_ce_shard_max(kBf16, rowmax, logits, v_count);
    Widened w(*f32_);
    f32_->ce_shard_max(rowmax, w.of(logits), v_count);
  }
  void ce_shard_sums(Tensor sums, Tensor logits, Tensor rowmax, Tensor targets, int64_t v_begin,
                     int64_t v_count) override {
    check_ce_shard_sums(kBf16, sums, logits, rowmax, targets, v_count);
    Widened w(*f32_);
    f32_->ce_shard_sums(sums, w.of(logits), rowmax, targets, v_begin, v_count);
  }
  void ce_shard_backward(Tensor dlogits, Tensor logits, Tensor lse, Tensor targets, int64_t v_begin,
                         int64_t v_count, float dloss, float z_loss) override {
    check_ce_shard_backward(kBf16, dlogits, logits, lse, targets, v_count, z_loss);
    Widened w(*f32_);
    Tensor x = w.of(logits);
    Tensor d = dlogits.data == logits.data ? x : w.like(dlogits);
    f32_->ce_shard_backward(d, x, lse, targets, v_begin, v_count, dloss, z_loss);
    w.store(dlogits, d);
  }

  double sum_squares(Tensor x) override { return f32_->sum_squares(x); }
  void adamw_update(Tensor params, Tensor grads, Tensor m, Tensor v,
                    const AdamWArgs& args) override {
    f32_->adamw_update(params, grads, m, v, args);
  }

 private:
  std::unique_ptr<Backend> f32_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_bf16_backend(int threads) {
  return std::make_unique<CpuBf16Backend>(make_cpu_backend(threads));
}

}  // namespace ax::train
