#include "ax/trainer/train/sampler.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "ax/common/rng.h"
#include "ax/datasets/text/tokenizer.h"
#include "ax/trainer/checkpoint/checkpoint.h"
#include "ax/trainer/eval/decoding.h"
#include "ax/trainer/models/model.h"
#include "ax/trainer/train/train_loop.h"
#include "ax/trainer/train/train_state.h"

namespace ax::train {

StatusOr<std::vector<std::string>> sample_text(const SampleOptions& options, std::ostream& log) {
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
      data::Tokenizer::load(options.tokenizer.empty() ? config.data.tokenizer : options.tokenizer);
  if (!tokenizer.ok()) {
    return tokenizer.status().with_context(options.tokenizer.empty() ? "the run's data.tokenizer"
                                                                     : "--tokenizer");
  }
  const data::Tokenizer& tok = **tokenizer;
  if (tok.vocab_size() > config.model.vocab_size) {
    return FailedPrecondition("the tokenizer ",
                              options.tokenizer.empty() ? config.data.tokenizer : options.tokenizer,
                              " has ", tok.vocab_size(), " ids, more than the ",
                              config.model.vocab_size, " rows of the model's embedding");
  }
  const bool t5 = config.model.family == ModelFamily::kT5;
  const int32_t eos = tok.eos_id();

  std::vector<std::string> prompts = options.prompts;
  if (prompts.empty()) prompts.emplace_back();
  std::vector<std::vector<int32_t>> inputs;
  std::vector<bool> seeded;
  for (const std::string& prompt : prompts) {
    std::vector<uint32_t> ids;
    AX_RETURN_IF_ERROR(tok.encode(prompt, &ids));
    if (t5 && ids.empty()) {
      return InvalidArgument("model.family=t5 decodes an answer to an input: give --prompt TEXT");
    }
    // T5's inputs end with EOS, as in training. An empty prompt for a decoder-only model starts
    // where a document would: after an end-of-document token.
    seeded.push_back(!t5 && ids.empty());
    if (t5 || ids.empty()) ids.push_back(static_cast<uint32_t>(std::max(eos, 0)));
    inputs.emplace_back(ids.begin(), ids.end());
  }

  AX_ASSIGN_OR_RETURN(auto backend,
                      make_backend(options.device, options.threads, log, config.train.precision));
  // The weights; decoding plans its own buffers for the rows.
  AX_ASSIGN_OR_RETURN(auto model, Model::create(config.model, tok.vocab_size(), 1, 1, backend.get(),
                                                {}, {.encoder_seq_len = t5 ? 1 : 0}));
  AX_RETURN_IF_ERROR(restore_parameters(state, &model->store()));
  log << "sampling from " << checkpoints.step_dir(*latest) << "\n";

  const DecodeOptions decode_options{.max_new_tokens = options.tokens,
                                     .temperature = options.temperature,
                                     .top_k = options.top_k,
                                     .seed = options.seed,
                                     .stop_token = eos,
                                     .use_cache = options.use_cache,
                                     .pick_below = tok.vocab_size()};
  const auto start = std::chrono::steady_clock::now();
  AX_ASSIGN_OR_RETURN(Decoded decoded, decode(*model, inputs, decode_options));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  size_t made = 0;
  std::vector<std::string> texts;
  for (size_t b = 0; b < inputs.size(); ++b) {
    made += decoded.tokens[b].size();
    std::vector<uint32_t> ids;
    if (!t5) ids.assign(inputs[b].begin() + (seeded[b] ? 1 : 0), inputs[b].end());
    ids.insert(ids.end(), decoded.tokens[b].begin(), decoded.tokens[b].end());
    AX_ASSIGN_OR_RETURN(std::string text, tok.decode(ids));
    texts.push_back(std::move(text));
  }
  log << made << " new tokens in " << seconds << " s ("
      << (seconds > 0 ? static_cast<double>(made) / seconds : 0) << " tokens/s, "
      << (options.use_cache ? "with" : "without") << " the key/value cache)\n";
  return texts;
}

}  // namespace ax::train
