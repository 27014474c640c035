// The key/value-cached decoding network (cached_decoder.h, docs/decoding.md). It declares the
// blocks of decoder_lm.cc or encoder_decoder.cc under the same parameter names and binds them to
// the trained model's store; only backend ops run, so the CPU and CUDA backends take the same
// path. Per layer the cache holds the packed qkv rows of every slot (B, capacity, (NH + 2·KVH)·HD),
// after RoPE: a new token's row is copied in at its slot and its query attends to the cache with
// the slots not yet fed masked out by key segment ids (0 = unused, 1 = fed).
#include "ax/trainer/models/cached_decoder.h"

#include <algorithm>
#include <string>

#include "layers.h"
#include "lm_loss.h"
#include "position_buckets.h"

namespace ax::train {
namespace {

using layers::DecoderLayer;

// `dims` over t's memory from element `first` on (rows of a batch, slots of a cache).
Tensor slice(Tensor t, int64_t first, std::initializer_list<int64_t> dims) {
  Tensor s(static_cast<char*>(t.data) + first * static_cast<int64_t>(dtype_size(t.dtype)), t.dtype,
           dims);
  AX_CHECK_LE(first + s.numel(), t.numel()) << "slice of " << t.shape_string();
  return s;
}

// What one pass over n slots of every row uses; planned anew per pass in the working space.
struct Work {
  Tensor tokens;  // (B, n) i32
  Tensor x[2];    // (B·n, C) the residual stream, in and out of each layer in turn
  DecoderLayer::Acts acts;
  DecoderLayer::Scratch scratch;  // branch and, with RoPE, qkv_pre only: no gradients
  Tensor bias, buckets;           // the encoder's (1, NH, n, n) position bias and its buckets
};

class Cached final : public CachedDecoder {
 public:
  ~Cached() override {
    if (base_ != nullptr) be_->free(base_);
  }

  Status build(const Model& weights, const CacheShape& shape);

  void encode(const std::vector<std::vector<int32_t>>& inputs) override;
  void reset() override {
    slot_ = 0;
    std::fill(fed_host_.begin(), fed_host_.end(), 0);
  }
  std::vector<float> feed(std::span<const int32_t> tokens, int64_t n) override;
  int64_t next_slot() const override { return slot_; }
  size_t bytes() const override { return bytes_; }

 private:
  void declare(const ParamStore& store);
  void plan(Arena* arena);
  void plan_work(Arena* arena, const DecoderLayer& layer, int64_t n, bool encoder, Work* w) const;
  Work work(const DecoderLayer& layer, int64_t n, bool encoder) const {
    Arena arena(work_base_, work_bytes_);
    Work w;
    plan_work(&arena, layer, n, encoder, &w);
    return w;
  }
  void embed(const Work& w, std::span<const int32_t> tokens, int64_t n);
  void prefill(std::span<const int32_t> tokens, int64_t n);
  void step(std::span<const int32_t> tokens);
  void step_layer(size_t i, Tensor in, Tensor out, const Work& w) const;
  std::vector<float> head(Tensor hidden);

  ModelConfig config_;
  Backend* be_ = nullptr;
  bool t5_ = false;
  int64_t B_ = 0, capacity_ = 0, prefill_ = 1, enc_capacity_ = 0, C_ = 0, V_ = 0;
  layers::VocabShard vocab_;
  int64_t slot_ = 0, te_ = 0;  // the next slot; the encoder input's length (t5)

  // Parameters, bound to the trained model's store.
  ParamViews wte_, wpe_, lm_head_, enc_bias_table_, dec_bias_table_;
  std::vector<DecoderLayer> enc_, dec_;
  layers::Norm enc_lnf_, lnf_;

  // Kept across passes.
  std::vector<Tensor> cache_;        // per decoder layer (B, capacity, QKV)
  std::vector<Tensor> cross_kv_;     // t5: per decoder layer (B, encoder_capacity, 2·KVH·HD)
  Tensor memory_;                    // t5: the encoder's output (B·encoder_capacity, C)
  Tensor memory_segments_;           // t5: (B, encoder_capacity) i32, 1 real, 0 padding
  Tensor fed_;                       // (B, capacity) i32: 1 for the slots fed so far
  Tensor ones_;                      // (B, 1) i32: the new query row's segment
  Tensor step_bias_, step_buckets_;  // t5: (1, NH, 1, capacity) and (1, 1, capacity) i32
  Tensor last_;                      // (B, C) each row's last hidden state
  layers::Norm::Acts lnf_acts_;      // (B, C)
  Tensor logits_, logits_f32_;       // (B, Vp)
  std::vector<int32_t> fed_host_;

