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
#include "ax/trainer/models/model.h"

namespace ax::train {

// What a CachedDecoder holds room for.
struct CacheShape {
  int64_t batch = 1;     // rows
  int64_t capacity = 1;  // slots per row
  // Decoder-only models: the most slots the first feed() takes in one pass (the working space
  // holds one layer's activations for batch × prefill rows).
  int64_t prefill = 1;
  int64_t encoder_capacity = 0;  // encoder-decoder models: the longest input encode() takes
};

class CachedDecoder {
 public:
  // A decoder over `weights`' parameters (a model of any batch and length; not sharded).
  // InvalidArgument for a sharded model, a shape it cannot hold (prefill > capacity, a size < 1)
  // or a capacity beyond a learned position table; ResourceExhausted when it does not fit.
  static StatusOr<std::unique_ptr<CachedDecoder>> create(const Model& weights,
                                                         const CacheShape& shape);
  virtual ~CachedDecoder() = default;

  // Encoder-decoder models: runs the encoder over each row's input (1..encoder_capacity tokens;
  // rows may differ: shorter ones are padded and masked) and starts again at slot 0.
  virtual void encode(const std::vector<std::vector<int32_t>>& inputs) = 0;
  // Starts again at slot 0 (decoder-only models; encode() does it for encoder-decoders).
  virtual void reset() = 0;
  // Feeds tokens (batch, n) row-major at slots [next_slot(), next_slot() + n) and returns each
  // row's logits at the last of them: (batch, vocab) row-major, the real vocabulary. n > 1 only
  // at slot 0 of a decoder-only model, up to `prefill` (the shared prefix of the prompts).
  virtual std::vector<float> feed(std::span<const int32_t> tokens, int64_t n) = 0;
  virtual int64_t next_slot() const = 0;
  // Bytes of device memory the decoder holds: the caches and its working space.
  virtual size_t bytes() const = 0;
};

}  // namespace ax::train
