// The training input: fixed windows of seq_len + 1 tokens cut from the concatenated token stream
// of a shard set (documents joined Megatron-style, each ending in EOS; consecutive windows share
// one boundary token, so window i is tokens [i*seq_len, i*seq_len + seq_len + 1)).
//
// The order is SampleOrder's global order. Global position P (counted over epochs from 0) belongs
// to global batch P / global_batch; data-parallel replica r of R takes positions
// [k*G + r*G/R, k*G + (r+1)*G/R) of batch k. The whole state is (epoch, sample_in_epoch), both
// global, so a run restored on another R with the same global batch continues exactly.
// A background thread prepares the next batches.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ax/common/status.h"
#include "ax/datasets/loader/sample_order.h"
#include "ax/datasets/shards/shard_reader.h"

namespace ax::data {

struct LoaderOptions {
  uint64_t seq_len = 1024;
  uint64_t seed = 1234;
  uint64_t global_batch = 8;  // samples per global batch (all replicas)
  uint64_t replica = 0;       // this data-parallel replica, in [0, num_replicas)
  uint64_t num_replicas = 1;  // must divide global_batch
  bool shuffle = true;        // false: storage order (evaluation)
  uint64_t window_blocks = 64;
  int prefetch_batches = 4;  // 0 = read synchronously in next()
};

struct LoaderState {
  uint64_t epoch = 0;
  uint64_t sample_in_epoch = 0;  // global samples consumed in this epoch
  bool operator==(const LoaderState&) const = default;
};

struct TokenBatch {
  uint64_t batch = 0;  // samples in this replica's slice (global_batch / num_replicas)
  uint64_t seq_len = 0;
  std::vector<uint32_t> tokens;      // (batch, seq_len + 1)
  std::vector<uint64_t> sample_ids;  // (batch), which windows these are
  LoaderState state_after;           // the state once this batch is consumed
};

class TokenLoader {
 public:
  // Fails with InvalidArgument for a set too small for one window, a replica out of range or a
  // global batch that the replicas do not divide; FailedPrecondition for a seq2seq set.
  // ShardSet's default cache holds a window of the default window_blocks (each frame is then
  // decompressed about once per window); any cache size gives the same batches.
  static StatusOr<std::unique_ptr<TokenLoader>> create(std::shared_ptr<const ShardSet> shards,
                                                       const LoaderOptions& options);
  ~TokenLoader();

  Status next(TokenBatch* out);
  // The state after the last batch next() returned (the initial state before the first).
  LoaderState state() const;
  // Continues from a state saved by any loader over the same data, seed and seq_len.
  Status restore(const LoaderState& state);
  uint64_t samples_per_epoch() const;

 private:
  class Impl;
  explicit TokenLoader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ax::data
