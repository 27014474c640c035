// Text generation from a run's newest checkpoint (`ax-train sample`): greedy or temperature /
// top-k sampling, one full forward pass per generated token (fine for the small models it is
// used with; there is no KV cache).
#pragma once

#include <cstdint>
#include <ostream>
#include <span>
#include <string>

#include "ax/common/status.h"

namespace ax::train {

struct SampleOptions {
  std::string run_dir;
  std::string prompt;        // "" = start after an end of document
  int64_t tokens = 128;      // at most this many new tokens; stops early at end of document
  double temperature = 0.8;  // 0 = greedy
  int64_t top_k = 40;        // 0 = the whole vocabulary
  uint64_t seed = 1;
  std::string device = "auto";
  int threads = 0;
};

// The prompt followed by the generated continuation. Writes the device line and which
// checkpoint was used to `log`.
StatusOr<std::string> sample_text(const SampleOptions& options, std::ostream& log);

// The next token from a row of logits: the argmax when temperature == 0, else a draw from
// softmax(logits / temperature) restricted to the top_k largest, using `uniform` in [0, 1).
int32_t pick_token(std::span<const float> logits, double temperature, int64_t top_k,
                   double uniform);

}  // namespace ax::train
