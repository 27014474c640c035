// The global order of samples: a pure function of (number of samples, seed, epoch) and two fixed
// shuffle parameters; never of the number of processes. See docs/data-order.md.
//
// Samples are grouped into blocks of `block_samples` consecutive ids (ids close together live in
// the same compressed frames). Each epoch permutes the blocks, cuts the permuted block list into
// windows of `window_blocks` blocks, and permutes the samples inside each window. A reader then
// touches each frame about once per window instead of once per sample, which keeps random access
// cheap, while any sample can still land anywhere within its window.
#pragma once

#include <cstdint>
#include <vector>

namespace ax::data {

struct OrderOptions {
  uint64_t num_samples = 0;
  uint64_t seed = 0;
  uint64_t block_samples = 1;   // >= 1
  uint64_t window_blocks = 64;  // >= 1
  bool shuffle = true;          // false: identity order (evaluation)
};

class SampleOrder {
 public:
  explicit SampleOrder(const OrderOptions& options);
  // The sample id at position `pos` (0 <= pos < num_samples) of epoch `epoch`.
  uint64_t at(uint64_t epoch, uint64_t pos) const;
  uint64_t num_samples() const { return options_.num_samples; }

 private:
  // Caches the permutation of one window (the last one asked for).
  const std::vector<uint64_t>& window(uint64_t epoch, uint64_t w) const;
  // Makes block_perm_ (and short_window_) those of `epoch`.
  void permute_blocks(uint64_t epoch) const;
  OrderOptions options_;
  uint64_t num_blocks_ = 0;
  mutable uint64_t cached_epoch_ = UINT64_MAX, cached_window_ = UINT64_MAX;
  mutable std::vector<uint64_t> block_perm_;  // of block_perm_epoch_
  mutable uint64_t block_perm_epoch_ = UINT64_MAX;
  mutable uint64_t short_window_ = 0;  // the window holding the short last block, if any
  mutable std::vector<uint64_t> window_samples_;
};

}  // namespace ax::data
