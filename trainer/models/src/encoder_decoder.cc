// The encoder-decoder (the t5 family, T5 v1.1 as T5x builds it; docs/t5.md "The model"): a token
// table shared by both stacks, an encoder of self-attention layers with a bidirectional relative
// position bias, a decoder of causal self-attention, cross-attention and MLP layers with a causal
// one, RMSNorm before every branch and at the end of each stack, gated-GELU MLPs, an untied LM
// head. Parameter units: 0 = the token table, the two bias tables, the final norms and the head;
// 1 + i = encoder layer i; 1 + E + j = decoder layer j.
#include <algorithm>
#include <cmath>

#include "ax/common/rng.h"
#include "ax/trainer/models/model.h"
#include "layers.h"
#include "lm_loss.h"

namespace ax::train {

namespace {

using layers::DecoderLayer;
using layers::LayerContext;

// One stack's layers, their activations and its relative position bias.
struct Stack {
  std::vector<DecoderLayer> layers;
  std::vector<DecoderLayer::Acts> acts;
  layers::RelativeBias bias;
  layers::Norm final_norm;
  layers::Norm::Acts final_acts;
  Tensor tokens;    // (B, T) i32, this vocabulary shard's rows
  Tensor segments;  // (B, T) i32
  Tensor embedded;  // (N, C) the residual stream into layer 0
  Tensor dres;      // (N, C) its gradient
  int first_unit = 1;
  // Dropout: the rows' keys at every position, the keys of each position (the encoder's final
  // norm drops per position, as T5x does), this stack's sites for the embedding and final norm.
  Tensor drop_keys, drop_position_keys;
  uint32_t embed_site = 0, final_site = 0;

  Tensor residual_into(size_t i) const { return i == 0 ? embedded : acts[i - 1].res_out; }
  Tensor output() const { return residual_into(layers.size()); }
};

class EncoderDecoder final : public Model {
 public:
  EncoderDecoder(const ModelConfig& config, int64_t vocab, int64_t batch, int64_t seq_len,
                 Backend* backend)
      : Model(config, vocab, batch, seq_len, backend) {}

  std::vector<float> logits(int64_t b, int64_t t) const override;
  // 6 FLOPs per matmul parameter per token of its stack (the head on the decoder's tokens), and
  // the attention products: the encoder's whole Te x Te, the decoder's causal half of Td x Td
  // (as flops_per_token counts it) and its cross-attention's whole Td x Te.
  double flops_per_row() const override {
    const double e = static_cast<double>(enc.layers.size());
    const double d = static_cast<double>(dec.layers.size());
    const double hd = static_cast<double>(config.num_heads * config.head_dim());
    const double te = static_cast<double>(Te), td = static_cast<double>(Td);
    const double enc_params = static_cast<double>(logical_matmul_parameters(layout(), "enc."));
    const double dec_params = static_cast<double>(logical_matmul_parameters(layout()) -
                                                  logical_matmul_parameters(layout(), "enc."));
    return 6.0 * (enc_params * te + dec_params * td) + 12.0 * e * hd * te * te +
           6.0 * d * hd * td * td + 12.0 * d * hd * td * te;
  }
  double forward_impl(const Batch& batch) override;
  void backward_impl(float dloss) override;

  Status build() {
    AX_RETURN_IF_ERROR(Model::build(
        declare(), par, [this] { bind(); }, [this](Arena* arena) { plan(arena); }));
    if (planned_only()) return Status::Ok();
    enc.bias.upload(*be, /*bidirectional=*/true, config.relative_buckets,
                    config.relative_max_distance);
    dec.bias.upload(*be, /*bidirectional=*/false, config.relative_buckets,
                    config.relative_max_distance);
    return Status::Ok();
  }

  const ModelConfig& config = config_;
  Backend* be = nullptr;
  void set_planned_dtype(DType d) { planned_dtype_ = d; }  // Model::plan's compute dtype
  int64_t B = 0, Te = 0, Td = 0, C = 0;
  ModelParallel par;
  layers::TensorGroup tp;
  layers::VocabShard vocab;
  layers::LmLoss loss;

  ParamViews wte, lm_head;
  Stack enc, dec;
  Tensor logits_;  // (B·Td, Vl); holds dlogits after backward
  Tensor row_f32;  // (Vl) f32
  Tensor denc;     // (B·Te, C) gradient of the encoder's output (the memory)
  DecoderLayer::Scratch enc_scratch, dec_scratch;
  bool use_segments = false;
  layers::Dropout dropout;

