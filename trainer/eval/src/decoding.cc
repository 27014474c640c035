#include "ax/trainer/eval/decoding.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <span>

#include "ax/common/rng.h"
#include "ax/trainer/models/cached_decoder.h"

namespace ax::train {

int32_t pick_token(std::span<const float> logits, double temperature, int64_t top_k,
                   double uniform) {
  AX_CHECK(!logits.empty());
  if (temperature <= 0) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  const size_t k = (top_k > 0 && static_cast<size_t>(top_k) < order.size())
                       ? static_cast<size_t>(top_k)
                       : order.size();
  // Largest first; ties by id so the choice does not depend on the sort's implementation.
  std::partial_sort(
      order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
      [&](int32_t a, int32_t b) { return logits[a] != logits[b] ? logits[a] > logits[b] : a < b; });
  std::vector<double> weights(k);
  const double top = logits[order[0]];
  double total = 0;
  for (size_t i = 0; i < k; ++i) {
    weights[i] = std::exp((static_cast<double>(logits[order[i]]) - top) / temperature);
    total += weights[i];
  }
  double r = uniform * total;
  for (size_t i = 0; i < k; ++i) {
    r -= weights[i];
    if (r < 0) return order[i];
  }
  return order[k - 1];
}

namespace {

// What each row has produced so far, and the choice of its next token.
struct Rows {
  const DecodeOptions& o;
  std::vector<SplitMix64> rng;
  std::vector<bool> done;
  Decoded out;

  Rows(const DecodeOptions& options, size_t n) : o(options), done(n, options.max_new_tokens <= 0) {
    for (size_t b = 0; b < n; ++b) rng.emplace_back(mix64(o.seed) + mix64(b));
    out.tokens.resize(n);
    out.logits.resize(n);
  }
  bool all_done() const {
    return std::all_of(done.begin(), done.end(), [](bool d) { return d; });
  }
  // Row b's next token from its logits.
  void pick(size_t b, std::span<const float> logits) {
    if (o.pick_below > 0 && static_cast<size_t>(o.pick_below) < logits.size()) {
      logits = logits.first(static_cast<size_t>(o.pick_below));
    }
    const int32_t next = pick_token(logits, o.temperature, o.top_k, rng[b].uniform());
    if (o.keep_logits) out.logits[b].emplace_back(logits.begin(), logits.end());
    if (next == o.stop_token) {
      done[b] = true;
      return;
    }
    out.tokens[b].push_back(next);
    done[b] = static_cast<int64_t>(out.tokens[b].size()) >= o.max_new_tokens;
  }
};

// A fresh model of the given shape with `weights`' parameters.
StatusOr<std::unique_ptr<Model>> copy_of(const Model& weights, int64_t seq_len,
                                         int64_t encoder_seq_len) {
  AX_ASSIGN_OR_RETURN(std::unique_ptr<Model> model,
                      Model::create(weights.config(), weights.vocab(), 1, seq_len,
                                    weights.backend(), {}, {.encoder_seq_len = encoder_seq_len}));
  weights.backend()->copy(model->params(), weights.params());
  model->sync_compute_weights();
  return model;
}

// All rows in step: slot s holds position s of every row. A decoder-only model feeds the prefix
// all prompts share in one pass, then one slot at a time: a row's own prompt token while it
// lasts, then its last new token. A t5 decoder starts every row at slot 0 with token 0.
StatusOr<Decoded> decode_cached(const Model& weights,
                                const std::vector<std::vector<int32_t>>& inputs,
                                const DecodeOptions& o) {
  const bool t5 = weights.config().family == ModelFamily::kT5;
  const size_t B = inputs.size();
  int64_t shortest = INT64_MAX, longest = 0;
  for (const std::vector<int32_t>& in : inputs) {
    shortest = std::min<int64_t>(shortest, static_cast<int64_t>(in.size()));
    longest = std::max<int64_t>(longest, static_cast<int64_t>(in.size()));
  }
  // The last new token is never fed back.
  const int64_t capacity = (t5 ? 1 : longest) + std::max<int64_t>(o.max_new_tokens, 1) - 1;
  const int64_t prefix = t5 ? 1 : shortest;
  AX_ASSIGN_OR_RETURN(std::unique_ptr<CachedDecoder> decoder,
                      CachedDecoder::create(weights, {.batch = static_cast<int64_t>(B),
                                                      .capacity = capacity,
                                                      .prefill = prefix,
                                                      .encoder_capacity = longest}));
  const std::vector<std::vector<int32_t>> prompts =
      t5 ? std::vector<std::vector<int32_t>>(B, std::vector<int32_t>{0}) : inputs;
  if (t5) decoder->encode(inputs);
  std::vector<int32_t> feed(B * static_cast<size_t>(prefix));
  for (size_t b = 0; b < B; ++b) {
    std::copy_n(prompts[b].begin(), prefix, feed.begin() + static_cast<std::ptrdiff_t>(b * prefix));
  }
  Rows rows(o, B);
  std::vector<float> logits = decoder->feed(feed, prefix);
  const int64_t V = weights.vocab();
  for (int64_t slot = prefix - 1;; ++slot) {
    // The logits at `slot` choose a row's next token once its prompt is fed.
    for (size_t b = 0; b < B; ++b) {
      if (rows.done[b] || slot + 1 < static_cast<int64_t>(prompts[b].size())) continue;
      rows.pick(b, std::span<const float>(logits).subspan(b * V, static_cast<size_t>(V)));
    }
    if (rows.all_done()) break;
    feed.resize(B);
    for (size_t b = 0; b < B; ++b) {
      const std::vector<int32_t>& prompt = prompts[b];
      const std::vector<int32_t>& made = rows.out.tokens[b];
      if (slot + 1 < static_cast<int64_t>(prompt.size())) {
        feed[b] = prompt[static_cast<size_t>(slot + 1)];
      } else {
        feed[b] = rows.done[b] ? 0 : made.back();  // a finished row's slots are never read
      }
    }
    logits = decoder->feed(feed, 1);
  }
  return std::move(rows.out);
}

// The whole model over each row again for every new token, one row at a time.
StatusOr<Decoded> decode_uncached(const Model& weights,
                                  const std::vector<std::vector<int32_t>>& inputs,
                                  const DecodeOptions& o) {
  const bool t5 = weights.config().family == ModelFamily::kT5;
  int64_t longest = 0;
  for (const std::vector<int32_t>& in : inputs) {
    longest = std::max<int64_t>(longest, static_cast<int64_t>(in.size()));
  }
  const int64_t new_tokens = std::max<int64_t>(o.max_new_tokens, 1);
  const int64_t window = t5 ? new_tokens : longest + new_tokens - 1;
  AX_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, copy_of(weights, window, t5 ? longest : 0));
  Rows rows(o, inputs.size());
  std::vector<int32_t> tokens(static_cast<size_t>(window));
  std::vector<int32_t> encoder(static_cast<size_t>(longest)), encoder_segments(encoder.size());
  const std::vector<int32_t> segments(static_cast<size_t>(window), 1);
  for (size_t b = 0; b < inputs.size(); ++b) {
    std::vector<int32_t> ids = t5 ? std::vector<int32_t>{0} : inputs[b];
    if (t5) {
      std::fill(encoder.begin(), encoder.end(), 0);
      std::fill(encoder_segments.begin(), encoder_segments.end(), 0);
      std::copy(inputs[b].begin(), inputs[b].end(), encoder.begin());
      std::fill_n(encoder_segments.begin(), inputs[b].size(), 1);
    }
    while (!rows.done[b]) {
      std::fill(tokens.begin(), tokens.end(), 0);
      std::copy(ids.begin(), ids.end(), tokens.begin());
      Batch batch{.tokens = tokens};
      if (t5) {
        batch.segment_ids = segments;
        batch.encoder_tokens = encoder;
        batch.encoder_segment_ids = encoder_segments;
      }
      model->forward(batch);
      const std::vector<int32_t>& made = rows.out.tokens[b];
      const size_t before = made.size();
      rows.pick(b, model->logits(0, static_cast<int64_t>(ids.size()) - 1));
      if (made.size() > before) ids.push_back(made.back());
    }
  }
  return std::move(rows.out);
}

}  // namespace

