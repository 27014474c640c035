// The encoder-decoder (the t5 family, T5 v1.1 as T5x builds it; docs/t5.md "The model"): a token
// table shared by both stacks, an encoder of self-attention layers with a bidirectional relative
// position bias, a decoder of causal self-attention, cross-attention and MLP layers with a causal
// one, RMSNorm before every branch and at the end of each stack, gated-GELU MLPs, an untied LM
// head. Parameter units: 0 = the token table, the two bias tables, the final norms and the head
// (those this stage holds); 1 + i = the stage's i-th layer (one process: encoder layer i, then
// decoder layer j as unit 1 + E + j).
//
// Pipeline stages (docs/sharding.md "Pipeline parallelism", "T5 on a pipeline"): the E encoder
// and D decoder layers are one sequence of E + D layers cut into P·V contiguous chunks balanced by
// their FLOPs (an encoder layer at the encoder's length costs more than a decoder layer at the
// decoder's), chunk c on stage c mod P. What passes between chunks is one buffer of
// (B·Te + B·Td, C): the encoder's residual stream (inside the encoder) or its output, the memory
// (after it), in the first B·Te rows; the decoder's residual stream in the rest. Backwards the
// same rows carry the gradients, the memory's summed over the decoder layers passed so far (each
// tensor rank's partial sum, added over the group once, where the encoder ends), as Megatron
// carries the encoder output along its T5 pipeline. The token table lives with the chunks that
// embed (the encoder's first layer, the decoder's first), each bias table with every chunk of its
// stack, and their gradients are summed over the stages that hold them (ParamStore).
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

// What a stage shares of one stack between its passes: the bias table's values (computed from
// the table at each pass) and its gradient (summed over a pass's layers), the final norm, the
// stack's dropout sites.
struct StackParts {
  layers::RelativeBias bias;
  layers::Norm final_norm;
  uint32_t embed_site = 0, final_site = 0;
};

// One stack's inputs of a pass: its token ids, segments and dropout keys.
struct StackInputs {
  Tensor tokens;    // (B, T) i32, this vocabulary shard's rows (when the pass embeds)
  Tensor segments;  // (B, T) i32
  // Dropout: the rows' keys at every position, and one key per position (the encoder's final
  // norm drops per position, as T5x does).
  Tensor drop_keys, drop_position_keys;
};

// The activations of one pass of one chunk.
struct ChunkActs {
  std::vector<DecoderLayer::Acts> layers;  // the chunk's layers, in order
  StackInputs enc, dec;
  Tensor enc_embedded, dec_embedded;  // the residual streams into each stack's layer 0
  layers::Norm::Acts enc_final, dec_final;
  Tensor logits;  // (B·Td, Vl); holds dlogits after backward (the model's last chunk)
  layers::LmLoss loss;
  // Whether this pass drops, and its step's seed: the backward pass reads what its own forward
  // pass set, whatever other passes (an evaluation's) ran in between.
  layers::Dropout dropout;
};

// One micro-batch slot: the buffers passed between stages and the activations of the chunk it
// holds (each chunk's planned over the same bytes: a slot holds one pass at a time).
struct SlotActs {
  Tensor in, out;  // (B·Te + B·Td, C): the input received, the output sent
  Tensor dout;     // the same: d(output) received for the backward pass (with chunks)
  std::vector<ChunkActs> chunks;
  int chunk = 0;  // of the last forward pass
  bool use_segments = false;
};

// A chunk's place in the model: its layers [first, last] of E + D.
struct ChunkSpan {
  int first = 0, last = 0;
  int begin = 0, end = 0;  // the stage's local layers [begin, end)
};

class EncoderDecoder final : public Model {
 public:
  EncoderDecoder(const ModelConfig& config, int64_t vocab, int64_t batch, int64_t seq_len,
                 Backend* backend)
      : Model(config, vocab, batch, seq_len, backend) {}

