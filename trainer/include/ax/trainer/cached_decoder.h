// Decoding with a key/value cache (docs/decoding.md): a forward-only network over a model's
// ParamStore, built from the same blocks (models/layers.h), that feeds a batch of rows one
// position ("slot") at a time. Each layer keeps the keys and values of every slot fed so far, so
// a new token costs one token's forward pass: its projections, attention of its one query row
// against the cached keys (Backend::attention_forward with Tq = 1, unused slots masked by key
// segment ids) and its MLP. All rows advance together: slot s holds position s of every row.
//
// Decoder-only models (gpt, llama: learned positions or RoPE at the slot's position, GQA) continue
// their inputs; an encoder-decoder (t5) runs its encoder once per batch (encode) and computes
// every decoder layer's cross-attention keys and values from its output once, then decodes with
// the decoder's relative position bias of the new query row against all earlier slots.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "ax/common/status.h"
#include "ax/trainer/model.h"

namespace ax::train {

class CachedDecoder {
 public:
  // A decoder for `batch` rows of up to `capacity` slots over `weights`' parameters (any batch and
  // length it was created with; not sharded). Encoder-decoder models: `encoder_capacity` is the
  // longest encoder input encode() takes (ignored otherwise). InvalidArgument for a sharded model
  // or a capacity beyond a learned position table; ResourceExhausted when the cache does not fit.
  static StatusOr<std::unique_ptr<CachedDecoder>> create(const Model& weights, int64_t batch,
                                                         int64_t capacity,
                                                         int64_t encoder_capacity = 0);
  virtual ~CachedDecoder() = default;

  // Encoder-decoder models: runs the encoder over each row's input (1..encoder_capacity tokens;
  // rows may differ: shorter ones are padded and masked) and starts again at slot 0.
  virtual void encode(const std::vector<std::vector<int32_t>>& inputs) = 0;
  // Starts again at slot 0 (decoder-only models; encode() does it for encoder-decoders).
  virtual void reset() = 0;
  // Feeds tokens (batch, n) row-major at slots [next_slot(), next_slot() + n) and returns each
  // row's logits at the last of them: (batch, vocab) row-major, the real vocabulary. n > 1 only
  // at slot 0 of a decoder-only model (the shared prefix of the prompts in one pass).
  virtual std::vector<float> feed(std::span<const int32_t> tokens, int64_t n) = 0;
  virtual int64_t next_slot() const = 0;
  // Bytes of device memory the decoder holds: the caches and its working space.
  virtual size_t bytes() const = 0;
};

}  // namespace ax::train
