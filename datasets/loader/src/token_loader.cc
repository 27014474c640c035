#include "ax/datasets/loader/token_loader.h"

#include <algorithm>
#include <utility>

#include "loader_core.h"

namespace ax::data {

class TokenLoader::Impl {
 public:
  Impl(const OrderOptions& order, const internal::SliceOptions& slice,
       internal::LoaderCore<TokenBatch>::Fill fill)
      : core(order, slice, std::move(fill)) {}
  internal::LoaderCore<TokenBatch> core;
};

StatusOr<std::unique_ptr<TokenLoader>> TokenLoader::create(std::shared_ptr<const ShardSet> shards,
                                                           const LoaderOptions& options) {
  if (shards == nullptr) return InvalidArgument("TokenLoader needs a shard set");
  if (shards->index().kind != ShardKind::kLm) {
    return FailedPrecondition(
        "TokenLoader reads language-modelling shards; this set is seq2seq "
        "(use Seq2SeqLoader)");
  }
  if (options.seq_len < 1) return InvalidArgument("seq_len must be at least 1");
  const internal::SliceOptions slice{options.global_batch, options.replica, options.num_replicas,
                                     options.window_blocks, options.prefetch_batches};
  AX_RETURN_IF_ERROR(internal::validate_slicing(slice));
  const uint64_t seq_len = options.seq_len;
  const uint64_t num_tokens = shards->num_tokens();
  const uint64_t windows = num_tokens == 0 ? 0 : (num_tokens - 1) / seq_len;
  if (windows == 0) {
    return InvalidArgument("dataset has ", num_tokens,
                           " tokens, fewer than one window of seq_len+1 (", seq_len + 1, ")");
  }
  OrderOptions order;
  order.num_samples = windows;
  order.seed = options.seed;
  // A block of windows covers about one compressed frame, so a shuffle window
  // touches about window_blocks frames.
  const uint64_t frame_tokens = shards->index().frame_tokens;
  order.block_samples = std::max<uint64_t>(1, (frame_tokens + seq_len - 1) / seq_len);
  order.window_blocks = options.window_blocks;
  order.shuffle = options.shuffle;

  auto fill = [shards, seq_len](std::span<const uint64_t> ids, TokenBatch* out) {
    out->batch = ids.size();
    out->seq_len = seq_len;
    out->tokens.resize(ids.size() * (seq_len + 1));
    out->sample_ids.assign(ids.begin(), ids.end());
    for (size_t j = 0; j < ids.size(); ++j) {
      std::span<uint32_t> row(out->tokens.data() + j * (seq_len + 1), seq_len + 1);
      AX_RETURN_IF_ERROR(shards->read(ids[j] * seq_len, row));
    }
    return Status::Ok();
  };
  return std::unique_ptr<TokenLoader>(
      new TokenLoader(std::make_unique<Impl>(order, slice, std::move(fill))));
}

TokenLoader::TokenLoader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TokenLoader::~TokenLoader() = default;

Status TokenLoader::next(TokenBatch* out) { return impl_->core.next(out); }
LoaderState TokenLoader::state() const { return impl_->core.state(); }
Status TokenLoader::restore(const LoaderState& state) { return impl_->core.restore(state); }
uint64_t TokenLoader::samples_per_epoch() const { return impl_->core.per_epoch(); }

}  // namespace ax::data