  ParamLayout declare() {
    ParamLayout layout;
    layers::BlockOptions o = layers::BlockOptions::of(config);
    // T5x's initialisation (variance scaling, fan_in), with the query's scaled as its logits are
    // divided by sqrt(d_kv) (docs/t5.md "Attention scale"): q, k, v and wi read the residual
    // stream, N(0, 1/d_model); o reads the heads, 1/(NH·d_kv); wo reads the MLP, 1/d_ff.
    o.init_std = 1.0 / std::sqrt(static_cast<double>(C));
    o.proj_std = 1.0 / std::sqrt(static_cast<double>(config.num_heads * config.head_dim()));
    o.mlp_proj_std = 1.0 / std::sqrt(static_cast<double>(config.hidden_dim));
    layout.set_unit(0);
    layout.add(vocab.table("wte", C, 1.0, /*matmul=*/false, tp));
    enc.bias.declare(&layout, "enc.rel_bias", config.relative_buckets, o, tp);
    dec.bias.declare(&layout, "dec.rel_bias", config.relative_buckets, o, tp);
    enc.final_norm.declare(&layout, "enc.lnf", C, true, false, config.norm_eps);
    dec.final_norm.declare(&layout, "dec.lnf", C, true, false, config.norm_eps);
    layout.add(vocab.table("lm_head.weight", C, o.init_std, /*matmul=*/true, tp));
    const int num_enc = config.num_layers;
    const int num_dec = config.num_decoder_layers > 0 ? config.num_decoder_layers : num_enc;
    enc.layers.resize(static_cast<size_t>(num_enc));
    dec.layers.resize(static_cast<size_t>(num_dec));
    enc.first_unit = 1;
    dec.first_unit = 1 + num_enc;
    // Dropout sites: unit u's layer has sites u·kDropSites + kind; unit 0 holds the stacks'.
    enc.embed_site = 0;
    enc.final_site = 1;
    dec.embed_site = 2;
    dec.final_site = 3;
    static_assert(DecoderLayer::kDropSites >= 4);
    const auto set_dropout = [&](DecoderLayer& l, int unit) {
      l.dropout = dropout.rate > 0;
      l.dropout_site = static_cast<uint32_t>(unit) * DecoderLayer::kDropSites;
    };
    for (int i = 0; i < num_enc; ++i) {
      layout.set_unit(enc.first_unit + i);
      DecoderLayer& l = enc.layers[static_cast<size_t>(i)];
      l.declare(&layout, "enc.h." + std::to_string(i), o, tp);
      l.attn.causal = false;
      set_dropout(l, enc.first_unit + i);
    }
    for (int i = 0; i < num_dec; ++i) {
      layout.set_unit(dec.first_unit + i);
      DecoderLayer& l = dec.layers[static_cast<size_t>(i)];
      l.declare(&layout, "dec.h." + std::to_string(i), o, tp, /*cross_attention=*/true);
      set_dropout(l, dec.first_unit + i);
    }
    return layout;
  }

  void bind() {
    const ParamStore& ps = *store_;
    wte = ps.views("wte");
    lm_head = ps.views("lm_head.weight");
    for (Stack* s : {&enc, &dec}) {
      for (DecoderLayer& l : s->layers) l.bind(ps);
      s->bias.bind(ps);
      s->final_norm.bind(ps);
    }
  }

  void plan_stack(Arena* arena, Stack* s, int64_t T, int64_t memory_seq) {
    const DType dt = dtype();
    s->tokens = arena->take(DType::kI32, {B, T});
    s->segments = arena->take(DType::kI32, {B, T});
    s->embedded = arena->take(dt, {B * T, C});
    s->dres = arena->take(dt, {B * T, C});
    s->acts.resize(s->layers.size());
    for (size_t i = 0; i < s->layers.size(); ++i) {
      s->layers[i].plan(arena, dt, B, T, C, &s->acts[i], memory_seq);
    }
    s->bias.plan(arena, dt, T);
    s->final_norm.plan(arena, dt, B * T, C, &s->final_acts);
    if (dropout.rate > 0) {
      s->drop_keys = arena->take(DType::kI32, {B * T});
      s->drop_position_keys = arena->take(DType::kI32, {B * T});
    }
  }