StatusOr<Decoded> decode(const Model& weights, const std::vector<std::vector<int32_t>>& inputs,
                         const DecodeOptions& options) {
  for (size_t b = 0; b < inputs.size(); ++b) {
    if (inputs[b].empty()) return InvalidArgument("input ", b, " to decode is empty");
    // The CUDA embedding kernel trusts its ids (Model::forward checks them; the cached path
    // does not go through it): one outside the vocabulary would read past the table.
    for (int32_t id : inputs[b]) {
      if (id < 0 || id >= weights.vocab()) {
        return InvalidArgument("input ", b, " to decode has token ", id, ", outside the ",
                               weights.vocab(), "-token vocabulary");
      }
    }
  }
  if (inputs.empty()) return Decoded{};
  if (weights.sharded() || weights.parallel().tensor_size > 1) {
    return InvalidArgument("decoding runs in one process on whole weights (not sharded)");
  }
  const ModelConfig& config = weights.config();
  if (config.position == PositionKind::kLearned) {
    size_t longest = 0;
    for (const std::vector<int32_t>& in : inputs) longest = std::max(longest, in.size());
    const int64_t positions =
        static_cast<int64_t>(longest) + std::max<int64_t>(options.max_new_tokens, 1) - 1;
    if (positions > config.max_seq_len) {
      return InvalidArgument("a prompt of ", longest, " tokens and ", options.max_new_tokens,
                             " new ones take ", positions,
                             " positions; model.max_seq_len=", config.max_seq_len,
                             " (the learned position table)");
    }
  }
  return options.use_cache ? decode_cached(weights, inputs, options)
                           : decode_uncached(weights, inputs, options);
}

}  // namespace ax::train