  void* base_ = nullptr;
  void* work_base_ = nullptr;
  size_t bytes_ = 0, work_bytes_ = 0;
};

Status Cached::build(const Model& weights, const CacheShape& shape) {
  config_ = weights.config();
  be_ = weights.backend();
  t5_ = config_.family == ModelFamily::kT5;
  B_ = shape.batch;
  capacity_ = shape.capacity;
  prefill_ = t5_ ? 1 : shape.prefill;
  enc_capacity_ = t5_ ? shape.encoder_capacity : 0;
  C_ = config_.model_dim;
  V_ = weights.vocab();
  vocab_ = layers::VocabShard::of(V_, config_.vocab_size, {});
  if (weights.sharded() || weights.parallel().tensor_size > 1) {
    return InvalidArgument("decoding with a key/value cache runs in one process on whole weights");
  }
  if (B_ < 1 || capacity_ < 1 || prefill_ < 1 || prefill_ > capacity_ ||
      (t5_ && enc_capacity_ < 1)) {
    return InvalidArgument("a cached decoder of batch ", B_, ", capacity ", capacity_, ", prefill ",
                           prefill_, t5_ ? ", encoder capacity " : "",
                           t5_ ? std::to_string(enc_capacity_) : "",
                           ": each must be >= 1, prefill <= capacity");
  }
  if (config_.position == PositionKind::kLearned && capacity_ > config_.max_seq_len) {
    return InvalidArgument(capacity_,
                           " positions (prompt and new tokens) exceed model.max_seq_len=",
                           config_.max_seq_len, " (the learned position table)");
  }
  declare(weights.store());
  Arena dry_run;
  plan(&dry_run);
  bytes_ = dry_run.used();
  AX_ASSIGN_OR_RETURN(base_, be_->alloc(bytes_));
  Arena arena(base_, bytes_);
  plan(&arena);
  fed_host_.assign(static_cast<size_t>(B_ * capacity_), 0);
  const std::vector<int32_t> ones(static_cast<size_t>(B_), 1);
  be_->copy_from_host(ones_, ones.data());
  return Status::Ok();
}

// The names and blocks of decoder_lm.cc and encoder_decoder.cc (docs/parameter-names.md).
void Cached::declare(const ParamStore& store) {
  ParamLayout unused;  // the blocks learn their names and shapes; the store has the values
  const layers::BlockOptions o = layers::BlockOptions::of(config_);
  wte_ = store.views("wte");
  if (t5_) {
    enc_.resize(static_cast<size_t>(config_.num_layers));
    const int num_dec =
        config_.num_decoder_layers > 0 ? config_.num_decoder_layers : config_.num_layers;
    dec_.resize(static_cast<size_t>(num_dec));
    for (size_t i = 0; i < enc_.size(); ++i) {
      enc_[i].declare(&unused, "enc.h." + std::to_string(i), o);
      enc_[i].attn.causal = false;
      enc_[i].bind(store);
    }
    for (size_t i = 0; i < dec_.size(); ++i) {
      dec_[i].declare(&unused, "dec.h." + std::to_string(i), o, {}, /*cross_attention=*/true);
      dec_[i].bind(store);
    }
    enc_lnf_.declare(&unused, "enc.lnf", C_, true, false, config_.norm_eps);
    enc_lnf_.bind(store);
    lnf_.declare(&unused, "dec.lnf", C_, true, false, config_.norm_eps);
    enc_bias_table_ = store.views("enc.rel_bias.weight");
    dec_bias_table_ = store.views("dec.rel_bias.weight");
    lm_head_ = store.views("lm_head.weight");
  } else {
    dec_.resize(static_cast<size_t>(config_.num_layers));
    for (size_t i = 0; i < dec_.size(); ++i) {
      dec_[i].declare(&unused, "h." + std::to_string(i), o);
      dec_[i].bind(store);
    }
    lnf_.declare(&unused, "lnf", C_, o.rms_norm, config_.bias, config_.norm_eps);
    wpe_ = store.views(config_.position == PositionKind::kLearned ? "wpe" : "");
    lm_head_ = store.views(config_.tied_embeddings ? "wte" : "lm_head.weight");
  }
  lnf_.bind(store);
}

void Cached::plan(Arena* arena) {
  const DType dt = be_->compute_dtype();
  const layers::SelfAttention& attn = dec_[0].attn;
  cache_.resize(dec_.size());
  for (Tensor& c : cache_) c = arena->take(dt, {B_, capacity_, attn.qkv_dim()});
  if (t5_) {
    cross_kv_.resize(dec_.size());
    const int64_t kv = 2 * dec_[0].cross.num_kv_heads * dec_[0].cross.head_dim;
    for (Tensor& c : cross_kv_) c = arena->take(dt, {B_, enc_capacity_, kv});
    memory_ = arena->take(dt, {B_ * enc_capacity_, C_});
    memory_segments_ = arena->take(DType::kI32, {B_, enc_capacity_});
    step_bias_ = arena->take(dt, {1, attn.num_heads, 1, capacity_});
    step_buckets_ = arena->take(DType::kI32, {1, 1, capacity_});
  }
  fed_ = arena->take(DType::kI32, {B_, capacity_});
  ones_ = arena->take(DType::kI32, {B_, 1});
  last_ = arena->take(dt, {B_, C_});
  lnf_.plan(arena, dt, B_, C_, &lnf_acts_);
  logits_ = arena->take(dt, {B_, vocab_.Vl});
  logits_f32_ = arena->take(DType::kF32, {B_, vocab_.Vl});
  // The working space: the largest pass. A decoder-only model's first pass takes up to `prefill`
  // slots; a t5 decoder feeds one slot at a time after an encoder pass over its input.
  size_t work = 0;
  auto measure = [&](const DecoderLayer& layer, int64_t n, bool encoder) {
    Arena dry_run;
    Work w;
    plan_work(&dry_run, layer, n, encoder, &w);
    work = std::max(work, dry_run.used());
  };
  measure(dec_[0], prefill_, false);
  if (t5_) measure(enc_[0], enc_capacity_, true);
  work_bytes_ = work;
  Tensor space = arena->take(DType::kF32, {static_cast<int64_t>((work + 3) / 4)});
  work_base_ = space.data;
}

void Cached::plan_work(Arena* arena, const DecoderLayer& layer, int64_t n, bool encoder,
                       Work* w) const {
  const DType dt = be_->compute_dtype();
  w->tokens = arena->take(DType::kI32, {B_, n});
  for (Tensor& x : w->x) x = arena->take(dt, {B_ * n, C_});
  // A one-slot memory: the t5 step reads the cached cross-attention keys and values instead.
  layer.plan(arena, dt, B_, n, C_, &w->acts, layer.has_cross ? 1 : 0);
  w->scratch.branch = arena->take(dt, {B_ * n, C_});
  if (layer.attn.rope) w->scratch.attn.qkv_pre = arena->take(dt, {B_, n, layer.attn.qkv_dim()});
  if (encoder) {
    w->bias = arena->take(dt, {1, layer.attn.num_heads, n, n});
    w->buckets = arena->take(DType::kI32, {1, n, n});
  }
}

void Cached::embed(const Work& w, std::span<const int32_t> tokens, int64_t n) {
  for (int32_t id : tokens) {
    // The CUDA embedding kernel does not check ids (a negative one is a zero row).
    AX_CHECK(id < config_.vocab_size)
        << "token " << id << " past the embedding's " << config_.vocab_size << " rows";
  }
  be_->copy_from_host(w.tokens, tokens.data());
  // Learned positions: the table's rows from this pass's first slot.
  Tensor wpe;
  if (!wpe_.w.empty()) wpe = slice(wpe_.w, slot_ * C_, {config_.max_seq_len - slot_, C_});
  be_->embedding_forward(w.x[0].view({B_, n, C_}), w.tokens, wte_.w, wpe);
}

void Cached::encode(const std::vector<std::vector<int32_t>>& inputs) {
  AX_CHECK(t5_) << "encode() is for encoder-decoder models";
  AX_CHECK_EQ(static_cast<int64_t>(inputs.size()), B_);
  int64_t te = 0;
  for (const std::vector<int32_t>& in : inputs) te = std::max<int64_t>(te, in.size());
  AX_CHECK(te >= 1 && te <= enc_capacity_) << "encoder input of " << te << " tokens";
  std::vector<int32_t> tokens(static_cast<size_t>(B_ * te), 0), segments(tokens.size(), 0);
  for (int64_t b = 0; b < B_; ++b) {
    const std::vector<int32_t>& in = inputs[static_cast<size_t>(b)];
    AX_CHECK(!in.empty()) << "encoder input " << b << " is empty";
    std::copy(in.begin(), in.end(), tokens.begin() + b * te);
    std::fill_n(segments.begin() + b * te, in.size(), 1);
  }
  te_ = te;
  reset();
  const Tensor seg = slice(memory_segments_, 0, {B_, te});
  be_->copy_from_host(seg, segments.data());

  const Work w = work(enc_[0], te, /*encoder=*/true);
  embed(w, tokens, te);
  const std::vector<int32_t> positions = segment_positions({}, te);
  std::vector<int32_t> buckets(static_cast<size_t>(te * te));
  relative_position_buckets(positions, positions, /*bidirectional=*/true, config_.relative_buckets,
                            config_.relative_max_distance, buckets.data());
  be_->copy_from_host(w.buckets, buckets.data());
  be_->position_bias_forward(w.bias, enc_bias_table_.w, w.buckets);
  for (size_t i = 0; i < enc_.size(); ++i) {
    DecoderLayer::Acts acts = w.acts;
    acts.res_out = w.x[(i + 1) % 2];
    enc_[i].forward(*be_, w.x[i % 2], acts, w.scratch, {.segments = seg, .bias = w.bias});
  }
  const Tensor memory = slice(memory_, 0, {B_ * te, C_});
  layers::Norm::Acts norm = w.acts.ln1;  // the first norm's statistics are free again
  norm.out = memory;
  enc_lnf_.forward(*be_, norm, w.x[enc_.size() % 2]);
  for (size_t i = 0; i < dec_.size(); ++i) {
    dec_[i].cross.kv.forward(*be_, slice(cross_kv_[i], 0, {B_, te, cross_kv_[i].dim(2)}), memory);
  }
}

std::vector<float> Cached::feed(std::span<const int32_t> tokens, int64_t n) {
  AX_CHECK_EQ(static_cast<int64_t>(tokens.size()), B_ * n);
  AX_CHECK(n == 1 || (n > 1 && slot_ == 0 && !t5_ && n <= prefill_))
      << "several slots (" << n << ") in one pass only from slot 0 of a decoder-only model, up to "
      << prefill_;
  AX_CHECK_LE(slot_ + n, capacity_) << "the cache holds " << capacity_ << " slots";
  AX_CHECK(!t5_ || te_ > 0) << "encode() first";
  for (int64_t b = 0; b < B_; ++b) {
    std::fill_n(fed_host_.begin() + b * capacity_ + slot_, n, 1);
  }
  if (slot_ == 0 && !t5_) {
    prefill(tokens, n);
  } else {
    step(tokens);
  }
  slot_ += n;
  return head(last_);
}

// Slots [0, n) of every row in one pass: the training forward of each layer (causal attention
// over the pass's own keys), whose qkv rows then fill the cache.
void Cached::prefill(std::span<const int32_t> tokens, int64_t n) {
  const Work w = work(dec_[0], n, /*encoder=*/false);
  embed(w, tokens, n);
  const int64_t R = cache_[0].dim(2);
  for (size_t i = 0; i < dec_.size(); ++i) {
    DecoderLayer::Acts acts = w.acts;
    acts.res_out = w.x[(i + 1) % 2];
    dec_[i].forward(*be_, w.x[i % 2], acts, w.scratch);
    for (int64_t b = 0; b < B_; ++b) {
      be_->copy(slice(cache_[i], b * capacity_ * R, {n, R}),
                slice(acts.attn.qkv, b * n * R, {n, R}));
    }
  }
  const Tensor out = w.x[dec_.size() % 2];
  for (int64_t b = 0; b < B_; ++b) {
    be_->copy(slice(last_, b * C_, {1, C_}), slice(out, (b * n + n - 1) * C_, {1, C_}));
  }
}

// One slot of every row: each layer's new qkv row into the cache, then its query against all
// the slots fed so far.
void Cached::step(std::span<const int32_t> tokens) {
  const Work w = work(dec_[0], 1, /*encoder=*/false);
  be_->copy_from_host(fed_, fed_host_.data());
  if (t5_) {
    // The decoder's causal relative bias of the new query (at slot_) against every slot.
    std::vector<int32_t> keys = segment_positions({}, capacity_);
    std::vector<int32_t> buckets(static_cast<size_t>(capacity_));
    const std::vector<int32_t> query = {static_cast<int32_t>(slot_)};
    relative_position_buckets(query, keys, /*bidirectional=*/false, config_.relative_buckets,
                              config_.relative_max_distance, buckets.data());
    be_->copy_from_host(step_buckets_, buckets.data());
    be_->position_bias_forward(step_bias_, dec_bias_table_.w, step_buckets_);
  }
  embed(w, tokens, 1);
  for (size_t i = 0; i < dec_.size(); ++i) step_layer(i, w.x[i % 2], w.x[(i + 1) % 2], w);
  be_->copy(last_, w.x[dec_.size() % 2]);
}

// DecoderLayer::forward for one slot, its self-attention reading the cache (and, for t5, its
// cross-attention the cached keys and values of the encoder's output).
void Cached::step_layer(size_t i, Tensor in, Tensor out, const Work& w) const {
  const DecoderLayer& l = dec_[i];
  const DecoderLayer::Acts& a = w.acts;
  const layers::SelfAttention& attn = l.attn;
  const Tensor branch = w.scratch.branch;
  l.ln1.forward(*be_, a.ln1, in);
  if (attn.rope) {
    attn.qkv.forward(*be_, w.scratch.attn.qkv_pre, a.ln1.out);
    be_->rope_forward(a.attn.qkv, w.scratch.attn.qkv_pre, attn.num_heads, attn.num_kv_heads,
                      attn.rope_spec, slot_);
  } else {
    attn.qkv.forward(*be_, a.attn.qkv, a.ln1.out);
  }
  const int64_t R = cache_[i].dim(2);
  for (int64_t b = 0; b < B_; ++b) {
    be_->copy(slice(cache_[i], (b * capacity_ + slot_) * R, {1, R}),
              slice(a.attn.qkv, b * R, {1, R}));
  }
  AttentionSpec spec = attn.spec({.bias = t5_ ? step_bias_ : Tensor()});
  spec.causal = false;  // the unfed slots are masked instead
  spec.q_segments = ones_;
  spec.k_segments = fed_;
  be_->attention_forward(a.attn.out, a.attn.lse, a.attn.qkv, cache_[i], spec);
  attn.proj.forward(*be_, branch, a.attn.out);
  be_->add_forward(a.res_mid, in, branch);
  if (l.has_cross) {
    l.ln_cross.forward(*be_, a.ln_cross, a.res_mid);
    l.cross.q.forward(*be_, a.cross.q, a.ln_cross.out);
    const AttentionSpec cross =
        l.cross.spec({.segments = ones_, .memory_segments = slice(memory_segments_, 0, {B_, te_})});
    be_->attention_forward(a.cross.out, a.cross.lse, a.cross.q,
                           slice(cross_kv_[i], 0, {B_, te_, cross_kv_[i].dim(2)}), cross);
    l.cross.proj.forward(*be_, branch, a.cross.out);
    be_->add_forward(a.res_cross, a.res_mid, branch);
  }
  const Tensor before_mlp = l.residual_before_mlp(a);
  l.ln2.forward(*be_, a.ln2, before_mlp);
  l.mlp.forward(*be_, branch, a.ln2.out, a.mlp);
  be_->add_forward(out, before_mlp, branch);
}

// The final norm and the LM head over each row's last hidden state, to the host.
std::vector<float> Cached::head(Tensor hidden) {
  lnf_.forward(*be_, lnf_acts_, hidden);
  be_->matmul_forward(logits_, lnf_acts_.out, lm_head_.w, Tensor());
  be_->copy(logits_f32_, logits_);
  std::vector<float> all(static_cast<size_t>(B_ * vocab_.Vl));
  be_->copy_to_host(all.data(), logits_f32_);
  std::vector<float> real(static_cast<size_t>(B_ * V_));
  for (int64_t b = 0; b < B_; ++b) {
    std::copy_n(all.begin() + b * vocab_.Vl, V_, real.begin() + b * V_);
  }
  return real;
}

}  // namespace

StatusOr<std::unique_ptr<CachedDecoder>> CachedDecoder::create(const Model& weights,
                                                               const CacheShape& shape) {
  auto decoder = std::make_unique<Cached>();
  AX_RETURN_IF_ERROR(decoder->build(weights, shape));
  return std::unique_ptr<CachedDecoder>(std::move(decoder));
}

}  // namespace ax::train
