// Text generation from a run's newest checkpoint (`ax-train sample`): greedy or temperature /
// top-k sampling of one or several prompts at once, with the key/value cache (decoding.h) or, for
// comparison, without it. A decoder-only model continues each prompt; a t5 model reads each prompt
// with its encoder and decodes an answer.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "ax/common/status.h"

namespace ax::train {

struct SampleOptions {
  std::string run_dir;
  // One row each, decoded together. None (or "") = start after an end of document (decoder-only
  // models); t5 needs a text for its encoder.
  std::vector<std::string> prompts;
  int64_t tokens = 128;      // at most this many new tokens; stops early at end of document
  double temperature = 0.8;  // 0 = greedy
  int64_t top_k = 40;        // 0 = the whole vocabulary
  uint64_t seed = 1;
  bool use_cache = true;  // false: the whole model again for every new token (--no-cache)
  std::string device = "auto";
  int threads = 0;
  // "" = the run's data.tokenizer; else a .model, tokenizer.json or directory used instead (with
  // at most as many ids as the model's embedding has rows).
  std::string tokenizer;
};

// For each prompt: decoder-only models, the prompt followed by its continuation; t5, the decoded
// answer. Writes the device line, which checkpoint was used and the speed to `log`.
StatusOr<std::vector<std::string>> sample_text(const SampleOptions& options, std::ostream& log);

}  // namespace ax::train
