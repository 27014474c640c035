// The decoder-only language model (gpt and llama families): embeddings, a stack of
// DecoderLayers, a final norm and the LM head (tied to wte or its own lm_head), with the
// parameter layout (unit 0: embeddings, final norm, head; unit 1 + i: layer i) and the
// activation plan. A pipeline stage holds a contiguous range of the layers (the first stage the
// embeddings, the last the final norm and the head), or one range per model chunk with the
// interleaved schedule, and one activation slot per (micro-batch, chunk) pass in flight
// (docs/sharding.md "Pipeline parallelism"). With a seq axis each rank holds a contiguous
// slice of every row's positions and attention gathers the rest (docs/sharding.md "Sequence
// parallelism"). Dropout (model.dropout) draws each element's mask from its row's place in the
// data and its position in the whole row, so stages and slices drop what one process drops.
#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

#include "ax/common/rng.h"
#include "ax/trainer/comm/communicator.h"
#include "ax/trainer/models/flops.h"
#include "ax/trainer/models/model.h"
#include "layers.h"
#include "lm_loss.h"

namespace ax::train {

namespace {

class DecoderLm final : public Model {
 public:
  DecoderLm(const ModelConfig& config, int64_t vocab, int64_t batch, int64_t seq_len,
            Backend* backend)
      : Model(config, vocab, batch, seq_len, backend) {}
  std::vector<float> logits(int64_t b, int64_t t) const override;
  // The whole row's, also when this rank holds a slice of it.
  double flops_per_row() const override {
    const int64_t row = T * seq_size();
    return static_cast<double>(row) * flops_per_token(whole_matmul_parameters, config.num_layers,
                                                      config.num_heads, config.head_dim(), row,
                                                      /*causal=*/true);
  }
  double forward_impl(const Batch& batch) override { return stage_forward_impl(batch, 0, 0); }
  void backward_impl(float dloss) override { stage_backward_impl(0, dloss); }
  double stage_forward_impl(const Batch& batch, int slot, int chunk) override;
  void stage_backward_impl(int slot, float dloss) override;
  void plan_slot(Arena* arena, int slot) override {
    if (static_cast<size_t>(slot) >= acts.size()) acts.resize(static_cast<size_t>(slot) + 1);
    plan_acts(arena, &acts[static_cast<size_t>(slot)]);
  }
  Tensor stage_input(int slot) const override { return acts[static_cast<size_t>(slot)].encoded; }
  Tensor stage_output(int slot) const override {
    const MicroActs& a = acts[static_cast<size_t>(slot)];
    return residual_into(a, static_cast<size_t>(chunk_layers(a.chunk)));
  }
  Tensor stage_gradient() const override { return dres; }
  int stage_chunks() const override { return chunks; }
  Tensor stage_gradient_in(int slot) const override {
    return chunks == 1 ? dres : acts[static_cast<size_t>(slot)].dout;
  }

  // The store over the declared layout, the views, and the activations planned and allocated.
  Status build() {
    return Model::build(
        declare(), par, [this] { bind(); }, [this](Arena* arena) { plan(arena); });
  }

  const ModelConfig& config = config_;
  Backend* be = nullptr;
  void set_planned_dtype(DType d) { planned_dtype_ = d; }  // Model::plan's compute dtype
  int64_t B = 0, T = 0, C = 0;
  ModelParallel par;
  ModelOptions options;
  layers::TensorGroup tp;
  layers::VocabShard vocab;  // this rank's rows of the padded table
  layers::LmLoss loss;       // configured; each slot plans its own copy
  // This stage's layers of config.num_layers, by their global indices, chunk after chunk: chunk
  // v's are blocks [chunk_begin[v], chunk_begin[v + 1]). The whole model's matmul parameters
  // (for flops_per_row, which counts the whole model on every stage).
  std::vector<int> layer_ids;
  std::vector<int> chunk_begin;
  int chunks = 1;
  bool first = true, last = true;  // holds the model's first chunk (and embeds), its last
  // Sequence parallelism: the T positions are [first_position, first_position + T) of each row.
  int64_t first_position = 0;
  int seq_size() const { return std::max(1, par.seq_size); }
  comm::Communicator* seq_group() const { return seq_size() > 1 ? par.seq : nullptr; }
  // Rows [first_position, first_position + T) of the learned position table (or its gradient).
  Tensor position_rows(const Tensor& table) const {
    if (table.empty()) return table;
    return Tensor(static_cast<char*>(table.data) +
                      static_cast<size_t>(first_position * C) * dtype_size(table.dtype),
                  table.dtype, {T, C});
  }
  int64_t whole_matmul_parameters = 0;