  // The dropout keys of a stack's rows: a row's from its place in the data, the same at every
  // position (T5x drops with broadcast_dims=(-2,): one mask per sequence), and one per position.
  void upload_dropout_keys(Stack* s, std::span<const uint64_t> row_ids) {
    const int64_t T = s->tokens.shape[1];
    std::vector<int32_t> rows(static_cast<size_t>(B * T)), positions(rows.size());
    for (int64_t b = 0; b < B; ++b) {
      const uint64_t row = mix64(row_ids[static_cast<size_t>(b)]);
      for (int64_t t = 0; t < T; ++t) {
        const auto i = static_cast<size_t>(b * T + t);
        rows[i] = static_cast<int32_t>(static_cast<uint32_t>(row));
        positions[i] = static_cast<int32_t>(static_cast<uint32_t>(mix64(row + 1 + t)));
      }
    }
    be->copy_from_host(s->drop_keys, rows.data());
    be->copy_from_host(s->drop_position_keys, positions.data());
  }

  layers::DropSite embed_drop(const Stack& s) const {
    return {&dropout, s.drop_keys, s.embed_site};
  }
  layers::DropSite final_drop(const Stack& s) const {
    return {&dropout, &s == &enc ? s.drop_position_keys : s.drop_keys, s.final_site};
  }

  void plan(Arena* arena) {
    const DType dt = dtype();
    plan_stack(arena, &enc, Te, 0);
    plan_stack(arena, &dec, Td, Te);
    logits_ = arena->take(dt, {B * Td, vocab.Vl});
    row_f32 = arena->take(DType::kF32, {vocab.Vl});
    denc = arena->take(dt, {B * Te, C});
    loss.plan(arena, B * Td);
    enc.layers[0].plan_scratch(arena, dt, B, Te, C, &enc_scratch);
    dec.layers[0].plan_scratch(arena, dt, B, Td, C, &dec_scratch, Te);
  }

  LayerContext context(const Stack& s, bool with_memory) const {
    LayerContext ctx;
    if (use_segments) ctx.segments = s.segments;
    ctx.bias = s.bias.bias;
    ctx.dbias = s.bias.dbias;
    ctx.dropout = &dropout;
    ctx.dropout_keys = s.drop_keys;
    if (with_memory) {
      ctx.memory = enc.final_acts.out;
      ctx.dmemory = denc;
      if (use_segments) ctx.memory_segments = enc.segments;
    }
    return ctx;
  }

  // Embeds `ids`, then runs the stack's layers and its final norm.
  void forward_stack(Stack* s, std::span<const int32_t> ids, const DecoderLayer::Scratch& scratch,
                     bool with_memory) {
    ParamStore& ps = *store_;
    vocab.upload_ids(*be, s->tokens, ids);
    const int64_t T = s->tokens.shape[1];
    be->embedding_forward(s->embedded.view({B, T, C}), s->tokens, wte.w, Tensor());
    tp.all_reduce(s->embedded);
    embed_drop(*s).forward(*be, s->embedded);
    s->bias.forward(*be);
    const LayerContext ctx = context(*s, with_memory);
    for (size_t i = 0; i < s->layers.size(); ++i) {
      const int unit = s->first_unit + static_cast<int>(i);
      ps.gather(unit);
      ps.prefetch(unit + 1);
      s->layers[i].forward(*be, s->residual_into(i), s->acts[i], scratch, ctx);
    }
    s->final_norm.forward(*be, s->final_acts, s->output());
    final_drop(*s).forward(*be, s->final_acts.out);
  }