  std::vector<float> logits(int64_t b, int64_t t) const override;
  // 6 FLOPs per matmul parameter per token of its stack (the head on the decoder's tokens), and
  // the attention products: the encoder's whole Te x Te, the decoder's causal half of Td x Td
  // (as flops_per_token counts it) and its cross-attention's whole Td x Te. The whole model's,
  // on every stage.
  double flops_per_row() const override {
    return static_cast<double>(E) * enc_layer_flops() + static_cast<double>(D) * dec_layer_flops() +
           6.0 * static_cast<double>(head_params) * static_cast<double>(Td);
  }
  double enc_layer_flops() const {
    const double hd = static_cast<double>(config.num_heads * config.head_dim());
    const double te = static_cast<double>(Te);
    return 6.0 * static_cast<double>(enc_layer_params) * te + 12.0 * hd * te * te;
  }
  double dec_layer_flops() const {
    const double hd = static_cast<double>(config.num_heads * config.head_dim());
    const double te = static_cast<double>(Te), td = static_cast<double>(Td);
    return 6.0 * static_cast<double>(dec_layer_params) * td + 6.0 * hd * td * td +
           12.0 * hd * td * te;
  }
  double forward_impl(const Batch& batch) override { return stage_forward_impl(batch, 0, 0); }
  void backward_impl(float dloss) override { stage_backward_impl(0, dloss); }
  double stage_forward_impl(const Batch& batch, int slot, int chunk) override;
  void stage_backward_impl(int slot, float dloss) override;
  void plan_slot(Arena* arena, int slot) override {
    if (static_cast<size_t>(slot) >= slots.size()) slots.resize(static_cast<size_t>(slot) + 1);
    plan_slot_acts(arena, &slots[static_cast<size_t>(slot)]);
  }
  Tensor stage_input(int slot) const override { return slots[static_cast<size_t>(slot)].in; }
  Tensor stage_output(int slot) const override { return slots[static_cast<size_t>(slot)].out; }
  Tensor stage_gradient() const override { return grad; }
  int stage_chunks() const override { return chunks; }
  Tensor stage_gradient_in(int slot) const override {
    return chunks == 1 ? grad : slots[static_cast<size_t>(slot)].dout;
  }

  Status build() {
    AX_RETURN_IF_ERROR(Model::build(
        declare(), par, [this] { bind(); }, [this](Arena* arena) { plan(arena); }));
    if (planned_only()) return Status::Ok();
    if (has_enc) {
      enc.bias.upload(*be, /*bidirectional=*/true, config.relative_buckets,
                      config.relative_max_distance);
    }
    if (has_dec) {
      dec.bias.upload(*be, /*bidirectional=*/false, config.relative_buckets,
                      config.relative_max_distance);
    }
    return Status::Ok();
  }

  const ModelConfig& config = config_;
  Backend* be = nullptr;
  void set_planned_dtype(DType d) { planned_dtype_ = d; }  // Model::plan's compute dtype
  int64_t B = 0, Te = 0, Td = 0, C = 0;
  int E = 0, D = 0;  // encoder and decoder layers of the whole model
  ModelParallel par;
  layers::TensorGroup tp;
  layers::VocabShard vocab;
  layers::LmLoss loss;  // configured; each pass plans its own copy
  // The whole model's matmul parameters per encoder layer, per decoder layer, and outside the
  // layers (the head), for flops_per_row and the stage split.
  int64_t enc_layer_params = 0, dec_layer_params = 0, head_params = 0;

  // This stage: its layers by their index in E + D (encoder first), chunk after chunk, and
  // which ends it holds.
  std::vector<int> layer_ids;
  std::vector<ChunkSpan> spans;
  int chunks = 1;
  bool has_enc = false, has_dec = false;  // a layer of the stack
  bool embeds = false;                    // the encoder's or the decoder's first layer
  bool ends_encoder = false, last = false;
  // The stages (pipeline ranks) that hold the token table and each bias table.
  std::vector<int> table_stages, enc_stages, dec_stages;

  ParamViews wte, lm_head;
  StackParts enc, dec;
  std::vector<DecoderLayer> blocks;  // the stage's layers
  std::vector<SlotActs> slots;
  // Shared by every slot.
  Tensor row_f32;  // (Vl) f32
  Tensor grad;     // (B·Te + B·Td, C): the gradients of the two streams (sent backwards)
  Tensor denc;     // (B·Te, C) the memory's gradient where the encoder ends
  DecoderLayer::Scratch enc_scratch, dec_scratch;
  double dropout_rate = 0;  // model.dropout