  // Blocks.
  ParamViews wte, wpe, lm_head;  // wpe empty with RoPE; lm_head = wte when tied
  std::vector<layers::DecoderLayer> blocks;
  layers::Norm lnf;

  int chunk_layers(int v) const {
    return chunk_begin[static_cast<size_t>(v) + 1] - chunk_begin[static_cast<size_t>(v)];
  }

  // Activations of one micro-batch's pass through one chunk (a slot; slot 0 is planned with the
  // model), sized for the stage's largest chunk.
  struct MicroActs {
    Tensor tokens;   // (B, T) i32 (with a split vocabulary: this shard's ids, -1 elsewhere)
    Tensor encoded;  // (N, C) embedding output (a later stage: its input) = residual into layer 0
    std::vector<layers::DecoderLayer::Acts> blocks;
    layers::Norm::Acts lnf;  // last stage only, as are the logits and the loss
    Tensor logits;           // (N, Vl); holds dlogits after backward
    layers::LmLoss loss;
    Tensor segments;  // (B, T) i32, the batch's segment ids (when it has them)
    bool use_segments = false;
    layers::Dropout dropout;  // active in a training pass with model.dropout > 0
    Tensor drop_keys;         // (B·T) i32 (dropout only): each position's key
    int chunk = 0;            // of the last forward pass in this slot
    Tensor dout;              // (N, C) with chunks: d(output) received for the backward pass
  };
  std::vector<MicroActs> acts;
  // What the layers of a pass in slot `a` read besides their residual stream.
  layers::LayerContext layer_context(const Tensor& segments, const MicroActs& a) const {
    return {.segments = segments,
            .dropout = &a.dropout,
            .dropout_keys = a.drop_keys,
            .seq = seq_group(),
            .first_position = first_position};
  }
  // Shared by every slot.
  Tensor row_f32;  // (Vl) f32, one row of logits for the host
  Tensor dres;     // (N, C) gradient of the residual stream
  layers::DecoderLayer::Scratch scratch;

  // The parameters of layers `ids` and of the ends this stage holds, unit by unit: 0 =
  // embeddings, final norm and head; 1 + i = the stage's i-th layer. Names are the whole model's
  // (h.<global index>), so checkpoints do not depend on the pipeline layout.
  ParamLayout declare(const std::vector<int>& ids, bool with_embedding, bool with_head,
                      std::vector<layers::DecoderLayer>* stack, layers::Norm* norm) {
    ParamLayout layout;
    const bool learned = config.position == PositionKind::kLearned;
    // A tied table on two stages: both hold it, its gradient is summed between them.
    const bool shared = config.tied_embeddings && with_embedding != with_head;
    layout.set_unit(0);
    if (with_embedding || (with_head && config.tied_embeddings)) {
      // The LM head counts once as a matmul; a lookup does not.
      ParamSpec table = vocab.table("wte", C, config.init_std, config.tied_embeddings, tp);
      if (shared) table.pipeline_stages = {0, par.pipeline_size - 1};
      layout.add(std::move(table));
    }
    if (learned && with_embedding) {
      ParamSpec pos;
      pos.name = "wpe";
      pos.shape = {config.max_seq_len, C};
      pos.weight_decay = true;
      pos.init_std = config.init_std;
      layout.add(pos);
    }
    stack->resize(ids.size());
    const layers::BlockOptions block = layers::BlockOptions::of(config);
    for (size_t i = 0; i < stack->size(); ++i) {
      layout.set_unit(static_cast<int>(i) + 1);
      layers::DecoderLayer& l = (*stack)[i];
      l.declare(&layout, "h." + std::to_string(ids[i]), block, tp);
      // Dropout sites by the layer's global index (its unit on one process), as T5 numbers
      // them: every stage draws the masks one process draws.
      l.dropout = config.dropout > 0;
      l.drop_hidden = false;  // Megatron's and GPT-2's sites: the branches' outputs
      l.dropout_site = static_cast<uint32_t>(ids[i] + 1) * layers::DecoderLayer::kDropSites;
    }
    layout.set_unit(0);
    if (with_head) {
      norm->declare(&layout, "lnf", C, block.rms_norm, config.bias, config.norm_eps);
      if (!config.tied_embeddings) {
        layout.add(vocab.table("lm_head.weight", C, config.init_std, /*matmul=*/true, tp));
      }
    }
    return layout;
  }
  ParamLayout declare() {
    // The whole model's matmul parameters: the ends and num_layers uniform layers (declaring
    // one layer, not all of them: a pipeline stage of a 96-layer model is planned in a fraction
    // of the time, which `ax-train plan` does for every stage kind and micro-batch size).
    std::vector<layers::DecoderLayer> all;
    layers::Norm norm;
    const int64_t ends = logical_matmul_parameters(declare({}, true, true, &all, &norm));
    const int64_t ends_and_one = logical_matmul_parameters(declare({0}, true, true, &all, &norm));
    whole_matmul_parameters = ends + config.num_layers * (ends_and_one - ends);
    return declare(layer_ids, first, last, &blocks, &lnf);
  }

