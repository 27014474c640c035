// The rows of one training or evaluation step on the host, in the form a model family reads
// (Batch), made from the loader's token windows: next-token rows for decoder-only models, T5's
// span corruption (optionally packed) for encoder-decoders; fine-tuning examples in
// example_rows.h. forward_backward cuts them into micro-batches. docs/t5.md "The data" has the
// span-corruption contract.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ax/common/status.h"
#include "ax/datasets/loader/span_corruption.h"
#include "ax/trainer/models/model.h"

namespace ax::train {

struct StepRows {
  int64_t rows = 0;
  int64_t length = 0;          // decoder tokens per row (T)
  int64_t encoder_length = 0;  // encoder tokens per row (Te); 0 for decoder-only rows
  // Non-ignored targets in these rows, and in the global batch they are a slice of (all
  // replicas): the loss of a step is the sum of its token losses over global_targets.
  int64_t num_targets = 0;
  int64_t global_targets = 0;
  std::vector<int32_t> tokens, targets, segment_ids;         // (rows, T); segment ids may be empty
  std::vector<int32_t> encoder_tokens, encoder_segment_ids;  // (rows, Te) or empty
  // Training with dropout: each row's place in the data (the loader's sample id) and the step's
  // seed (Batch::row_ids); empty: no dropout.
  std::vector<uint64_t> row_ids;
  uint64_t dropout_seed = 0;

  // Rows [first, first + count) as a model batch (views into this object).
  Batch micro_batch(int64_t first, int64_t count) const;
};

// Sequence parallelism (docs/sharding.md "Sequence parallelism"): rank `rank` of a seq group of
// `size` keeps positions [rank·T/size, (rank+1)·T/size) of every row of `whole` (tokens, targets,
// segment ids; T must be a multiple of size); num_targets counts the slice's targets,
// global_targets stays the whole batch's, row ids and the seed stay. `whole` itself when size is
// 1. Decoder-only rows only.
StepRows seq_slice_rows(StepRows whole, int rank, int size);

// Decoder-only rows from `rows` windows of length + 1 tokens: inputs [0, T), targets [1, T].
StepRows lm_rows(std::span<const uint32_t> windows, int64_t rows, int64_t length);

// T5 pretraining rows. Each window (raw_length() tokens) holds `pack` raw examples; each is
// span-corrupted with the seed mix64(seed ^ mix64(sample_id · pack + k)), so an example's
// corruption depends on the run seed and its place in the data alone (not on ranks, batches
// or threads), then the examples' inputs fill the encoder row and their targets the decoder row,
// each with segment ids 1..pack when packed; the decoder input is the targets shifted right with
// decoder_start first in each example. Decoder positions after the targets are padding (token
// pad, target ignored, segment 0).
struct SpanCorruptionRows {
  data::SpanCorruption corruption;
  int64_t encoder_length = 0;  // ENC_SL: the inputs of `pack` examples
  int64_t decoder_length = 0;  // DEC_SL: >= pack × the targets of one example
  int64_t pack = 1;            // examples per row
  uint64_t seed = 0;
  uint32_t sentinel_top = 0, num_sentinels = 0, eos = 1;
  int32_t pad = 0;  // also T5's decoder_start_token_id

  // Checks the lengths (ENC_SL long enough for one span and divisible by pack, DEC_SL long
  // enough for the targets) and returns the per-example lengths.
  StatusOr<data::SpanLengths> lengths() const;
  // Tokens per window the loader must give (pack raw examples).
  int64_t raw_length() const;
  StatusOr<StepRows> make(std::span<const uint32_t> windows,
                          std::span<const uint64_t> sample_ids) const;
};

}  // namespace ax::train
