// ax-data inspect's printer (to stdout): a shard set's counts from its index.json, its first
// documents decoded, and the first windows of its token stream span-corrupted as T5 sees them.
#pragma once

#include <cstdint>
#include <string>

#include "ax/common/status.h"
#include "ax/datasets/shards/dataset_index.h"
#include "ax/datasets/shards/shard_reader.h"
#include "ax/datasets/text/tokenizer.h"

namespace ax::data {

// The counts of index.json `idx` of the set in `dir`: kind, tokenizer, shards, documents, tokens,
// bytes, skipped documents, inputs and sets.
void print_counts(const std::string& dir, const DatasetIndex& idx);

// The first `samples` documents (of a seq2seq set: (inputs, targets) pairs) decoded with `tok`.
Status print_samples(const ShardSet& set, const Tokenizer& tok, uint64_t samples);

// The first `samples` training examples of T5 pretraining with this encoder length and seed:
// windows of the token stream span-corrupted, inputs and targets decoded.
Status print_span_corruption(const ShardSet& set, const Tokenizer& tok, uint64_t samples,
                             int64_t encoder_length, uint64_t seed);

}  // namespace ax::data