  bool is_enc(int layer) const { return layer < E; }
  // Rows of the passed buffer: the encoder's stream first, then the decoder's.
  Tensor enc_rows(const Tensor& t) const { return Tensor(t.data, t.dtype, {B * Te, C}); }
  Tensor dec_rows(const Tensor& t) const {
    return Tensor(
        static_cast<char*>(t.data) + static_cast<size_t>(B * Te * C) * dtype_size(t.dtype), t.dtype,
        {B * Td, C});
  }

  ParamLayout declare() {
    ParamLayout layout;
    declare_into(&layout, layer_ids, /*all_ends=*/false, &blocks);
    if (embeds && table_stages.size() > 1) layout.share("wte", table_stages);
    if (has_enc && enc_stages.size() > 1) layout.share(enc.bias.name, enc_stages);
    if (has_dec && dec_stages.size() > 1) layout.share(dec.bias.name, dec_stages);
    return layout;
  }

  // The parameters of layers `ids` (of E + D) and of the ends a stage with them holds (all of
  // them with all_ends), in one process's order.
  void declare_into(ParamLayout* layout, const std::vector<int>& ids, bool all_ends,
                    std::vector<DecoderLayer>* stack) {
    layers::BlockOptions o = layers::BlockOptions::of(config);
    // T5x's initialisation (variance scaling, fan_in), with the query's scaled as its logits are
    // divided by sqrt(d_kv) (docs/t5.md "Attention scale"): q, k, v and wi read the residual
    // stream, N(0, 1/d_model); o reads the heads, 1/(NH·d_kv); wo reads the MLP, 1/d_ff.
    o.init_std = 1.0 / std::sqrt(static_cast<double>(C));
    o.proj_std = 1.0 / std::sqrt(static_cast<double>(config.num_heads * config.head_dim()));
    o.mlp_proj_std = 1.0 / std::sqrt(static_cast<double>(config.hidden_dim));
    const bool with_enc = std::any_of(ids.begin(), ids.end(), [&](int l) { return is_enc(l); });
    const bool with_dec = std::any_of(ids.begin(), ids.end(), [&](int l) { return !is_enc(l); });
    auto has = [&](int l) { return all_ends || std::find(ids.begin(), ids.end(), l) != ids.end(); };
    layout->set_unit(0);
    if (has(0) || has(E)) layout->add(vocab.table("wte", C, 1.0, /*matmul=*/false, tp));
    if (all_ends || with_enc)
      enc.bias.declare(layout, "enc.rel_bias", config.relative_buckets, o, tp);
    if (all_ends || with_dec)
      dec.bias.declare(layout, "dec.rel_bias", config.relative_buckets, o, tp);
    if (has(E - 1)) enc.final_norm.declare(layout, "enc.lnf", C, true, false, config.norm_eps);
    if (has(E + D - 1)) {
      dec.final_norm.declare(layout, "dec.lnf", C, true, false, config.norm_eps);
      layout->add(vocab.table("lm_head.weight", C, o.init_std, /*matmul=*/true, tp));
    }
    // Dropout sites: unit u's layer (of one process) has sites u·kDropSites + kind; unit 0
    // holds the stacks'.
    enc.embed_site = 0;
    enc.final_site = 1;
    dec.embed_site = 2;
    dec.final_site = 3;
    static_assert(DecoderLayer::kDropSites >= 4);
    stack->resize(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      const int l = ids[i];
      layout->set_unit(static_cast<int>(i) + 1);
      DecoderLayer& layer = (*stack)[i];
      if (is_enc(l)) {
        layer.declare(layout, "enc.h." + std::to_string(l), o, tp);
        layer.attn.causal = false;
      } else {
        layer.declare(layout, "dec.h." + std::to_string(l - E), o, tp, /*cross_attention=*/true);
      }
      layer.dropout = dropout_rate > 0;
      layer.dropout_site = static_cast<uint32_t>(l + 1) * DecoderLayer::kDropSites;
    }
    layout->set_unit(0);
  }

