#include "ax/trainer/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "ax/common/rng.h"
#include "ax/datasets/tokenizer.h"
#include "ax/trainer/checkpoint.h"
#include "ax/trainer/model.h"
#include "ax/trainer/train_loop.h"
#include "ax/trainer/train_state.h"

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

StatusOr<std::string> sample_text(const SampleOptions& options, std::ostream& log) {
  if (options.tokens < 0) return InvalidArgument("--tokens must be >= 0");
  CheckpointManager checkpoints(options.run_dir, 1);
  AX_ASSIGN_OR_RETURN(std::optional<int64_t> latest, checkpoints.latest());
  if (!latest) {
    return NotFound("no checkpoint in ", options.run_dir, " (train first with ax-train)");
  }
  AX_ASSIGN_OR_RETURN(CheckpointState state, checkpoints.load(*latest));
  auto blob = state.blobs.find("config.json");
  if (blob == state.blobs.end()) {
    return DataLoss(checkpoints.step_dir(*latest), " has no config.json");
  }
  AX_ASSIGN_OR_RETURN(Config config, from_json(blob->second));
  StatusOr<std::unique_ptr<data::Tokenizer>> tokenizer =
      data::Tokenizer::load(config.data.tokenizer);
  if (!tokenizer.ok()) return tokenizer.status().with_context("the run's data.tokenizer");
  const data::Tokenizer& tok = **tokenizer;

  if (config.model.family == ModelFamily::kT5) {
    return InvalidArgument(
        "sampling continues a prompt with a decoder-only model; model.family=t5 needs an encoder "
        "input and decoding from it, which this command does not do yet");
  }
  std::vector<uint32_t> ids;
  AX_RETURN_IF_ERROR(tok.encode(options.prompt, &ids));
  const int32_t eos = tok.eos_id();
  // An empty prompt starts where a document would: after an end-of-document token.
  const bool seeded = ids.empty();
  if (seeded) ids.push_back(static_cast<uint32_t>(std::max(eos, 0)));

  const int64_t window =
      std::min<int64_t>(config.train.seq_len,
                        static_cast<int64_t>(ids.size()) + std::max<int64_t>(options.tokens, 1));
  AX_ASSIGN_OR_RETURN(auto backend,
                      make_backend(options.device, options.threads, log, config.train.precision));
  AX_ASSIGN_OR_RETURN(auto model,
                      Model::create(config.model, tok.vocab_size(), 1, window, backend.get()));
  AX_RETURN_IF_ERROR(restore_parameters(state, &model->store()));
  log << "sampling from " << checkpoints.step_dir(*latest) << "\n";

  SplitMix64 rng(options.seed);
  std::vector<int32_t> input(static_cast<size_t>(window), 0);
  for (int64_t n = 0; n < options.tokens; ++n) {
    const size_t len = std::min<size_t>(ids.size(), static_cast<size_t>(window));
    const size_t start = ids.size() - len;
    for (size_t i = 0; i < len; ++i) input[i] = static_cast<int32_t>(ids[start + i]);
    model->forward(input, {});
    const std::vector<float> logits = model->logits(0, static_cast<int64_t>(len) - 1);
    const int32_t next = pick_token(logits, options.temperature, options.top_k, rng.uniform());
    if (next == eos) break;
    ids.push_back(static_cast<uint32_t>(next));
  }
  std::span<const uint32_t> text_ids(ids);
  if (seeded) text_ids = text_ids.subspan(1);
  return tok.decode(text_ids);
}

}  // namespace ax::train
