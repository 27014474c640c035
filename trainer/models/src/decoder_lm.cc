// The decoder-only language model (gpt and llama families): embeddings, a stack of
// DecoderLayers, a final norm and the LM head (tied to wte or its own lm_head), with the
// parameter layout (unit 0: embeddings, final norm, head; unit 1 + i: layer i) and the
// activation plan.
#include <algorithm>
#include <cmath>

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
  double flops_per_row() const override {
    return static_cast<double>(T) * flops_per_token(logical_matmul_parameters(layout()),
                                                    config.num_layers, config.num_heads,
                                                    config.head_dim(), T, /*causal=*/true);
  }
  double forward_impl(const Batch& batch) override;
  void backward_impl(float dloss) override;

  // The store over the declared layout, the views, and the activations planned and allocated.
  Status build() {
    return Model::build(
        declare(), par, [this] { bind(); }, [this](Arena* arena) { plan(arena); });
  }

  const ModelConfig& config = config_;
  Backend* be = nullptr;
  int64_t B = 0, T = 0, C = 0;
  ModelParallel par;
  ModelOptions options;
  layers::TensorGroup tp;
  layers::VocabShard vocab;  // this rank's rows of the padded table
  layers::LmLoss loss;

  // Blocks.
  ParamViews wte, wpe, lm_head;  // wpe empty with RoPE; lm_head = wte when tied
  std::vector<layers::DecoderLayer> blocks;
  layers::Norm lnf;

  // Activations of one micro-batch.
  Tensor tokens;   // (B, T) i32 (with a split vocabulary: this shard's ids, -1 elsewhere)
  Tensor encoded;  // (N, C) embedding output = residual stream into layer 0
  std::vector<layers::DecoderLayer::Acts> block_acts;
  layers::Norm::Acts lnf_acts;
  Tensor logits_;  // (N, Vl); holds dlogits after backward
  Tensor row_f32;  // (Vl) f32, one row of logits for the host
  Tensor dres;     // (N, C) gradient of the residual stream
  layers::DecoderLayer::Scratch scratch;

  Tensor segments;  // (B, T) i32, the batch's segment ids (when it has them)
  bool use_segments = false;

  // The network's parameters, unit by unit: 0 = embeddings, final norm and head; 1 + i = layer i.
  ParamLayout declare() {
    ParamLayout layout;
    const bool learned = config.position == PositionKind::kLearned;
    layout.set_unit(0);
    // The LM head counts once as a matmul; a lookup does not.
    layout.add(vocab.table("wte", C, config.init_std, config.tied_embeddings, tp));
    if (learned) {
      ParamSpec pos;
      pos.name = "wpe";
      pos.shape = {config.max_seq_len, C};
      pos.weight_decay = true;
      pos.init_std = config.init_std;
      layout.add(pos);
    }
    blocks.resize(static_cast<size_t>(config.num_layers));
    const layers::BlockOptions block = layers::BlockOptions::of(config);
    for (size_t i = 0; i < blocks.size(); ++i) {
      layout.set_unit(static_cast<int>(i) + 1);
      blocks[i].declare(&layout, "h." + std::to_string(i), block, tp);
    }
    layout.set_unit(0);
    lnf.declare(&layout, "lnf", C, block.rms_norm, config.bias, config.norm_eps);
    if (!config.tied_embeddings) {
      layout.add(vocab.table("lm_head.weight", C, config.init_std, /*matmul=*/true, tp));
    }
    return layout;
  }

  void bind() {
    const ParamStore& ps = *store_;
    wte = ps.views("wte");
    wpe = ps.views(config.position == PositionKind::kLearned ? "wpe" : "");
    lm_head = ps.views(config.tied_embeddings ? "wte" : "lm_head.weight");
    for (layers::DecoderLayer& block : blocks) block.bind(ps);
    lnf.bind(ps);
  }

  // Called twice: a dry run that counts bytes, then on the allocation.
  void plan(Arena* arena) {
    const DType dt = be->compute_dtype();
    const int64_t N = B * T;
    tokens = arena->take(DType::kI32, {B, T});
    segments = arena->take(DType::kI32, {B, T});
    encoded = arena->take(dt, {N, C});
    block_acts.resize(blocks.size());
    for (size_t i = 0; i < blocks.size(); ++i) {
      if (options.recompute_layers && i > 0) {
        // Recomputation: every layer shares layer 0's activations except its output, which is
        // the next layer's input and stays.
        block_acts[i] = block_acts[0];
        block_acts[i].res_out = arena->take(dt, {B * T, C});
      } else {
        blocks[i].plan(arena, dt, B, T, C, &block_acts[i]);
      }
    }
    lnf.plan(arena, dt, N, C, &lnf_acts);
    logits_ = arena->take(dt, {N, vocab.Vl});
    loss.plan(arena, N);
    row_f32 = arena->take(DType::kF32, {vocab.Vl});
    dres = arena->take(dt, {N, C});
    if (!blocks.empty()) blocks[0].plan_scratch(arena, dt, B, T, C, &scratch);
  }

  Tensor residual_into(size_t i) const { return i == 0 ? encoded : block_acts[i - 1].res_out; }
};

}  // namespace