  void bind() {
    const ParamStore& ps = *store_;
    wte = ps.views(embeds ? "wte" : "");
    lm_head = ps.views(last ? "lm_head.weight" : "");
    for (DecoderLayer& l : blocks) l.bind(ps);
    if (has_enc) enc.bias.bind(ps);
    if (has_dec) dec.bias.bind(ps);
    if (ends_encoder) enc.final_norm.bind(ps);
    if (last) dec.final_norm.bind(ps);
  }

  void plan_inputs(Arena* arena, StackInputs* s, int64_t T) {
    s->tokens = arena->take(DType::kI32, {B, T});
    s->segments = arena->take(DType::kI32, {B, T});
    if (dropout_rate > 0) {
      s->drop_keys = arena->take(DType::kI32, {B * T});
      s->drop_position_keys = arena->take(DType::kI32, {B * T});
    }
  }

  // A slot: the passed buffers, then each chunk's activations over the same bytes.
  void plan_slot_acts(Arena* arena, SlotActs* s) {
    const DType dt = dtype();
    const int64_t rows = B * Te + B * Td;
    if (par.pipeline_size > 1) {  // one process passes nothing
      s->in = arena->take(dt, {rows, C});
      s->out = arena->take(dt, {rows, C});
    }
    if (chunks > 1) s->dout = arena->take(dt, {rows, C});
    s->chunks.resize(static_cast<size_t>(chunks));
    const size_t start = arena->used();
    size_t end = start;
    for (int v = 0; v < chunks; ++v) {
      arena->rewind(start);
      plan_chunk(arena, spans[static_cast<size_t>(v)], &s->chunks[static_cast<size_t>(v)]);
      end = std::max(end, arena->used());
    }
    arena->advance_to(end);
  }

  void plan_chunk(Arena* arena, const ChunkSpan& k, ChunkActs* a) {
    const DType dt = dtype();
    const bool with_dec = !is_enc(k.last);
    // Every pass reads the encoder's inputs: its segments are the memory's for cross-attention.
    plan_inputs(arena, &a->enc, Te);
    if (with_dec) plan_inputs(arena, &a->dec, Td);
    if (k.first == 0) a->enc_embedded = arena->take(dt, {B * Te, C});
    if (k.first <= E && E <= k.last) a->dec_embedded = arena->take(dt, {B * Td, C});
    a->layers.resize(static_cast<size_t>(k.end - k.begin));
    for (int i = k.begin; i < k.end; ++i) {
      const bool enc_layer = is_enc(layer_ids[static_cast<size_t>(i)]);
      blocks[static_cast<size_t>(i)].plan(arena, dt, B, enc_layer ? Te : Td, C,
                                          &a->layers[static_cast<size_t>(i - k.begin)],
                                          enc_layer ? 0 : Te);
    }
    if (k.first <= E - 1 && E - 1 <= k.last) {
      enc.final_norm.plan(arena, dt, B * Te, C, &a->enc_final);
    }
    if (k.last == E + D - 1) {
      dec.final_norm.plan(arena, dt, B * Td, C, &a->dec_final);
      a->logits = arena->take(dt, {B * Td, vocab.Vl});
      a->loss = loss;
      a->loss.plan(arena, B * Td);
    }
  }

  // Called twice by build(): a dry run that counts bytes, then on the allocation.
  void plan(Arena* arena) {
    const DType dt = dtype();
    slots.resize(1);
    plan_slot_acts(arena, &slots[0]);
    row_f32 = arena->take(DType::kF32, {vocab.Vl});
    grad = arena->take(dt, {B * Te + B * Td, C});
    if (ends_encoder) denc = arena->take(dt, {B * Te, C});
    if (has_enc) enc.bias.plan(arena, dt, Te);
    if (has_dec) dec.bias.plan(arena, dt, Td);
    // Layer ids ascend: the stage's first layer is an encoder layer when it has any, its last a
    // decoder layer.
    if (has_enc) blocks.front().plan_scratch(arena, dt, B, Te, C, &enc_scratch);
    if (has_dec) blocks.back().plan_scratch(arena, dt, B, Td, C, &dec_scratch, Te);
  }