  void bind() {
    const ParamStore& ps = *store_;
    wte = ps.views(first ? "wte" : "");
    wpe = ps.views(first && config.position == PositionKind::kLearned ? "wpe" : "");
    lm_head = ps.views(!last ? "" : (config.tied_embeddings ? "wte" : "lm_head.weight"));
    for (layers::DecoderLayer& block : blocks) block.bind(ps);
    if (last) lnf.bind(ps);
  }

  // Called twice: a dry run that counts bytes, then on the allocation.
  void plan(Arena* arena) {
    const DType dt = dtype();
    acts.resize(1);
    plan_acts(arena, &acts[0]);
    row_f32 = arena->take(DType::kF32, {vocab.Vl});
    dres = arena->take(dt, {B * T, C});
    if (!blocks.empty()) blocks[0].plan_scratch(arena, dt, B, T, C, &scratch);
  }

  // One micro-batch's activations.
  void plan_acts(Arena* arena, MicroActs* a) {
    const DType dt = dtype();
    const int64_t N = B * T;
    a->tokens = arena->take(DType::kI32, {B, T});
    a->segments = arena->take(DType::kI32, {B, T});
    a->encoded = arena->take(dt, {N, C});
    if (chunks > 1) a->dout = arena->take(dt, {N, C});
    a->dropout.rate = config.dropout;
    if (config.dropout > 0) a->drop_keys = arena->take(DType::kI32, {N});
    int largest = 0;
    for (int v = 0; v < chunks; ++v) largest = std::max(largest, chunk_layers(v));
    a->blocks.resize(static_cast<size_t>(largest));  // layers are uniform: any layer's plan fits
    for (size_t i = 0; i < a->blocks.size(); ++i) {
      if (options.recompute_layers && i > 0) {
        // Recomputation: every layer shares layer 0's activations except its output, which is
        // the next layer's input and stays.
        a->blocks[i] = a->blocks[0];
        a->blocks[i].res_out = arena->take(dt, {B * T, C});
      } else {
        blocks[i].plan(arena, dt, B, T, C, &a->blocks[i]);
      }
    }
    if (!last) return;
    lnf.plan(arena, dt, N, C, &a->lnf);
    a->logits = arena->take(dt, {N, vocab.Vl});
    a->loss = loss;
    a->loss.plan(arena, N);
  }

  static Tensor residual_into(const MicroActs& a, size_t i) {
    return i == 0 ? a.encoded : a.blocks[i - 1].res_out;
  }

  // Dropout site 0: the embeddings' output (the residual stream into the first layer).
  static layers::DropSite embed_drop(const MicroActs& a) { return {&a.dropout, a.drop_keys, 0}; }

