#include "layers.h"

#include <cmath>

#include "ax/common/rng.h"
#include "ax/trainer/backend/dropout_mask.h"
#include "ax/trainer/comm/communicator.h"
#include "ax/trainer/parallel/seq_attention.h"
#include "position_buckets.h"

namespace ax::train::layers {
namespace {

// The (rows, cols) view that matmuls and norms take of a (B, T, X) activation.
Tensor rows_view(Tensor t) { return t.view({t.rows(), t.cols()}); }

ParamSpec make_param(std::string name, std::vector<int64_t> shape, bool matrix, ParamInit init,
                     double std) {
  ParamSpec spec;
  spec.name = std::move(name);
  spec.shape = std::move(shape);
  spec.weight_decay = matrix;
  spec.matmul = matrix;
  spec.init = init;
  spec.init_std = std;
  return spec;
}

void add_param(ParamLayout* layout, std::string name, std::vector<int64_t> shape, bool matrix,
               ParamInit init, double std) {
  layout->add(make_param(std::move(name), std::move(shape), matrix, init, std));
}

// Splits `spec` along `dim` into this rank's share of each block of the logical size (blocks
// sum to logical_shape[dim]; each divisible by the group size, checked by Model::create).
void split_blocks(ParamSpec* spec, int dim, const std::vector<int64_t>& blocks,
                  const TensorGroup& tp) {
  spec->logical_shape = spec->shape;
  spec->split_dim = dim;
  int64_t local = 0, logical = 0;
  for (int64_t block : blocks) {
    const int64_t part = block / tp.size;
    spec->pieces.push_back({local, logical + tp.rank * part, part});
    local += part;
    logical += block;
  }
  AX_CHECK_EQ(logical, spec->logical_shape[static_cast<size_t>(dim)]) << spec->name;
  spec->shape[static_cast<size_t>(dim)] = local;
}

}  // namespace

void TensorGroup::all_reduce(Tensor t) const {
  if (size == 1) return;
  comm::collective_or_die(comm->all_reduce(t, comm::ReduceOp::kSum), "tensor-parallel all-reduce");
}

// ---- Linear ----

void Linear::declare(ParamLayout* layout, const std::string& prefix, int64_t out, int64_t in,
                     bool has_bias, double init_std, const TensorGroup& tp,
                     const LinearSplit& split) {
  const bool split_any = tp.size > 1 && split.kind != LinearSplit::kNone;
  weight_name = prefix + ".weight";
  ParamSpec w = make_param(weight_name, {out, in}, true, ParamInit::kNormal, init_std);
  bias_name = has_bias ? prefix + ".bias" : "";
  ParamSpec b = make_param(bias_name, {out}, false, ParamInit::kZeros, 0);
  if (split_any && split.kind == LinearSplit::kColumn) {
    split_blocks(&w, 0, split.blocks, tp);
    split_blocks(&b, 0, split.blocks, tp);
  } else if (split_any && split.kind == LinearSplit::kRow) {
    split_blocks(&w, 1, {in}, tp);
    bias_in_forward = tp.rank == 0;
  }
  layout->add(std::move(w));
  if (has_bias) layout->add(std::move(b));
}

void Linear::bind(const ParamStore& store) {
  weight = store.views(weight_name);
  bias = store.views(bias_name);
}

void Linear::forward(Backend& be, Tensor out, Tensor inp) const {
  be.matmul_forward(rows_view(out), rows_view(inp), weight.w, bias_in_forward ? bias.w : Tensor());
}

void Linear::backward(Backend& be, Tensor dinp, Tensor dout, Tensor inp) const {
  be.matmul_backward(dinp.empty() ? dinp : rows_view(dinp), weight.dw, bias.dw, rows_view(dout),
                     rows_view(inp), weight.w);
}

// ---- Norm ----

void Norm::declare(ParamLayout* layout, const std::string& prefix, int64_t dim, bool rms_norm,
                   bool has_bias, double norm_eps) {
  rms = rms_norm;
  eps = static_cast<float>(norm_eps);
  weight_name = prefix + ".weight";
  add_param(layout, weight_name, {dim}, false, ParamInit::kOnes, 0);
  bias_name = (has_bias && !rms) ? prefix + ".bias" : "";
  if (!bias_name.empty()) add_param(layout, bias_name, {dim}, false, ParamInit::kZeros, 0);
}

void Norm::bind(const ParamStore& store) {
  weight = store.views(weight_name);
  bias = store.views(bias_name);
}

void Norm::plan(Arena* arena, DType dtype, int64_t rows, int64_t dim, Acts* acts) const {
  acts->out = arena->take(dtype, {rows, dim});
  acts->mean = rms ? Tensor() : arena->take(DType::kF32, {rows});
  acts->rstd = arena->take(DType::kF32, {rows});
}

void Norm::forward(Backend& be, const Acts& acts, Tensor inp) const {
  if (rms) {
    be.rmsnorm_forward(acts.out, acts.rstd, rows_view(inp), weight.w, eps);
  } else {
    be.layernorm_forward(acts.out, acts.mean, acts.rstd, rows_view(inp), weight.w, bias.w, eps);
  }
}

void Norm::backward(Backend& be, Tensor dinp, Tensor dout, Tensor inp, const Acts& acts) const {
  if (rms) {
    be.rmsnorm_backward(rows_view(dinp), weight.dw, rows_view(dout), rows_view(inp), weight.w,
                        acts.rstd);
  } else {
    be.layernorm_backward(rows_view(dinp), weight.dw, bias.dw, rows_view(dout), rows_view(inp),
                          weight.w, acts.mean, acts.rstd);
  }
}

// ---- SelfAttention ----

BlockOptions BlockOptions::of(const ModelConfig& config) {
  BlockOptions o;
  o.dim = config.model_dim;
  o.num_heads = config.num_heads;
  o.num_kv_heads = config.num_kv_heads;
  o.head_dim = config.head_dim();
  o.hidden = config.hidden_dim;
  o.rms_norm = config.norm == NormKind::kRmsNorm;
  o.norm_eps = config.norm_eps;
  if (config.activation == Activation::kSwiglu) o.glu = Glu::kSwiGlu;
  if (config.activation == Activation::kGeglu) o.glu = Glu::kGeGlu;
  o.rope = config.position == PositionKind::kRope;
  o.rope_spec.theta = config.rope_theta;
  if (config.rope_scaling == RopeScalingKind::kLlama3) {
    o.rope_spec.scaling = RopeSpec::Scaling::kLlama3;
    o.rope_spec.factor = config.rope_scaling_factor;
    o.rope_spec.low_freq_factor = config.rope_low_freq_factor;
    o.rope_spec.high_freq_factor = config.rope_high_freq_factor;
    o.rope_spec.original_max_positions = static_cast<double>(config.rope_original_max_positions);
  }
  o.bias = config.bias;
  o.init_std = config.init_std;
  // GPT-2's scaled init of the projections that write into the residual stream.
  o.proj_std = config.init_std / std::sqrt(2.0 * static_cast<double>(config.num_layers));
  o.mlp_proj_std = o.proj_std;
  return o;
}

void SelfAttention::declare(ParamLayout* layout, const std::string& prefix, const BlockOptions& o,
                            const TensorGroup& group) {
  tp = group;
  num_heads = static_cast<int>(o.num_heads / tp.size);
  num_kv_heads = static_cast<int>(o.num_kv_heads / tp.size);
  head_dim = o.head_dim;
  rope = o.rope;
  rope_spec = o.rope_spec;
  const int64_t q = o.num_heads * head_dim, kv = o.num_kv_heads * head_dim;
  qkv.declare(layout, prefix + ".qkv", q + 2 * kv, o.dim, o.bias, o.init_std, tp,
              {LinearSplit::kColumn, {q, kv, kv}});
  proj.declare(layout, prefix + ".proj", o.dim, q, o.bias, o.proj_std, tp, {LinearSplit::kRow, {}});
}

AttentionSpec SelfAttention::spec(const LayerContext& ctx) const {
  AttentionSpec s;
  s.num_heads = num_heads;
  s.num_kv_heads = num_kv_heads;
  s.causal = causal;
  s.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  s.k_offset = num_heads * head_dim;
  s.bias = ctx.bias;
  s.q_segments = s.k_segments = ctx.segments;
  return s;
}

void SelfAttention::bind(const ParamStore& store) {
  qkv.bind(store);
  proj.bind(store);
}

void SelfAttention::plan(Arena* arena, DType dtype, int64_t batch, int64_t seq, Acts* acts) const {
  acts->qkv = arena->take(dtype, {batch, seq, qkv_dim()});
  acts->out = arena->take(dtype, {batch, seq, num_heads * head_dim});
  acts->lse = arena->take(DType::kF32, {batch, num_heads, seq});
}

void SelfAttention::plan_scratch(Arena* arena, DType dtype, int64_t batch, int64_t seq,
                                 Scratch* scratch) const {
  scratch->qkv_pre = rope ? arena->take(dtype, {batch, seq, qkv_dim()}) : Tensor();
  scratch->dqkv = arena->take(dtype, {batch, seq, qkv_dim()});
  scratch->dqkv_pre = rope ? arena->take(dtype, {batch, seq, qkv_dim()}) : Tensor();
  scratch->dout = arena->take(dtype, {batch, seq, num_heads * head_dim});
}

void SelfAttention::forward(Backend& be, Tensor out, Tensor inp, const Acts& acts,
                            const Scratch& scratch, const LayerContext& ctx) const {
  if (rope) {
    qkv.forward(be, scratch.qkv_pre, inp);
    be.rope_forward(acts.qkv, scratch.qkv_pre, num_heads, num_kv_heads, rope_spec,
                    ctx.first_position);
  } else {
    qkv.forward(be, acts.qkv, inp);
  }
  if (ctx.seq != nullptr) {
    comm::collective_or_die(
        seq_attention_forward(be, *ctx.seq, acts.out, acts.lse, acts.qkv, acts.qkv, spec(ctx)),
        "the seq group's attention (forward)");
  } else {
    be.attention_forward(acts.out, acts.lse, acts.qkv, acts.qkv, spec(ctx));
  }
  proj.forward(be, out, acts.out);
}

void SelfAttention::backward(Backend& be, Tensor dinp, Tensor dout, Tensor inp, const Acts& acts,
                             const Scratch& scratch, const LayerContext& ctx) const {
  be.zero(scratch.dout);
  proj.backward(be, scratch.dout, dout, acts.out);
  be.zero(scratch.dqkv);
  if (ctx.seq != nullptr) {
    comm::collective_or_die(
        seq_attention_backward(be, *ctx.seq, scratch.dqkv, scratch.dqkv, ctx.dbias, scratch.dout,
                               acts.out, acts.lse, acts.qkv, acts.qkv, spec(ctx)),
        "the seq group's attention (backward)");
  } else {
    be.attention_backward(scratch.dqkv, scratch.dqkv, ctx.dbias, scratch.dout, acts.out, acts.lse,
                          acts.qkv, acts.qkv, spec(ctx));
  }
  Tensor dqkv = scratch.dqkv;
  if (rope) {
    be.zero(scratch.dqkv_pre);
    be.rope_backward(scratch.dqkv_pre, scratch.dqkv, num_heads, num_kv_heads, rope_spec,
                     ctx.first_position);
    dqkv = scratch.dqkv_pre;
  }
  qkv.backward(be, dinp, dqkv, inp);
}

// ---- CrossAttention ----

AttentionSpec CrossAttention::spec(const LayerContext& ctx) const {
  AttentionSpec s;
  s.num_heads = num_heads;
  s.num_kv_heads = num_kv_heads;
  s.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  s.q_segments = ctx.segments;
  s.k_segments = ctx.memory_segments;
  AX_CHECK_EQ(s.q_segments.empty(), s.k_segments.empty())
      << "cross-attention needs segments for both the queries and the memory, or neither";
  return s;
}

void CrossAttention::declare(ParamLayout* layout, const std::string& prefix, const BlockOptions& o,
                             const TensorGroup& tp) {
  num_heads = static_cast<int>(o.num_heads / tp.size);
  num_kv_heads = static_cast<int>(o.num_kv_heads / tp.size);
  head_dim = o.head_dim;
  const int64_t qd = o.num_heads * head_dim, kvd = o.num_kv_heads * head_dim;
  q.declare(layout, prefix + ".q", qd, o.dim, o.bias, o.init_std, tp, {LinearSplit::kColumn, {qd}});
  kv.declare(layout, prefix + ".kv", 2 * kvd, o.dim, o.bias, o.init_std, tp,
             {LinearSplit::kColumn, {kvd, kvd}});
  proj.declare(layout, prefix + ".proj", o.dim, qd, o.bias, o.proj_std, tp,
               {LinearSplit::kRow, {}});
}

void CrossAttention::bind(const ParamStore& store) {
  q.bind(store);
  kv.bind(store);
  proj.bind(store);
}

void CrossAttention::plan(Arena* arena, DType dtype, int64_t batch, int64_t seq, int64_t memory_seq,
                          Acts* acts) const {
  acts->q = arena->take(dtype, {batch, seq, num_heads * head_dim});
  acts->kv = arena->take(dtype, {batch, memory_seq, 2 * num_kv_heads * head_dim});
  acts->out = arena->take(dtype, {batch, seq, num_heads * head_dim});
  acts->lse = arena->take(DType::kF32, {batch, num_heads, seq});
}

void CrossAttention::plan_scratch(Arena* arena, DType dtype, int64_t batch, int64_t seq,
                                  int64_t memory_seq, Scratch* scratch) const {
  scratch->dq = arena->take(dtype, {batch, seq, num_heads * head_dim});
  scratch->dkv = arena->take(dtype, {batch, memory_seq, 2 * num_kv_heads * head_dim});
  scratch->dout = arena->take(dtype, {batch, seq, num_heads * head_dim});
}

void CrossAttention::forward(Backend& be, Tensor out, Tensor inp, const Acts& acts,
                             const LayerContext& ctx) const {
  q.forward(be, acts.q, inp);
  kv.forward(be, acts.kv, ctx.memory);
  be.attention_forward(acts.out, acts.lse, acts.q, acts.kv, spec(ctx));
  proj.forward(be, out, acts.out);
}

void CrossAttention::backward(Backend& be, Tensor dinp, Tensor dout, Tensor inp, const Acts& acts,
                              const Scratch& scratch, const LayerContext& ctx) const {
  be.zero(scratch.dout);
  proj.backward(be, scratch.dout, dout, acts.out);
  be.zero(scratch.dq);
  be.zero(scratch.dkv);
  be.attention_backward(scratch.dq, scratch.dkv, Tensor(), scratch.dout, acts.out, acts.lse, acts.q,
                        acts.kv, spec(ctx));
  q.backward(be, dinp, scratch.dq, inp);
  kv.backward(be, ctx.dmemory, scratch.dkv, ctx.memory);
}

// ---- RelativeBias ----

void RelativeBias::declare(ParamLayout* layout, const std::string& prefix, int64_t num_buckets,
                           const BlockOptions& o, const TensorGroup& tp) {
  name = prefix + ".weight";
  num_heads = static_cast<int>(o.num_heads / tp.size);
  // T5x initialises the table as an embedding of fan_avg variance scaling.
  ParamSpec spec = make_param(name, {num_buckets, o.num_heads}, false, ParamInit::kNormal,
                              std::sqrt(2.0 / static_cast<double>(num_buckets + o.num_heads)));
  if (tp.size > 1) split_blocks(&spec, 1, {o.num_heads}, tp);
  layout->add(std::move(spec));
}

void RelativeBias::bind(const ParamStore& store) { table = store.views(name); }

void RelativeBias::plan(Arena* arena, DType dtype, int64_t seq_len) {
  seq = seq_len;
  buckets = arena->take(DType::kI32, {1, seq, seq});
  bias = arena->take(dtype, {1, num_heads, seq, seq});
  dbias = arena->take(DType::kF32, {1, num_heads, seq, seq});
}

void RelativeBias::upload(Backend& be, bool bidirectional, int num_buckets,
                          int max_distance) const {
  // Positions 0..T-1 serve packed rows too: within a segment the distance between two tokens is
  // the same whether positions restart at the segment or not, and across segments nothing attends.
  const std::vector<int32_t> positions = segment_positions({}, seq);
  std::vector<int32_t> host(static_cast<size_t>(seq * seq));
  relative_position_buckets(positions, positions, bidirectional, num_buckets, max_distance,
                            host.data());
  be.copy_from_host(buckets, host.data());
}

void RelativeBias::forward(Backend& be) const { be.position_bias_forward(bias, table.w, buckets); }

void RelativeBias::backward(Backend& be) const {
  be.position_bias_backward(table.dw, dbias, buckets);
}

// ---- Dropout ----

DropoutSpec Dropout::spec(uint32_t site, int64_t feature_offset) const {
  return {.seed = mix64(seed ^ mix64(site)),
          .threshold = dropout_threshold(rate),
          .scale = static_cast<float>(1.0 / (1.0 - rate)),
          .feature_offset = feature_offset};
}

void DropSite::forward(Backend& be, Tensor t) const {
  if (on()) be.dropout_forward(t, t, keys, dropout->spec(site, feature_offset));
}

void DropSite::backward(Backend& be, Tensor dinp, Tensor dout) const {
  AX_CHECK(on());
  be.dropout_backward(dinp, dout, keys, dropout->spec(site, feature_offset));
}

Tensor DropSite::gradient(Backend& be, Tensor dout, Tensor scratch) const {
  if (!on()) return dout;
  be.zero(scratch);
  backward(be, scratch, dout);
  return scratch;
}

// ---- Mlp ----

void Mlp::declare(ParamLayout* layout, const std::string& prefix, const BlockOptions& o,
                  const TensorGroup& group) {
  tp = group;
  glu = o.glu;
  const int64_t F = o.hidden;
  hidden = F / tp.size;
  std::vector<int64_t> blocks = glu ? std::vector<int64_t>{F, F} : std::vector<int64_t>{F};
  fc.declare(layout, prefix + ".fc", glu ? 2 * F : F, o.dim, o.bias, o.init_std, tp,
             {LinearSplit::kColumn, blocks});
  proj.declare(layout, prefix + ".proj", o.dim, F, o.bias, o.mlp_proj_std, tp,
               {LinearSplit::kRow, {}});
}

void Mlp::bind(const ParamStore& store) {
  fc.bind(store);
  proj.bind(store);
}

void Mlp::plan(Arena* arena, DType dtype, int64_t rows, Acts* acts) const {
  acts->fch = arena->take(dtype, {rows, glu ? 2 * hidden : hidden});
  acts->act = arena->take(dtype, {rows, hidden});
}

void Mlp::plan_scratch(Arena* arena, DType dtype, int64_t rows, Scratch* scratch,
                       bool dropout) const {
  scratch->dfch = arena->take(dtype, {rows, glu ? 2 * hidden : hidden});
  scratch->dact = arena->take(dtype, {rows, hidden});
  if (dropout) scratch->ddrop = arena->take(dtype, {rows, hidden});
}

void Mlp::forward(Backend& be, Tensor out, Tensor inp, const Acts& acts,
                  const DropSite& drop) const {
  fc.forward(be, acts.fch, inp);
  if (glu) {
    be.glu_forward(acts.act, acts.fch, *glu);
  } else {
    be.gelu_forward(acts.act, acts.fch);
  }
  drop.forward(be, acts.act);
  proj.forward(be, out, acts.act);
}

void Mlp::backward(Backend& be, Tensor dinp, Tensor dout, Tensor inp, const Acts& acts,
                   const Scratch& scratch, const DropSite& drop) const {
  be.zero(scratch.dact);
  proj.backward(be, scratch.dact, dout, acts.act);
  const Tensor dact = drop.gradient(be, scratch.dact, scratch.ddrop);
  be.zero(scratch.dfch);
  if (glu) {
    be.glu_backward(scratch.dfch, dact, acts.fch, *glu);
  } else {
    be.gelu_backward(scratch.dfch, dact, acts.fch);
  }
  fc.backward(be, dinp, scratch.dfch, inp);
}

// ---- DecoderLayer ----

void DecoderLayer::declare(ParamLayout* layout, const std::string& prefix, const BlockOptions& o,
                           const TensorGroup& group, bool cross_attention) {
  tp = group;
  has_cross = cross_attention;
  ln1.declare(layout, prefix + ".ln1", o.dim, o.rms_norm, o.bias, o.norm_eps);
  attn.declare(layout, prefix + ".attn", o, tp);
  if (has_cross) {
    ln_cross.declare(layout, prefix + ".ln_cross", o.dim, o.rms_norm, o.bias, o.norm_eps);
    cross.declare(layout, prefix + ".cross", o, tp);
  }
  ln2.declare(layout, prefix + ".ln2", o.dim, o.rms_norm, o.bias, o.norm_eps);
  mlp.declare(layout, prefix + ".mlp", o, tp);
}

void DecoderLayer::bind(const ParamStore& store) {
  ln1.bind(store);
  attn.bind(store);
  if (has_cross) {
    ln_cross.bind(store);
    cross.bind(store);
  }
  ln2.bind(store);
  mlp.bind(store);
}

void DecoderLayer::plan(Arena* arena, DType dtype, int64_t batch, int64_t seq, int64_t dim,
                        Acts* acts, int64_t memory_seq) const {
  const int64_t rows = batch * seq;
  ln1.plan(arena, dtype, rows, dim, &acts->ln1);
  attn.plan(arena, dtype, batch, seq, &acts->attn);
  acts->res_mid = arena->take(dtype, {rows, dim});
  if (has_cross) {
    ln_cross.plan(arena, dtype, rows, dim, &acts->ln_cross);
    cross.plan(arena, dtype, batch, seq, memory_seq, &acts->cross);
    acts->res_cross = arena->take(dtype, {rows, dim});
  }
  ln2.plan(arena, dtype, rows, dim, &acts->ln2);
  mlp.plan(arena, dtype, rows, &acts->mlp);
  acts->res_out = arena->take(dtype, {rows, dim});
}

void DecoderLayer::plan_scratch(Arena* arena, DType dtype, int64_t batch, int64_t seq, int64_t dim,
                                Scratch* scratch, int64_t memory_seq) const {
  scratch->branch = arena->take(dtype, {batch * seq, dim});
  scratch->dln = arena->take(dtype, {batch * seq, dim});
  attn.plan_scratch(arena, dtype, batch, seq, &scratch->attn);
  if (has_cross) cross.plan_scratch(arena, dtype, batch, seq, memory_seq, &scratch->cross);
  mlp.plan_scratch(arena, dtype, batch * seq, &scratch->mlp, dropout && drop_hidden);
}

namespace {

// Dropout site `kind` of a layer: the rows keyed as the context says; MLP hidden units are split
// over the tensor group, so a rank's first column is its offset in the whole axis.
DropSite drop_site(const DecoderLayer& l, const LayerContext& ctx, uint32_t kind) {
  if (kind == DecoderLayer::kDropHidden && !l.drop_hidden) return {};
  DropSite d{ctx.dropout, ctx.dropout_keys, l.dropout_site + kind};
  if (kind == DecoderLayer::kDropHidden) d.feature_offset = l.tp.rank * l.mlp.hidden;
  return d;
}

}  // namespace

void DecoderLayer::forward(Backend& be, Tensor res_in, const Acts& acts, const Scratch& scratch,
                           const LayerContext& ctx) const {
  // Tensor parallelism: each branch ends in a row-parallel projection whose partial outputs are
  // summed over the group before the residual add (Megatron's g).
  // Dropout (T5x's order): a branch's summed output is dropped before its residual add.
  ln1.forward(be, acts.ln1, res_in);
  attn.forward(be, scratch.branch, acts.ln1.out, acts.attn, scratch.attn, ctx);
  tp.all_reduce(scratch.branch);
  drop_site(*this, ctx, kDropAttn).forward(be, scratch.branch);
  be.add_forward(acts.res_mid, res_in, scratch.branch);
  if (has_cross) {
    ln_cross.forward(be, acts.ln_cross, acts.res_mid);
    cross.forward(be, scratch.branch, acts.ln_cross.out, acts.cross, ctx);
    tp.all_reduce(scratch.branch);
    drop_site(*this, ctx, kDropCross).forward(be, scratch.branch);
    be.add_forward(acts.res_cross, acts.res_mid, scratch.branch);
  }
  const Tensor before_mlp = residual_before_mlp(acts);
  ln2.forward(be, acts.ln2, before_mlp);
  mlp.forward(be, scratch.branch, acts.ln2.out, acts.mlp, drop_site(*this, ctx, kDropHidden));
  tp.all_reduce(scratch.branch);
  drop_site(*this, ctx, kDropMlp).forward(be, scratch.branch);
  be.add_forward(acts.res_out, before_mlp, scratch.branch);
}

void DecoderLayer::backward(Backend& be, Tensor dres, Tensor res_in, const Acts& acts,
                            const Scratch& scratch, const LayerContext& ctx) const {
  // The skip connections pass dres through unchanged; each branch adds its part through its
  // norm's backward, which accumulates into dres.
  // Tensor parallelism: a branch starts with a column-parallel projection, whose input gradient
  // is partial on each rank and summed over the group (Megatron's f).
  // With dropout, a branch's output gradient is dres through the branch's mask (in `branch`,
  // free in the backward pass).
  const auto branch_grad = [&](uint32_t kind) {
    return drop_site(*this, ctx, kind).gradient(be, dres, scratch.branch);
  };
  be.zero(scratch.dln);
  mlp.backward(be, scratch.dln, branch_grad(kDropMlp), acts.ln2.out, acts.mlp, scratch.mlp,
               drop_site(*this, ctx, kDropHidden));
  tp.all_reduce(scratch.dln);
  ln2.backward(be, dres, scratch.dln, residual_before_mlp(acts), acts.ln2);
  if (has_cross) {
    be.zero(scratch.dln);
    cross.backward(be, scratch.dln, branch_grad(kDropCross), acts.ln_cross.out, acts.cross,
                   scratch.cross, ctx);
    tp.all_reduce(scratch.dln);
    ln_cross.backward(be, dres, scratch.dln, acts.res_mid, acts.ln_cross);
  }
  be.zero(scratch.dln);
  attn.backward(be, scratch.dln, branch_grad(kDropAttn), acts.ln1.out, acts.attn, scratch.attn,
                ctx);
  tp.all_reduce(scratch.dln);
  ln1.backward(be, dres, scratch.dln, res_in, acts.ln1);
}

}  // namespace ax::train::layers