  // The dropout keys of a stack's rows: a row's from its place in the data, the same at every
  // position (T5x drops with broadcast_dims=(-2,): one mask per sequence), and one per position.
  void upload_dropout_keys(const StackInputs& s, int64_t T, std::span<const uint64_t> row_ids) {
    std::vector<int32_t> rows(static_cast<size_t>(B * T)), positions(rows.size());
    for (int64_t b = 0; b < B; ++b) {
      const uint64_t row = mix64(row_ids[static_cast<size_t>(b)]);
      for (int64_t t = 0; t < T; ++t) {
        const auto i = static_cast<size_t>(b * T + t);
        rows[i] = static_cast<int32_t>(static_cast<uint32_t>(row));
        positions[i] = static_cast<int32_t>(static_cast<uint32_t>(mix64(row + 1 + t)));
      }
    }
    be->copy_from_host(s.drop_keys, rows.data());
    be->copy_from_host(s.drop_position_keys, positions.data());
  }

  layers::DropSite embed_drop(const StackParts& s, const ChunkActs& a) const {
    return {&a.dropout, (&s == &enc ? a.enc : a.dec).drop_keys, s.embed_site};
  }
  layers::DropSite final_drop(const StackParts& s, const ChunkActs& a) const {
    return {&a.dropout, &s == &enc ? a.enc.drop_position_keys : a.dec.drop_keys, s.final_site};
  }

  // What a layer of the encoder (memory empty) or of the decoder reads besides its stream.
  LayerContext context(const ChunkActs& a, bool encoder, bool use_segments, Tensor memory,
                       Tensor dmemory) const {
    LayerContext ctx;
    const StackParts& s = encoder ? enc : dec;
    const StackInputs& in = encoder ? a.enc : a.dec;
    if (use_segments) ctx.segments = in.segments;
    ctx.bias = s.bias.bias;
    ctx.dbias = s.bias.dbias;
    ctx.dropout = &a.dropout;
    ctx.dropout_keys = in.drop_keys;
    if (!encoder) {
      ctx.memory = memory;
      ctx.dmemory = dmemory;
      if (use_segments) ctx.memory_segments = a.enc.segments;
    }
    return ctx;
  }

  // Embeds `ids` into `out` (stack s's tokens of pass `a`) and drops.
  void embed(const StackParts& s, const ChunkActs& a, std::span<const int32_t> ids, int64_t T,
             Tensor out) {
    const StackInputs& in = &s == &enc ? a.enc : a.dec;
    vocab.upload_ids(*be, in.tokens, ids);
    be->embedding_forward(out.view({B, T, C}), in.tokens, wte.w, Tensor());
    tp.all_reduce(out);
    embed_drop(s, a).forward(*be, out);
  }
};

