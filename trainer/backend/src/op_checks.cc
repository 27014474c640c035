#include "ax/trainer/backend/op_checks.h"

#include <cmath>

#include "ax/common/check.h"

namespace ax::train {

void expect_dtype(const Tensor& t, DType dtype, const char* op, const char* arg) {
  AX_CHECK(!t.empty()) << op << ": " << arg << " is empty";
  AX_CHECK(t.dtype == dtype) << op << ": " << arg << " is " << t.shape_string() << ", expected "
                             << dtype_name(dtype);
}

void expect_matrix(const Tensor& t, DType dtype, int64_t rows, int64_t cols, const char* op,
                   const char* arg) {
  expect_dtype(t, dtype, op, arg);
  AX_CHECK(t.rows() == rows && t.cols() == cols) << op << ": " << arg << " is " << t.shape_string()
                                                 << ", expected " << rows << " rows of " << cols;
}

void expect_shape(const Tensor& t, DType dtype, std::initializer_list<int64_t> dims, const char* op,
                  const char* arg) {
  expect_dtype(t, dtype, op, arg);
  bool same = t.ndim == static_cast<int>(dims.size());
  int i = 0;
  for (int64_t d : dims) same = same && t.shape[i++] == d;
  if (!same) {
    Tensor want(nullptr, dtype, {});
    for (int64_t d : dims) want.shape[want.ndim++] = d;
    AX_CHECK(false) << op << ": " << arg << " is " << t.shape_string() << ", expected "
                    << want.shape_string();
  }
}

std::pair<int64_t, int64_t> expect_vocab_shard(const Tensor& logits, DType dtype,
                                               const Tensor& targets, int64_t v_count,
                                               const char* op) {
  const int64_t N = logits.rows(), Vl = logits.cols();
  expect_matrix(logits, dtype, N, Vl, op, "logits");
  if (!targets.empty()) {
    expect_dtype(targets, DType::kI32, op, "targets");
    AX_CHECK_EQ(targets.numel(), N) << op << ": targets is " << targets.shape_string();
  }
  AX_CHECK(v_count >= 0 && v_count <= Vl)
      << op << ": v_count=" << v_count << " for logits " << logits.shape_string();
  return {N, Vl};
}

namespace {

constexpr DType kF32 = DType::kF32;

// tokens (B, T) i32 and a table (Vp, C) of `table_dtype`; `acts` (B, T, C) in the activation
// dtype; `pos` (>= T, C) of the table's dtype, or empty.
EmbeddingDims embedding_dims(DTypePlan p, const Tensor& tokens, const Tensor& table,
                             DType table_dtype, const Tensor& pos, const Tensor& acts,
                             const char* op, const char* table_name, const char* pos_name,
                             const char* acts_name) {
  expect_dtype(tokens, DType::kI32, op, "tokens");
  AX_CHECK_EQ(tokens.ndim, 2) << op << ": tokens is " << tokens.shape_string();
  expect_dtype(table, table_dtype, op, table_name);
  AX_CHECK_EQ(table.ndim, 2) << op << ": " << table_name << " is " << table.shape_string();
  EmbeddingDims d{tokens.dim(0), tokens.dim(1), table.dim(0), table.dim(1)};
  expect_shape(acts, p.act, {d.B, d.T, d.C}, op, acts_name);
  if (!pos.empty()) {
    expect_dtype(pos, table_dtype, op, pos_name);
    AX_CHECK(pos.ndim == 2 && pos.dim(0) >= d.T && pos.dim(1) == d.C)
        << op << ": " << pos_name << " is " << pos.shape_string() << " for T=" << d.T
        << ", C=" << d.C;
  }
  return d;
}

// (B, T, (NH + 2·KVH)·HD) in the activation dtype.
HeadDims head_dims(DTypePlan p, const Tensor& t, int num_heads, int num_kv_heads, const char* op,
                   const char* arg) {
  expect_dtype(t, p.act, op, arg);
  AX_CHECK(t.ndim == 3 && num_heads > 0 && num_kv_heads > 0 && num_heads % num_kv_heads == 0)
      << op << ": " << arg << " " << t.shape_string() << " with " << num_heads << " heads and "
      << num_kv_heads << " kv heads";
  const int64_t heads = num_heads + 2 * num_kv_heads, R = t.dim(2);
  AX_CHECK_EQ(R % heads, 0) << op << ": " << arg << " " << t.shape_string() << " is not " << heads
                            << " heads";
  return {t.dim(0), t.dim(1), R, R / heads};
}

void check_vocab(int64_t V, int64_t Vp, const Tensor& logits, const char* op) {
  AX_CHECK(V > 0 && V <= Vp) << op << ": V=" << V << " for logits " << logits.shape_string();
}

void check_targets(const Tensor& targets, int64_t N, const char* op) {
  expect_dtype(targets, DType::kI32, op, "targets");
  AX_CHECK_EQ(targets.numel(), N) << op << ": targets is " << targets.shape_string();
}

}  // namespace

EmbeddingDims check_embedding_forward(DTypePlan p, const Tensor& out, const Tensor& tokens,
                                      const Tensor& wte, const Tensor& wpe) {
  return embedding_dims(p, tokens, wte, p.act, wpe, out, "embedding_forward", "wte", "wpe", "out");
}

EmbeddingDims check_embedding_backward(DTypePlan p, const Tensor& dwte, const Tensor& dwpe,
                                       const Tensor& dout, const Tensor& tokens) {
  return embedding_dims(p, tokens, dwte, kF32, dwpe, dout, "embedding_backward", "dwte", "dwpe",
                        "dout");
}

RowDims check_layernorm_forward(DTypePlan p, const Tensor& out, const Tensor& mean,
                                const Tensor& rstd, const Tensor& inp, const Tensor& weight,
                                const Tensor& bias) {
  constexpr const char* kOp = "layernorm_forward";
  const int64_t N = inp.rows(), C = inp.cols();
  expect_matrix(inp, p.act, N, C, kOp, "inp");
  expect_matrix(out, p.act, N, C, kOp, "out");
  expect_shape(mean, kF32, {N}, kOp, "mean");
  expect_shape(rstd, kF32, {N}, kOp, "rstd");
  expect_shape(weight, p.act, {C}, kOp, "weight");
  if (!bias.empty()) expect_shape(bias, p.act, {C}, kOp, "bias");
  return {N, C};
}

RowDims check_layernorm_backward(DTypePlan p, const Tensor& dinp, const Tensor& dweight,
                                 const Tensor& dbias, const Tensor& dout, const Tensor& inp,
                                 const Tensor& weight, const Tensor& mean, const Tensor& rstd) {
  constexpr const char* kOp = "layernorm_backward";
  const int64_t N = inp.rows(), C = inp.cols();
  expect_matrix(inp, p.act, N, C, kOp, "inp");
  expect_matrix(dout, p.act, N, C, kOp, "dout");
  expect_matrix(dinp, p.act, N, C, kOp, "dinp");
  expect_shape(weight, p.act, {C}, kOp, "weight");
  expect_shape(dweight, kF32, {C}, kOp, "dweight");
  expect_shape(mean, kF32, {N}, kOp, "mean");
  expect_shape(rstd, kF32, {N}, kOp, "rstd");
  if (!dbias.empty()) expect_shape(dbias, kF32, {C}, kOp, "dbias");
  return {N, C};
}

RowDims check_rmsnorm_forward(DTypePlan p, const Tensor& out, const Tensor& rstd, const Tensor& inp,
                              const Tensor& weight) {
  constexpr const char* kOp = "rmsnorm_forward";
  const int64_t N = inp.rows(), C = inp.cols();
  expect_matrix(inp, p.act, N, C, kOp, "inp");
  expect_matrix(out, p.act, N, C, kOp, "out");
  expect_shape(rstd, kF32, {N}, kOp, "rstd");
  expect_shape(weight, p.act, {C}, kOp, "weight");
  return {N, C};
}

RowDims check_rmsnorm_backward(DTypePlan p, const Tensor& dinp, const Tensor& dweight,
                               const Tensor& dout, const Tensor& inp, const Tensor& weight,
                               const Tensor& rstd) {
  constexpr const char* kOp = "rmsnorm_backward";
  const int64_t N = inp.rows(), C = inp.cols();
  expect_matrix(inp, p.act, N, C, kOp, "inp");
  expect_matrix(dout, p.act, N, C, kOp, "dout");
  expect_matrix(dinp, p.act, N, C, kOp, "dinp");
  expect_shape(weight, p.act, {C}, kOp, "weight");
  expect_shape(dweight, kF32, {C}, kOp, "dweight");
  expect_shape(rstd, kF32, {N}, kOp, "rstd");
  return {N, C};
}

MatmulDims check_matmul_forward(DTypePlan p, const Tensor& out, const Tensor& inp,
                                const Tensor& weight, const Tensor& bias) {
  constexpr const char* kOp = "matmul_forward";
  expect_dtype(weight, p.act, kOp, "weight");
  AX_CHECK_EQ(weight.ndim, 2) << kOp << ": weight is " << weight.shape_string();
  const int64_t OC = weight.dim(0), C = weight.dim(1), N = inp.rows();
  expect_matrix(inp, p.act, N, C, kOp, "inp");
  expect_matrix(out, p.act, N, OC, kOp, "out");
  if (!bias.empty()) expect_shape(bias, p.act, {OC}, kOp, "bias");
  return {N, C, OC};
}

MatmulDims check_matmul_backward(DTypePlan p, const Tensor& dinp, const Tensor& dweight,
                                 const Tensor& dbias, const Tensor& dout, const Tensor& inp,
                                 const Tensor& weight) {
  constexpr const char* kOp = "matmul_backward";
  expect_dtype(weight, p.act, kOp, "weight");
  AX_CHECK_EQ(weight.ndim, 2) << kOp << ": weight is " << weight.shape_string();
  const int64_t OC = weight.dim(0), C = weight.dim(1), N = inp.rows();
  expect_matrix(inp, p.act, N, C, kOp, "inp");
  expect_matrix(dout, p.act, N, OC, kOp, "dout");
  expect_shape(dweight, kF32, {OC, C}, kOp, "dweight");
  if (!dinp.empty()) expect_matrix(dinp, p.act, N, C, kOp, "dinp");
  if (!dbias.empty()) expect_shape(dbias, kF32, {OC}, kOp, "dbias");
  return {N, C, OC};
}

HeadDims check_rope(DTypePlan p, const Tensor& y, const Tensor& x, int num_heads, int num_kv_heads,
                    const char* op, const char* y_name, const char* x_name) {
  HeadDims d = head_dims(p, x, num_heads, num_kv_heads, op, x_name);
  AX_CHECK_EQ(d.HD % 2, 0) << op << ": " << x_name << " " << x.shape_string()
                           << " has an odd head_dim " << d.HD;
  expect_shape(y, p.act, {d.B, d.T, d.R}, op, y_name);
  return d;
}

namespace {

AttentionDims attention_dims(DTypePlan p, const Tensor& out, const Tensor& q, const Tensor& kv,
                             const AttentionSpec& s, const char* op) {
  expect_dtype(q, p.act, op, "q");
  expect_dtype(kv, p.act, op, "kv");
  expect_dtype(out, p.act, op, "out");
  AX_CHECK(q.ndim == 3 && kv.ndim == 3 && out.ndim == 3 && s.num_heads > 0 && s.num_kv_heads > 0 &&
           s.num_heads % s.num_kv_heads == 0 && out.dim(2) % s.num_heads == 0)
      << op << ": q " << q.shape_string() << ", kv " << kv.shape_string() << ", out "
      << out.shape_string() << " with " << s.num_heads << " heads and " << s.num_kv_heads
      << " kv heads";
  AttentionDims d{
      q.dim(0), q.dim(1),  kv.dim(1), s.num_heads, s.num_kv_heads, out.dim(2) / s.num_heads,
      q.dim(2), kv.dim(2), 0,         false};
  AX_CHECK(kv.dim(0) == d.B && out.dim(0) == d.B && out.dim(1) == d.Tq && d.Rq >= d.NH * d.HD &&
           s.k_offset >= 0 && s.k_offset + 2 * d.KVH * d.HD <= d.Rkv)
      << op << ": q " << q.shape_string() << ", kv " << kv.shape_string() << ", out "
      << out.shape_string() << " do not hold " << d.NH << " query and " << d.KVH
      << " key/value heads of " << d.HD << " from column " << s.k_offset;
  AX_CHECK(s.q_first_position >= 0 && s.k_first_position >= 0)
      << op << ": first positions " << s.q_first_position << " (queries) and " << s.k_first_position
      << " (keys) must not be negative";
  AX_CHECK(s.scale > 0) << op << ": scale " << s.scale;
  if (!s.bias.empty()) {
    expect_dtype(s.bias, p.act, op, "bias");
    d.bias_batch = s.bias.ndim == 4 ? s.bias.dim(0) : 0;
    AX_CHECK(s.bias.ndim == 4 && (d.bias_batch == 1 || d.bias_batch == d.B) &&
             s.bias.dim(1) == d.NH && s.bias.dim(2) == d.Tq && s.bias.dim(3) == d.Tk)
        << op << ": bias is " << s.bias.shape_string() << ", expected (1 or " << d.B << ", " << d.NH
        << ", " << d.Tq << ", " << d.Tk << ")";
  }
  AX_CHECK(s.q_segments.empty() == s.k_segments.empty())
      << op << ": segment ids for the queries and the keys go together";
  if (!s.q_segments.empty()) {
    expect_shape(s.q_segments, DType::kI32, {d.B, d.Tq}, op, "q_segments");
    expect_shape(s.k_segments, DType::kI32, {d.B, d.Tk}, op, "k_segments");
    d.segments = true;
  }
  return d;
}

}  // namespace

AttentionDims check_attention_forward(DTypePlan p, const Tensor& out, const Tensor& lse,
                                      const Tensor& q, const Tensor& kv, const AttentionSpec& s) {
  constexpr const char* kOp = "attention_forward";
  AttentionDims d = attention_dims(p, out, q, kv, s, kOp);
  expect_shape(lse, kF32, {d.B, d.NH, d.Tq}, kOp, "lse");
  return d;
}

AttentionDims check_attention_backward(DTypePlan p, const Tensor& dq, const Tensor& dkv,
                                       const Tensor& dbias, const Tensor& dout, const Tensor& out,
                                       const Tensor& lse, const Tensor& q, const Tensor& kv,
                                       const AttentionSpec& s) {
  constexpr const char* kOp = "attention_backward";
  AttentionDims d = attention_dims(p, out, q, kv, s, kOp);
  expect_shape(lse, kF32, {d.B, d.NH, d.Tq}, kOp, "lse");
  expect_shape(dout, p.act, {d.B, d.Tq, d.NH * d.HD}, kOp, "dout");
  expect_shape(dq, p.act, {d.B, d.Tq, d.Rq}, kOp, "dq");
  expect_shape(dkv, p.act, {d.B, d.Tk, d.Rkv}, kOp, "dkv");
  if (!dbias.empty()) {
    AX_CHECK(d.bias_batch > 0) << kOp << ": dbias without a bias";
    expect_shape(dbias, kF32, {d.bias_batch, d.NH, d.Tq, d.Tk}, kOp, "dbias");
  }
  return d;
}

RowDims check_gelu_forward(DTypePlan p, const Tensor& out, const Tensor& inp) {
  const int64_t rows = inp.rows(), cols = inp.cols();
  expect_matrix(inp, p.act, rows, cols, "gelu_forward", "inp");
  expect_matrix(out, p.act, rows, cols, "gelu_forward", "out");
  return {rows, cols};
}

RowDims check_gelu_backward(DTypePlan p, const Tensor& dinp, const Tensor& dout,
                            const Tensor& inp) {
  const int64_t rows = inp.rows(), cols = inp.cols();
  expect_matrix(inp, p.act, rows, cols, "gelu_backward", "inp");
  expect_matrix(dout, p.act, rows, cols, "gelu_backward", "dout");
  expect_matrix(dinp, p.act, rows, cols, "gelu_backward", "dinp");
  return {rows, cols};
}

namespace {

void expect_dropout(const Tensor& row_keys, int64_t N, int64_t F, const DropoutSpec& spec,
                    const char* op) {
  AX_CHECK(row_keys.dtype == DType::kI32 && row_keys.numel() == N)
      << op << ": row_keys must be i32 with one key per row (" << N << ")";
  AX_CHECK(spec.feature_offset >= 0 && spec.feature_offset + F <= (int64_t{1} << 32))
      << op << ": feature indices " << spec.feature_offset << " + " << F
      << " do not fit in 32 bits";
}

}  // namespace

RowDims check_dropout_forward(DTypePlan p, const Tensor& out, const Tensor& inp,
                              const Tensor& row_keys, const DropoutSpec& spec) {
  constexpr const char* kOp = "dropout_forward";
  const int64_t N = inp.rows(), F = inp.cols();
  expect_matrix(inp, p.act, N, F, kOp, "inp");
  expect_matrix(out, p.act, N, F, kOp, "out");
  expect_dropout(row_keys, N, F, spec, kOp);
  return {N, F};
}

RowDims check_dropout_backward(DTypePlan p, const Tensor& dinp, const Tensor& dout,
                               const Tensor& row_keys, const DropoutSpec& spec) {
  constexpr const char* kOp = "dropout_backward";
  const int64_t N = dout.rows(), F = dout.cols();
  expect_matrix(dout, p.act, N, F, kOp, "dout");
  expect_matrix(dinp, p.act, N, F, kOp, "dinp");
  expect_dropout(row_keys, N, F, spec, kOp);
  return {N, F};
}

namespace {

void expect_glu(Glu glu, const char* op) {
  AX_CHECK(glu == Glu::kSwiGlu || glu == Glu::kGeGlu)
      << op << ": no gated linear unit " << static_cast<int>(glu);
}

}  // namespace

RowDims check_glu_forward(DTypePlan p, const Tensor& out, const Tensor& inp, Glu glu) {
  constexpr const char* kOp = "glu_forward";
  expect_glu(glu, kOp);
  const int64_t N = out.rows(), F = out.cols();
  expect_matrix(out, p.act, N, F, kOp, "out");
  expect_matrix(inp, p.act, N, 2 * F, kOp, "inp");
  return {N, F};
}

RowDims check_glu_backward(DTypePlan p, const Tensor& dinp, const Tensor& dout, const Tensor& inp,
                           Glu glu) {
  constexpr const char* kOp = "glu_backward";
  expect_glu(glu, kOp);
  const int64_t N = dout.rows(), F = dout.cols();
  expect_matrix(dout, p.act, N, F, kOp, "dout");
  expect_matrix(inp, p.act, N, 2 * F, kOp, "inp");
  expect_matrix(dinp, p.act, N, 2 * F, kOp, "dinp");
  return {N, F};
}

RowDims check_add(DTypePlan p, const Tensor& out, const Tensor& a, const Tensor& b) {
  constexpr const char* kOp = "add_forward";
  // The residual stream is in the activation dtype; FSDP adds reduce-scattered f32 gradients.
  const DType dtype = !out.empty() && out.dtype == kF32 ? kF32 : p.act;
  const int64_t rows = out.rows(), cols = out.cols();
  expect_matrix(out, dtype, rows, cols, kOp, "out");
  expect_matrix(a, dtype, rows, cols, kOp, "a");
  expect_matrix(b, dtype, rows, cols, kOp, "b");
  return {rows, cols};
}

namespace {

// table (num_buckets, NH) of `table_dtype`, buckets (Bb, Tq, Tk) i32, bias (Bb, NH, Tq, Tk) of
// `bias_dtype`.
PositionBiasDims position_bias_dims(const Tensor& bias, DType bias_dtype, const Tensor& table,
                                    DType table_dtype, const Tensor& buckets, const char* op,
                                    const char* bias_name, const char* table_name) {
  expect_dtype(table, table_dtype, op, table_name);
  AX_CHECK_EQ(table.ndim, 2) << op << ": " << table_name << " is " << table.shape_string();
  expect_dtype(buckets, DType::kI32, op, "buckets");
  AX_CHECK_EQ(buckets.ndim, 3) << op << ": buckets is " << buckets.shape_string();
  PositionBiasDims d{buckets.dim(0), table.dim(1), buckets.dim(1), buckets.dim(2), table.dim(0)};
  expect_shape(bias, bias_dtype, {d.Bb, d.NH, d.Tq, d.Tk}, op, bias_name);
  return d;
}

void check_z_loss(float z_loss, const char* op) {
  AX_CHECK(std::isfinite(z_loss) && z_loss >= 0) << op << ": z_loss " << z_loss;
}

}  // namespace

PositionBiasDims check_position_bias_forward(DTypePlan p, const Tensor& bias, const Tensor& table,
                                             const Tensor& buckets) {
  return position_bias_dims(bias, p.act, table, p.act, buckets, "position_bias_forward", "bias",
                            "table");
}

PositionBiasDims check_position_bias_backward(DTypePlan, const Tensor& dtable, const Tensor& dbias,
                                              const Tensor& buckets) {
  return position_bias_dims(dbias, kF32, dtable, kF32, buckets, "position_bias_backward", "dbias",
                            "dtable");
}

std::pair<int64_t, int64_t> check_cross_entropy_forward(DTypePlan p, const Tensor& losses,
                                                        const Tensor& logits, const Tensor& targets,
                                                        int64_t V, float z_loss) {
  constexpr const char* kOp = "cross_entropy_forward";
  check_z_loss(z_loss, kOp);
  const int64_t N = logits.rows(), Vp = logits.cols();
  expect_matrix(logits, p.act, N, Vp, kOp, "logits");
  expect_shape(losses, kF32, {N}, kOp, "losses");
  check_targets(targets, N, kOp);
  check_vocab(V, Vp, logits, kOp);
  return {N, Vp};
}

std::pair<int64_t, int64_t> check_cross_entropy_backward(DTypePlan p, const Tensor& dlogits,
                                                         const Tensor& logits,
                                                         const Tensor& targets, int64_t V,
                                                         float z_loss) {
  constexpr const char* kOp = "cross_entropy_backward";
  check_z_loss(z_loss, kOp);
  const int64_t N = logits.rows(), Vp = logits.cols();
  expect_matrix(logits, p.act, N, Vp, kOp, "logits");
  expect_matrix(dlogits, p.act, N, Vp, kOp, "dlogits");
  check_targets(targets, N, kOp);
  check_vocab(V, Vp, logits, kOp);
  return {N, Vp};
}

std::pair<int64_t, int64_t> check_ce_shard_max(DTypePlan p, const Tensor& rowmax,
                                               const Tensor& logits, int64_t v_count) {
  auto d = expect_vocab_shard(logits, p.act, Tensor(), v_count, "ce_shard_max");
  expect_shape(rowmax, kF32, {d.first}, "ce_shard_max", "rowmax");
  return d;
}

std::pair<int64_t, int64_t> check_ce_shard_sums(DTypePlan p, const Tensor& sums,
                                                const Tensor& logits, const Tensor& rowmax,
                                                const Tensor& targets, int64_t v_count) {
  constexpr const char* kOp = "ce_shard_sums";
  auto d = expect_vocab_shard(logits, p.act, targets, v_count, kOp);
  expect_dtype(targets, DType::kI32, kOp, "targets");
  expect_shape(sums, kF32, {d.first, 2}, kOp, "sums");
  expect_shape(rowmax, kF32, {d.first}, kOp, "rowmax");
  return d;
}

std::pair<int64_t, int64_t> check_ce_shard_backward(DTypePlan p, const Tensor& dlogits,
                                                    const Tensor& logits, const Tensor& lse,
                                                    const Tensor& targets, int64_t v_count,
                                                    float z_loss) {
  constexpr const char* kOp = "ce_shard_backward";
  check_z_loss(z_loss, kOp);
  auto d = expect_vocab_shard(logits, p.act, targets, v_count, kOp);
  expect_dtype(targets, DType::kI32, kOp, "targets");
  expect_matrix(dlogits, p.act, d.first, d.second, kOp, "dlogits");
  expect_shape(lse, kF32, {d.first}, kOp, "lse");
  return d;
}

int64_t check_sum_squares(const Tensor& x) {
  expect_dtype(x, kF32, "sum_squares", "x");
  return x.numel();
}

int64_t check_adamw_update(const Tensor& params, const Tensor& grads, const Tensor& m,
                           const Tensor& v) {
  constexpr const char* kOp = "adamw_update";
  expect_dtype(params, kF32, kOp, "params");
  const int64_t n = params.numel();
  for (auto [t, name] : {std::pair{&grads, "grads"}, {&m, "m"}, {&v, "v"}}) {
    expect_dtype(*t, kF32, kOp, name);
    AX_CHECK_EQ(t->numel(), n) << kOp << ": " << name << " is " << t->shape_string() << ", params "
                               << params.shape_string();
  }
  return n;
}

AdamWScalars adamw_scalars(const AdamWArgs& args) {
  AX_CHECK_GE(args.step, 1) << "adamw_update: step is 1-based";
  const double bias1 =
      1.0 - std::pow(static_cast<double>(args.beta1), static_cast<double>(args.step));
  const double bias2 =
      1.0 - std::pow(static_cast<double>(args.beta2), static_cast<double>(args.step));
  return {
      args.grad_scale,
      static_cast<float>(1.0 - static_cast<double>(args.lr) * args.weight_decay),
      args.beta1,
      static_cast<float>(1.0 - args.beta1),
      args.beta2,
      static_cast<float>(1.0 - args.beta2),
      static_cast<float>(std::sqrt(bias2)),
      args.eps,
      static_cast<float>(-(args.lr / bias1)),
  };
}

}  // namespace ax::train