  // Each position's dropout key: the low 32 bits of mix64(mix64(row id) + 1 + t) at position t
  // of the whole row (T5's per-position key, docs/t5.md "Dropout"), so a seq slice keys its
  // positions as one process does.
  void upload_dropout_keys(const MicroActs& a, std::span<const uint64_t> row_ids) const {
    std::vector<int32_t> keys(static_cast<size_t>(B * T));
    for (int64_t b = 0; b < B; ++b) {
      const uint64_t row = mix64(row_ids[static_cast<size_t>(b)]);
      for (int64_t t = 0; t < T; ++t) {
        const uint64_t position = static_cast<uint64_t>(first_position + t);
        keys[static_cast<size_t>(b * T + t)] =
            static_cast<int32_t>(static_cast<uint32_t>(mix64(row + 1 + position)));
      }
    }
    be->copy_from_host(a.drop_keys, keys.data());
  }
};

}  // namespace

StatusOr<std::unique_ptr<Model>> make_decoder_lm(const ModelConfig& config, int64_t vocab,
                                                 int64_t batch, int64_t seq_len, Backend* backend,
                                                 const ModelParallel& parallel,
                                                 const ModelOptions& options) {
  // With a seq axis, seq_len is this rank's slice of rows seq_size times as long.
  const int64_t row_len = seq_len * std::max(1, parallel.seq_size);
  if (config.position == PositionKind::kLearned && row_len > config.max_seq_len) {
    return InvalidArgument("train.seq_len=", row_len,
                           " is longer than model.max_seq_len=", config.max_seq_len,
                           " (the learned position table)");
  }
  const int tp = std::max(1, parallel.tensor_size);
  const int stages = std::max(1, parallel.pipeline_size);
  const int chunks = stages > 1 ? std::max(1, options.pipeline_chunks) : 1;
  if (stages * chunks > config.num_layers) {
    return InvalidArgument("a pipeline of ", stages, " stages of ", chunks,
                           " chunk(s) needs at least as many layers as chunks; ",
                           "model.num_layers=", config.num_layers,
                           ": use fewer stages or chunks, or more layers");
  }
  auto m = std::make_unique<DecoderLm>(config, vocab, batch, seq_len, backend);
  // Layers are uniform: chunk c of the model's P·V holds layers [c·L/(P·V), (c+1)·L/(P·V)),
  // counts differing by one at most, and stage s holds chunks s, s + P, ... (one chunk: the
  // stage's range [s·L/P, (s+1)·L/P)).
  const int64_t L = config.num_layers, s = parallel.pipeline_rank, n = stages * chunks;
  m->chunks = chunks;
  for (int v = 0; v < chunks; ++v) {
    const int64_t c = v * stages + s;
    m->chunk_begin.push_back(static_cast<int>(m->layer_ids.size()));
    for (int64_t l = c * L / n; l < (c + 1) * L / n; ++l)
      m->layer_ids.push_back(static_cast<int>(l));
  }
  m->chunk_begin.push_back(static_cast<int>(m->layer_ids.size()));
  m->first = s == 0;
  m->last = s == stages - 1;
  m->be = backend;
  m->set_planned_dtype(options.planned_dtype);
  m->B = batch;
  m->T = seq_len;
  m->C = config.model_dim;
  m->par = parallel;
  m->first_position = parallel.seq_rank * seq_len;
  m->options = options;
  m->tp = {parallel.tensor_rank, tp, parallel.tensor};
  m->vocab = layers::VocabShard::of(vocab, config.vocab_size, m->tp);
  m->loss.vocab = m->vocab;
  m->loss.tp = m->tp;
  m->loss.z_loss = options.z_loss;
  AX_RETURN_IF_ERROR(m->build());
  return std::unique_ptr<Model>(std::move(m));
}

double DecoderLm::stage_forward_impl(const Batch& batch, int slot, int chunk) {
  AX_CHECK(chunk >= 0 && chunk < chunks);
  MicroActs& a = acts[static_cast<size_t>(slot)];
  a.chunk = chunk;
  const int begin = chunk_begin[static_cast<size_t>(chunk)], n = chunk_layers(chunk);
  ParamStore& ps = *store_;
  ps.gather(0);
  a.use_segments = !batch.segment_ids.empty();
  if (a.use_segments) be->copy_from_host(a.segments, batch.segment_ids.data());
  const Tensor seg = a.use_segments ? a.segments : Tensor();
  a.dropout.active = a.dropout.rate > 0 && !batch.row_ids.empty();
  if (a.dropout.active) {
    a.dropout.seed = batch.dropout_seed;
    upload_dropout_keys(a, batch.row_ids);
  }
  if (first && chunk == 0) {
    vocab.upload_ids(*be, a.tokens, batch.tokens);
    // With a split vocabulary each rank looks up its rows (zeros elsewhere) and the sum over the
    // group is the embedding; rank 0 alone adds the positions.
    be->embedding_forward(a.encoded.view({B, T, C}), a.tokens, wte.w,
                          tp.rank == 0 ? position_rows(wpe.w) : Tensor());
    tp.all_reduce(a.encoded);
    embed_drop(a).forward(*be, a.encoded);
  }  // a later chunk's input was received into a.encoded
  for (int j = 0; j < n; ++j) {
    const int unit = begin + j + 1;
    const size_t i = static_cast<size_t>(j);
    ps.gather(unit);
    ps.prefetch(unit + 1);
    blocks[static_cast<size_t>(begin + j)].forward(*be, residual_into(a, i), a.blocks[i], scratch,
                                                   layer_context(seg, a));
  }
  if (!last || chunk != chunks - 1) return 0;
  lnf.forward(*be, a.lnf, residual_into(a, static_cast<size_t>(n)));
  be->matmul_forward(a.logits, a.lnf.out, lm_head.w, Tensor());
  if (batch.targets.empty()) return 0;
  return a.loss.forward(*be, a.logits, batch.targets);
}

void DecoderLm::stage_backward_impl(int slot, float dloss) {
  MicroActs& a = acts[static_cast<size_t>(slot)];
  const int begin = chunk_begin[static_cast<size_t>(a.chunk)], n = chunk_layers(a.chunk);
  const Tensor seg = a.use_segments ? a.segments : Tensor();
  if (last && a.chunk == chunks - 1) {
    a.loss.backward(*be, a.logits, dloss);  // dlogits overwrite the logits in place
    Tensor dlnf = scratch.dln;
    be->zero(dlnf);
    be->matmul_backward(dlnf, lm_head.dw, Tensor(), a.logits, a.lnf.out, lm_head.w);
    tp.all_reduce(dlnf);  // each vocabulary shard contributes to the hidden state's gradient
    be->zero(dres);
    lnf.backward(*be, dres, dlnf, residual_into(a, static_cast<size_t>(n)), a.lnf);
  } else if (chunks > 1) {
    // The received d(output) becomes the running gradient, and the slot keeps the other
    // buffer for its next receive: no copy, and no buffer is both sent and received at once.
    std::swap(dres, a.dout);
  }  // one chunk: an earlier stage's d(output) was received into dres
  ParamStore& ps = *store_;
  for (int j = n; j-- > 0;) {
    const int unit = begin + j + 1;
    const size_t i = static_cast<size_t>(j);
    layers::DecoderLayer& block = blocks[static_cast<size_t>(begin + j)];
    ps.gather(unit);
    ps.prefetch(unit - 1);
    // The shared activations hold the chunk's last layer's after the forward pass; any other
    // layer runs its forward pass again from its kept input (the same ops on the same values:
    // bit-equal).
    if (options.recompute_layers && j + 1 < n) {
      block.forward(*be, residual_into(a, i), a.blocks[i], scratch, layer_context(seg, a));
    }
    block.backward(*be, dres, residual_into(a, i), a.blocks[i], scratch, layer_context(seg, a));
    ps.release(unit);
  }
  if (first && a.chunk == 0) {
    // With dropout, the gradient through the embeddings' mask lands in `branch` (free here).
    be->embedding_backward(wte.dw, position_rows(wpe.dw),
                           embed_drop(a).gradient(*be, dres, scratch.branch).view({B, T, C}),
                           a.tokens);
  }
  ps.release(0);
}

std::vector<float> DecoderLm::logits(int64_t b, int64_t t) const {
  AX_CHECK(logits_valid_) << "logits() needs a forward() and no backward() since";
  AX_CHECK(b >= 0 && b < B && t >= 0 && t < T);
  AX_CHECK(last) << "logits() on a pipeline stage other than the last";
  return layers::logits_row(*be, acts[0].logits, row_f32, vocab, b * T + t);
}

}  // namespace ax::train
