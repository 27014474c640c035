// Seq2seq examples (T5 fine-tuning data: MNLI, SQuAD in text-to-text form) from a kSeq2Seq shard
// set, served with the same global order, replica slicing, state and prefetch as TokenLoader.
// Example i is the document pair (2i inputs, 2i+1 targets), each ending in EOS; truncation and
// packing belong to the model's input pipeline.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ax/common/status.h"
#include "ax/datasets/loader/token_loader.h"

namespace ax::data {

struct Seq2SeqExample {
  uint64_t id = 0;
  std::vector<uint32_t> inputs;
  std::vector<uint32_t> targets;
};

struct Seq2SeqBatch {
  std::vector<Seq2SeqExample> examples;  // global_batch / num_replicas of them
  LoaderState state_after;
};

struct Seq2SeqLoaderOptions {
  uint64_t seed = 1234;
  uint64_t global_batch = 8;
  uint64_t replica = 0;
  uint64_t num_replicas = 1;
  bool shuffle = true;
  uint64_t block_examples = 1024;
  uint64_t window_blocks = 64;
  int prefetch_batches = 4;
};

class Seq2SeqLoader {
 public:
  // FailedPrecondition for an LM shard set.
  static StatusOr<std::unique_ptr<Seq2SeqLoader>> create(std::shared_ptr<const ShardSet> shards,
                                                         const Seq2SeqLoaderOptions& options);
  ~Seq2SeqLoader();
  Status next(Seq2SeqBatch* out);
  LoaderState state() const;
  Status restore(const LoaderState& state);
  uint64_t examples_per_epoch() const;

 private:
  class Impl;
  explicit Seq2SeqLoader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ax::data
