// Greedy or temperature / top-k decoding of a batch of rows (docs/decoding.md): decoder-only
// models continue each row's prompt; an encoder-decoder (t5) reads each row's input with its
// encoder and decodes from decoder_start_token_id (0). With the key/value cache
// (cached_decoder.h) a new token costs one token's forward pass; without it (`use_cache = false`,
// the reference the cache is tested against) every new token runs the whole model over the row
// again, one row at a time.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ax/common/status.h"
#include "ax/trainer/models/model.h"

namespace ax::train {

struct DecodeOptions {
  int64_t max_new_tokens = 128;
  double temperature = 0;   // 0 = greedy
  int64_t top_k = 0;        // 0 = the whole vocabulary
  uint64_t seed = 1;        // row b draws from its own stream, seeded by (seed, b)
  int32_t stop_token = -1;  // a row ends when it picks this token (not kept); < 0: none
  bool use_cache = true;
  bool keep_logits = false;  // return the logits each new token was picked from
  // Picks only ids below this (the tokenizer's size: the table's padded rows are in the softmax
  // but decode to no text); 0 = any row of the table.
  int64_t pick_below = 0;
};

struct Decoded {
  std::vector<std::vector<int32_t>> tokens;  // per row, the new tokens
  // With keep_logits: per row, per new token, the logits it was picked from (pick_below of them).
  std::vector<std::vector<std::vector<float>>> logits;
};

// Decodes every row of `inputs` (each at least one token: a prompt, or t5's encoder input) with
// `weights`' parameters on its backend. `weights` may have any batch and length; decoding sizes
// its own buffers to the rows. InvalidArgument for an empty row, a sharded model, or more
// positions than a learned position table holds.
StatusOr<Decoded> decode(const Model& weights, const std::vector<std::vector<int32_t>>& inputs,
                         const DecodeOptions& options);

// The next token from a row of logits: the argmax when temperature == 0, else a draw from
// softmax(logits / temperature) restricted to the top_k largest, using `uniform` in [0, 1).
int32_t pick_token(std::span<const float> logits, double temperature, int64_t top_k,
                   double uniform);

}  // namespace ax::train