// The chunk boundaries of L = E + D layers in n chunks: chunk c ends where the layers' cumulative
// cost comes nearest c/n of the whole, each chunk at least one layer.
std::vector<int> balanced_cuts(const std::vector<double>& cost, int n) {
  const int L = static_cast<int>(cost.size());
  std::vector<double> prefix(static_cast<size_t>(L) + 1, 0.0);
  for (int l = 0; l < L; ++l) prefix[l + 1] = prefix[l] + cost[static_cast<size_t>(l)];
  std::vector<int> cuts = {0};
  for (int c = 1; c < n; ++c) {
    const double target = prefix[static_cast<size_t>(L)] * c / n;
    int best = cuts.back() + 1;
    for (int i = best; i <= L - (n - c); ++i) {
      if (std::abs(prefix[static_cast<size_t>(i)] - target) <
          std::abs(prefix[static_cast<size_t>(best)] - target)) {
        best = i;
      }
    }
    cuts.push_back(best);
  }
  cuts.push_back(L);
  return cuts;
}

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
  const int stages = std::max(1, parallel.pipeline_size);
  const int chunks = stages > 1 ? std::max(1, options.pipeline_chunks) : 1;
  const int E = static_cast<int>(config.num_layers);
  const int D = static_cast<int>(config.decoder_layers());
  if (stages * chunks > E + D) {
    return InvalidArgument("a pipeline of ", stages, " stages of ", chunks,
                           " chunk(s) needs at least as many layers as chunks; model.num_layers=",
                           E, " and model.num_decoder_layers=", D,
                           " (encoder and decoder layers together): use fewer stages or chunks");
  }
  const int tp = std::max(1, parallel.tensor_size);
  auto m = std::make_unique<EncoderDecoder>(config, vocab, batch, seq_len, backend);
  m->be = backend;
  m->set_planned_dtype(options.planned_dtype);
  m->B = batch;
  m->Te = options.encoder_seq_len;
  m->Td = seq_len;
  m->C = config.model_dim;
  m->E = E;
  m->D = D;
  m->par = parallel;
  m->tp = {parallel.tensor_rank, tp, parallel.tensor};
  m->vocab = layers::VocabShard::of(vocab, config.vocab_size, m->tp);
  m->loss.vocab = m->vocab;
  m->loss.tp = m->tp;
  m->loss.z_loss = options.z_loss;
  m->dropout_rate = config.dropout;
  m->chunks = chunks;
  // The whole model's matmul parameters per layer of each stack and in the head, from one
  // layer of each (declaring all of them would make a plan of T5-XXL's 48 stages slow for
  // nothing: layers are uniform per stack), for the split and flops_per_row.
  {
    ParamLayout one;
    std::vector<DecoderLayer> probe;
    m->declare_into(&one, {0, E}, /*all_ends=*/true, &probe);
    m->enc_layer_params = logical_matmul_parameters(one, "enc.h.");
    m->dec_layer_params = logical_matmul_parameters(one, "dec.h.");
    m->head_params = logical_matmul_parameters(one, "lm_head");
  }
  std::vector<double> cost(static_cast<size_t>(E + D));
  for (int l = 0; l < E + D; ++l) {
    cost[static_cast<size_t>(l)] = l < E ? m->enc_layer_flops() : m->dec_layer_flops();
  }
  const int n = stages * chunks, s = parallel.pipeline_rank;
  const std::vector<int> cuts = balanced_cuts(cost, n);
  auto stage_of = [&](int layer) {
    const int c =
        static_cast<int>(std::upper_bound(cuts.begin(), cuts.end(), layer) - cuts.begin()) - 1;
    return c % stages;
  };
  for (int v = 0; v < chunks; ++v) {
    const int c = v * stages + s;
    ChunkSpan span;
    span.first = cuts[static_cast<size_t>(c)];
    span.last = cuts[static_cast<size_t>(c) + 1] - 1;
    span.begin = static_cast<int>(m->layer_ids.size());
    for (int l = span.first; l <= span.last; ++l) m->layer_ids.push_back(l);
    span.end = static_cast<int>(m->layer_ids.size());
    m->spans.push_back(span);
  }
  auto holds = [&](int layer) { return stage_of(layer) == s; };
  m->has_enc = m->layer_ids.front() < E;
  m->has_dec = m->layer_ids.back() >= E;
  m->embeds = holds(0) || holds(E);
  m->ends_encoder = holds(E - 1);
  m->last = holds(E + D - 1);
  auto stages_of = [&](int first, int end) {
    std::vector<int> out;
    for (int l = first; l < end; ++l) out.push_back(stage_of(l));
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  };
  m->table_stages = {stage_of(0), stage_of(E)};
  std::sort(m->table_stages.begin(), m->table_stages.end());
  m->table_stages.erase(std::unique(m->table_stages.begin(), m->table_stages.end()),
                        m->table_stages.end());
  m->enc_stages = stages_of(0, E);
  m->dec_stages = stages_of(E, E + D);
  AX_RETURN_IF_ERROR(m->build());
  return std::unique_ptr<Model>(std::move(m));
}

