// The generator, seeding and shuffles are specified exactly (docs/data-order.md) so that the order
// is the same with every compiler and standard library: SplitMix64, Lemire's bounded draw with
// rejection, Fisher-Yates from the top. std::shuffle and the <random> distributions are
// implementation-defined and are not used.
#include "ax/datasets/loader/sample_order.h"

#include <algorithm>
#include <utility>

#include "ax/common/check.h"
#include "ax/common/rng.h"

namespace ax::data {
namespace {

// Keep the block and window permutations independent for equal (seed, epoch, index).
constexpr uint64_t kBlockStream = 0x626C6F636B730000ull;   // "blocks"
constexpr uint64_t kWindowStream = 0x77696E646F770000ull;  // "window"

uint64_t stream_seed(uint64_t seed, uint64_t stream, uint64_t epoch, uint64_t index) {
  return mix64(mix64(mix64(mix64(seed) ^ stream) ^ epoch) ^ index);
}

void fisher_yates(std::vector<uint64_t>& v, SplitMix64 rng) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[rng.below(i)]);
}

}  // namespace

SampleOrder::SampleOrder(const OrderOptions& options) : options_(options) {
  AX_CHECK_GE(options_.block_samples, 1u);
  AX_CHECK_GE(options_.window_blocks, 1u);
  num_blocks_ = (options_.num_samples + options_.block_samples - 1) / options_.block_samples;
}

uint64_t SampleOrder::at(uint64_t epoch, uint64_t pos) const {
  AX_CHECK_LT(pos, options_.num_samples);
  if (!options_.shuffle) return pos;
  const uint64_t span = options_.block_samples * options_.window_blocks;  // a full window
  // Only the last block may be short, by `deficit` samples; it shortens the window it lands in,
  // so every later window starts `deficit` positions earlier.
  const uint64_t deficit = num_blocks_ * options_.block_samples - options_.num_samples;
  uint64_t w = pos / span;
  uint64_t start = w * span;
  if (deficit > 0) {
    permute_blocks(epoch);
    if (pos + deficit >= (short_window_ + 1) * span) {
      w = (pos + deficit) / span;
      start = w * span - deficit;
    }
  }
  return window(epoch, w)[pos - start];
}

const std::vector<uint64_t>& SampleOrder::window(uint64_t epoch, uint64_t w) const {
  if (epoch == cached_epoch_ && w == cached_window_) return window_samples_;
  permute_blocks(epoch);
  const uint64_t first = w * options_.window_blocks;
  const uint64_t end = std::min(num_blocks_, first + options_.window_blocks);
  AX_CHECK_LT(first, end);
  window_samples_.clear();
  for (uint64_t i = first; i < end; ++i) {
    const uint64_t begin = block_perm_[i] * options_.block_samples;
    const uint64_t stop = std::min(options_.num_samples, begin + options_.block_samples);
    for (uint64_t id = begin; id < stop; ++id) window_samples_.push_back(id);
  }
  fisher_yates(window_samples_, SplitMix64(stream_seed(options_.seed, kWindowStream, epoch, w)));
  cached_epoch_ = epoch;
  cached_window_ = w;
  return window_samples_;
}

void SampleOrder::permute_blocks(uint64_t epoch) const {
  if (epoch == block_perm_epoch_) return;
  block_perm_.resize(num_blocks_);
  for (uint64_t b = 0; b < num_blocks_; ++b) block_perm_[b] = b;
  fisher_yates(block_perm_, SplitMix64(stream_seed(options_.seed, kBlockStream, epoch, 0)));
  const auto last = std::find(block_perm_.begin(), block_perm_.end(), num_blocks_ - 1);
  short_window_ = static_cast<uint64_t>(last - block_perm_.begin()) / options_.window_blocks;
  block_perm_epoch_ = epoch;
}

}  // namespace ax::data