  // On entry the stack's final-norm output gradient is in `dout`; accumulates into the
  // parameters' gradients (and, for the decoder, into denc).
  void backward_stack(Stack* s, Tensor dout, const DecoderLayer::Scratch& scratch,
                      bool with_memory) {
    ParamStore& ps = *store_;
    // With dropout, the gradient through a mask lands in `branch` (free outside the layers).
    be->zero(s->dres);
    s->final_norm.backward(*be, s->dres, final_drop(*s).gradient(*be, dout, scratch.branch),
                           s->output(), s->final_acts);
    be->zero(s->bias.dbias);
    const LayerContext ctx = context(*s, with_memory);
    for (size_t i = s->layers.size(); i-- > 0;) {
      const int unit = s->first_unit + static_cast<int>(i);
      ps.gather(unit);
      ps.prefetch(unit - 1);
      s->layers[i].backward(*be, s->dres, s->residual_into(i), s->acts[i], scratch, ctx);
      ps.release(unit);
    }
    s->bias.backward(*be);
    const int64_t T = s->tokens.shape[1];
    be->embedding_backward(wte.dw, Tensor(),
                           embed_drop(*s).gradient(*be, s->dres, scratch.branch).view({B, T, C}),
                           s->tokens);
  }
};

}  // namespace

StatusOr<std::unique_ptr<Model>> make_encoder_decoder(const ModelConfig& config, int64_t vocab,
                                                      int64_t batch, int64_t seq_len,
                                                      Backend* backend,
                                                      const ModelParallel& parallel,
                                                      const ModelOptions& options) {
  if (options.encoder_seq_len <= 0) {
    return InvalidArgument("model.family=t5 needs train.encoder_seq_len > 0 (ENC_SL)");
  }
  if (options.recompute_layers) {
    return InvalidArgument("train.recompute=layer is not implemented for model.family=t5");
  }
  if (parallel.seq_size > 1) {
    return Unimplemented("seq=", parallel.seq_size, ": sequence sharding is built for gpt and ",
                         "llama, not for model.family=t5 yet (issue 26): use a mesh of seq 1");
  }
  const int tp = std::max(1, parallel.tensor_size);
  auto m = std::make_unique<EncoderDecoder>(config, vocab, batch, seq_len, backend);
  m->be = backend;
  m->set_planned_dtype(options.planned_dtype);
  m->B = batch;
  m->Te = options.encoder_seq_len;
  m->Td = seq_len;
  m->C = config.model_dim;
  m->par = parallel;
  m->tp = {parallel.tensor_rank, tp, parallel.tensor};
  m->vocab = layers::VocabShard::of(vocab, config.vocab_size, m->tp);
  m->loss.vocab = m->vocab;
  m->loss.tp = m->tp;
  m->loss.z_loss = options.z_loss;
  m->dropout.rate = config.dropout;
  AX_RETURN_IF_ERROR(m->build());
  return std::unique_ptr<Model>(std::move(m));
}

double EncoderDecoder::forward_impl(const Batch& batch) {
  AX_CHECK_EQ(static_cast<int64_t>(batch.encoder_tokens.size()), B * Te)
      << "an encoder-decoder batch needs encoder_tokens of (batch, train.encoder_seq_len)";
  use_segments = !batch.segment_ids.empty();
  AX_CHECK_EQ(use_segments, !batch.encoder_segment_ids.empty())
      << "segment ids for both the encoder and the decoder, or neither";
  if (use_segments) {
    AX_CHECK_EQ(static_cast<int64_t>(batch.encoder_segment_ids.size()), B * Te);
    be->copy_from_host(enc.segments, batch.encoder_segment_ids.data());
    be->copy_from_host(dec.segments, batch.segment_ids.data());
  }
  dropout.active = dropout.rate > 0 && !batch.row_ids.empty();
  if (dropout.active) {
    dropout.seed = batch.dropout_seed;
    upload_dropout_keys(&enc, batch.row_ids);
    upload_dropout_keys(&dec, batch.row_ids);
  }
  store_->gather(0);
  forward_stack(&enc, batch.encoder_tokens, enc_scratch, /*with_memory=*/false);
  forward_stack(&dec, batch.tokens, dec_scratch, /*with_memory=*/true);
  be->matmul_forward(logits_, dec.final_acts.out, lm_head.w, Tensor());
  if (batch.targets.empty()) return 0;
  return loss.forward(*be, logits_, batch.targets);
}

void EncoderDecoder::backward_impl(float dloss) {
  loss.backward(*be, logits_, dloss);  // dlogits overwrite the logits
  Tensor dnorm = dec_scratch.dln;
  be->zero(dnorm);
  be->matmul_backward(dnorm, lm_head.dw, Tensor(), logits_, dec.final_acts.out, lm_head.w);
  tp.all_reduce(dnorm);  // each vocabulary shard contributes to the hidden state's gradient
  be->zero(denc);
  backward_stack(&dec, dnorm, dec_scratch, /*with_memory=*/true);
  // The cross-attention key/value projections are column-parallel: each rank's part of the
  // memory's gradient is partial until summed (once, for all decoder layers).
  tp.all_reduce(denc);
  backward_stack(&enc, denc, enc_scratch, /*with_memory=*/false);
  store_->release(0);
}

std::vector<float> EncoderDecoder::logits(int64_t b, int64_t t) const {
  AX_CHECK(logits_valid_) << "logits() needs a forward() and no backward() since";
  AX_CHECK(b >= 0 && b < B && t >= 0 && t < Td);
  return layers::logits_row(*be, logits_, row_f32, vocab, b * Td + t);
}

}  // namespace ax::train