double EncoderDecoder::stage_forward_impl(const Batch& batch, int slot, int chunk) {
  AX_CHECK(chunk >= 0 && chunk < chunks);
  AX_CHECK_EQ(static_cast<int64_t>(batch.encoder_tokens.size()), B * Te)
      << "an encoder-decoder batch needs encoder_tokens of (batch, train.encoder_seq_len)";
  SlotActs& s = slots[static_cast<size_t>(slot)];
  s.chunk = chunk;
  ChunkActs& a = s.chunks[static_cast<size_t>(chunk)];
  const ChunkSpan& k = spans[static_cast<size_t>(chunk)];
  const bool with_enc = is_enc(k.first), with_dec = !is_enc(k.last);
  s.use_segments = !batch.segment_ids.empty();
  AX_CHECK_EQ(s.use_segments, !batch.encoder_segment_ids.empty())
      << "segment ids for both the encoder and the decoder, or neither";
  if (s.use_segments) {
    AX_CHECK_EQ(static_cast<int64_t>(batch.encoder_segment_ids.size()), B * Te);
    be->copy_from_host(a.enc.segments, batch.encoder_segment_ids.data());
    if (with_dec) be->copy_from_host(a.dec.segments, batch.segment_ids.data());
  }
  a.dropout.rate = dropout_rate;
  a.dropout.active = dropout_rate > 0 && !batch.row_ids.empty();
  if (a.dropout.active) {
    a.dropout.seed = batch.dropout_seed;
    upload_dropout_keys(a.enc, Te, batch.row_ids);
    if (with_dec) upload_dropout_keys(a.dec, Td, batch.row_ids);
  }
  ParamStore& ps = *store_;
  ps.gather(0);
  if (k.first == 0) embed(enc, a, batch.encoder_tokens, Te, a.enc_embedded);
  if (with_enc) enc.bias.forward(*be);
  if (with_dec) dec.bias.forward(*be);
  // The streams into the chunk's next layer of each stack (received, or embedded here), and
  // the memory (received, or the encoder's output made here).
  Tensor enc_x = k.first == 0 ? a.enc_embedded : enc_rows(s.in);
  Tensor dec_x = s.in.empty() ? Tensor() : dec_rows(s.in);
  Tensor memory = with_enc ? Tensor() : enc_rows(s.in);
  for (int i = k.begin; i < k.end; ++i) {
    const int l = layer_ids[static_cast<size_t>(i)];
    const bool encoder = is_enc(l);
    const DecoderLayer::Acts& acts = a.layers[static_cast<size_t>(i - k.begin)];
    if (l == E) {
      embed(dec, a, batch.tokens, Td, a.dec_embedded);
      dec_x = a.dec_embedded;
    }
    ps.gather(i + 1);
    ps.prefetch(i + 2);
    Tensor& x = encoder ? enc_x : dec_x;
    blocks[static_cast<size_t>(i)].forward(*be, x, acts, encoder ? enc_scratch : dec_scratch,
                                           context(a, encoder, s.use_segments, memory, Tensor()));
    x = acts.res_out;
    if (l == E - 1) {
      enc.final_norm.forward(*be, a.enc_final, enc_x);
      final_drop(enc, a).forward(*be, a.enc_final.out);
      memory = a.enc_final.out;
    }
  }
  if (k.last == E + D - 1) {
    dec.final_norm.forward(*be, a.dec_final, dec_x);
    final_drop(dec, a).forward(*be, a.dec_final.out);
    be->matmul_forward(a.logits, a.dec_final.out, lm_head.w, Tensor());
    if (batch.targets.empty()) return 0;
    return a.loss.forward(*be, a.logits, batch.targets);
  }
  // Not the model's last chunk: what the next one reads.
  be->copy(enc_rows(s.out), k.last >= E - 1 ? memory : enc_x);
  if (with_dec) be->copy(dec_rows(s.out), dec_x);
  return 0;
}