StatusOr<std::unique_ptr<Model>> make_decoder_lm(const ModelConfig& config, int64_t vocab,
                                                 int64_t batch, int64_t seq_len, Backend* backend,
                                                 const ModelParallel& parallel,
                                                 const ModelOptions& options) {
  if (config.position == PositionKind::kLearned && seq_len > config.max_seq_len) {
    return InvalidArgument("train.seq_len=", seq_len,
                           " is longer than model.max_seq_len=", config.max_seq_len,
                           " (the learned position table)");
  }
  const int tp = std::max(1, parallel.tensor_size);
  auto m = std::make_unique<DecoderLm>(config, vocab, batch, seq_len, backend);
  m->be = backend;
  m->B = batch;
  m->T = seq_len;
  m->C = config.model_dim;
  m->par = parallel;
  m->options = options;
  m->tp = {parallel.tensor_rank, tp, parallel.tensor};
  m->vocab = layers::VocabShard::of(vocab, config.vocab_size, m->tp);
  m->loss.vocab = m->vocab;
  m->loss.tp = m->tp;
  m->loss.z_loss = options.z_loss;
  AX_RETURN_IF_ERROR(m->build());
  return std::unique_ptr<Model>(std::move(m));
}

double DecoderLm::forward_impl(const Batch& batch) {
  ParamStore& ps = *store_;
  ps.gather(0);
  vocab.upload_ids(*be, tokens, batch.tokens);
  use_segments = !batch.segment_ids.empty();
  if (use_segments) be->copy_from_host(segments, batch.segment_ids.data());
  const Tensor seg = use_segments ? segments : Tensor();
  // With a split vocabulary each rank looks up its rows (zeros elsewhere) and the sum over the
  // group is the embedding; rank 0 alone adds the positions.
  be->embedding_forward(encoded.view({B, T, C}), tokens, wte.w, tp.rank == 0 ? wpe.w : Tensor());
  tp.all_reduce(encoded);
  for (size_t i = 0; i < blocks.size(); ++i) {
    const int unit = static_cast<int>(i) + 1;
    ps.gather(unit);
    ps.prefetch(unit + 1);
    blocks[i].forward(*be, residual_into(i), block_acts[i], scratch, {.segments = seg});
  }
  lnf.forward(*be, lnf_acts, residual_into(blocks.size()));
  be->matmul_forward(logits_, lnf_acts.out, lm_head.w, Tensor());
  if (batch.targets.empty()) return 0;
  return loss.forward(*be, logits_, batch.targets);
}

void DecoderLm::backward_impl(float dloss) {
  const Tensor seg = use_segments ? segments : Tensor();
  loss.backward(*be, logits_, dloss);  // dlogits overwrite the logits in place
  Tensor dlnf = scratch.dln;
  be->zero(dlnf);
  be->matmul_backward(dlnf, lm_head.dw, Tensor(), logits_, lnf_acts.out, lm_head.w);
  tp.all_reduce(dlnf);  // each vocabulary shard contributes to the hidden state's gradient
  be->zero(dres);
  lnf.backward(*be, dres, dlnf, residual_into(blocks.size()), lnf_acts);
  ParamStore& ps = *store_;
  for (size_t i = blocks.size(); i-- > 0;) {
    const int unit = static_cast<int>(i) + 1;
    ps.gather(unit);
    ps.prefetch(unit - 1);
    // The shared activations hold the last layer's after the forward pass; any other layer runs
    // its forward pass again from its kept input (the same ops on the same values: bit-equal).
    if (options.recompute_layers && i + 1 < blocks.size()) {
      blocks[i].forward(*be, residual_into(i), block_acts[i], scratch, {.segments = seg});
    }
    blocks[i].backward(*be, dres, residual_into(i), block_acts[i], scratch, {.segments = seg});
    ps.release(unit);
  }
  be->embedding_backward(wte.dw, wpe.dw, dres.view({B, T, C}), tokens);
  ps.release(0);
}

std::vector<float> DecoderLm::logits(int64_t b, int64_t t) const {
  AX_CHECK(logits_valid_) << "logits() needs a forward() and no backward() since";
  AX_CHECK(b >= 0 && b < B && t >= 0 && t < T);
  return layers::logits_row(*be, logits_, row_f32, vocab, b * T + t);
}

}  // namespace ax::train