void EncoderDecoder::stage_backward_impl(int slot, float dloss) {
  SlotActs& s = slots[static_cast<size_t>(slot)];
  const ChunkActs& a = s.chunks[static_cast<size_t>(s.chunk)];
  const ChunkSpan& k = spans[static_cast<size_t>(s.chunk)];
  const bool model_last = k.last == E + D - 1;
  const bool ends_enc = k.first <= E - 1 && E - 1 <= k.last;
  if (!model_last && chunks > 1) {
    // The received d(output) becomes the running gradient; the slot keeps the other buffer for
    // its next receive (as the decoder LM does).
    std::swap(grad, s.dout);
  }  // one chunk: a later stage's d(output) was received into grad
  const Tensor g_enc = enc_rows(grad), g_dec = dec_rows(grad);
  // The chunk's layers: encoder ones [k.begin, split), decoder ones [split, k.end).
  int split = k.begin;
  while (split < k.end && is_enc(layer_ids[static_cast<size_t>(split)])) ++split;
  // The residual stream into the chunk's local layer i (its stack's embedding, the stream
  // received, or the layer before).
  auto input_of = [&](int i) {
    const int l = layer_ids[static_cast<size_t>(i)];
    if (l == 0) return a.enc_embedded;
    if (l == E) return a.dec_embedded;
    if (i == k.begin) return is_enc(l) ? enc_rows(s.in) : dec_rows(s.in);
    return a.layers[static_cast<size_t>(i - 1 - k.begin)].res_out;
  };
  ParamStore& ps = *store_;
  auto layer_backward = [&](int i, Tensor dres, const LayerContext& ctx) {
    const bool encoder = is_enc(layer_ids[static_cast<size_t>(i)]);
    ps.gather(i + 1);
    ps.prefetch(i);
    blocks[static_cast<size_t>(i)].backward(*be, dres, input_of(i),
                                            a.layers[static_cast<size_t>(i - k.begin)],
                                            encoder ? enc_scratch : dec_scratch, ctx);
    ps.release(i + 1);
  };
  // The memory's gradient, summed over the decoder layers from the last one down: in g_enc
  // while it is passed on, in denc where the encoder ends (its final norm reads it into g_enc).
  const Tensor dmemory = ends_enc ? denc : g_enc;
  if (ends_enc && !model_last) be->copy(denc, g_enc);  // the later decoder layers' part
  if (split < k.end) {
    if (model_last) {
      a.loss.backward(*be, a.logits, dloss);  // dlogits overwrite the logits
      Tensor dnorm = dec_scratch.dln;
      be->zero(dnorm);
      be->matmul_backward(dnorm, lm_head.dw, Tensor(), a.logits, a.dec_final.out, lm_head.w);
      tp.all_reduce(dnorm);  // each vocabulary shard contributes to the hidden state's gradient
      be->zero(g_dec);
      // With dropout, the gradient through a mask lands in `branch` (free outside the layers).
      dec.final_norm.backward(*be, g_dec,
                              final_drop(dec, a).gradient(*be, dnorm, dec_scratch.branch),
                              a.layers.back().res_out, a.dec_final);
      be->zero(dmemory);
    }
    be->zero(dec.bias.dbias);
    const Tensor memory = ends_enc ? a.enc_final.out : enc_rows(s.in);
    const LayerContext ctx = context(a, /*encoder=*/false, s.use_segments, memory, dmemory);
    for (int i = k.end; i-- > split;) layer_backward(i, g_dec, ctx);
    dec.bias.backward(*be);
    if (k.first <= E) {
      be->embedding_backward(
          wte.dw, Tensor(),
          embed_drop(dec, a).gradient(*be, g_dec, dec_scratch.branch).view({B, Td, C}),
          a.dec.tokens);
    }
  }
  if (split == k.begin) {
    ps.release(0);
    return;
  }
  if (ends_enc) {
    // The cross-attention key/value projections are column-parallel: each rank's part of the
    // memory's gradient is partial until summed (once, for all decoder layers).
    tp.all_reduce(denc);
    be->zero(g_enc);
    enc.final_norm.backward(*be, g_enc, final_drop(enc, a).gradient(*be, denc, enc_scratch.branch),
                            a.layers[static_cast<size_t>(split - 1 - k.begin)].res_out,
                            a.enc_final);
  }  // else: a later stage's d(encoder stream) was received into g_enc
  be->zero(enc.bias.dbias);
  const LayerContext ctx = context(a, /*encoder=*/true, s.use_segments, Tensor(), Tensor());
  for (int i = split; i-- > k.begin;) layer_backward(i, g_enc, ctx);
  enc.bias.backward(*be);
  if (k.first == 0) {
    be->embedding_backward(
        wte.dw, Tensor(),
        embed_drop(enc, a).gradient(*be, g_enc, enc_scratch.branch).view({B, Te, C}), a.enc.tokens);
  }
  ps.release(0);
}

std::vector<float> EncoderDecoder::logits(int64_t b, int64_t t) const {
  AX_CHECK(logits_valid_) << "logits() needs a forward() and no backward() since";
  AX_CHECK(b >= 0 && b < B && t >= 0 && t < Td);
  AX_CHECK(last) << "logits() on a pipeline stage other than the last";
  return layers::logits_row(*be, slots[0].chunks[static_cast<size_t>(chunks - 1)].logits, row_f32,
                            vocab, b * Td + t);
}

}  // namespace ax::train
