#include "ax/datasets/loader/seq2seq_loader.h"

#include <utility>

#include "loader_core.h"

namespace ax::data {
namespace {

Status read_doc(const ShardSet& shards, uint64_t doc, std::vector<uint32_t>* out) {
  const auto [begin, end] = shards.doc_range(doc);
  out->resize(end - begin);
  return shards.read(begin, *out);
}

}  // namespace

class Seq2SeqLoader::Impl {
 public:
  Impl(const OrderOptions& order, const internal::SliceOptions& slice,
       internal::LoaderCore<Seq2SeqBatch>::Fill fill)
      : core(order, slice, std::move(fill)) {}
  internal::LoaderCore<Seq2SeqBatch> core;
};

StatusOr<std::unique_ptr<Seq2SeqLoader>> Seq2SeqLoader::create(
    std::shared_ptr<const ShardSet> shards, const Seq2SeqLoaderOptions& options) {
  if (shards == nullptr) return InvalidArgument("Seq2SeqLoader needs a shard set");
  if (shards->index().kind != ShardKind::kSeq2Seq) {
    return FailedPrecondition(
        "Seq2SeqLoader reads seq2seq shards; this set is for language "
        "modelling (use TokenLoader)");
  }
  if (options.block_examples < 1) return InvalidArgument("block_examples must be at least 1");
  const internal::SliceOptions slice{options.global_batch, options.replica, options.num_replicas,
                                     options.window_blocks, options.prefetch_batches};
  AX_RETURN_IF_ERROR(internal::validate_slicing(slice));
  const uint64_t docs = shards->num_docs();
  if (docs % 2 != 0) {
    return DataLoss("seq2seq set has an odd number of documents (", docs,
                    "); every example is an (inputs, targets) pair");
  }
  if (docs == 0) return InvalidArgument("seq2seq set has no examples");
  OrderOptions order;
  order.num_samples = docs / 2;
  order.seed = options.seed;
  order.block_samples = options.block_examples;
  order.window_blocks = options.window_blocks;
  order.shuffle = options.shuffle;

  auto fill = [shards](std::span<const uint64_t> ids, Seq2SeqBatch* out) {
    out->examples.resize(ids.size());
    for (size_t j = 0; j < ids.size(); ++j) {
      Seq2SeqExample& ex = out->examples[j];
      ex.id = ids[j];
      AX_RETURN_IF_ERROR(read_doc(*shards, 2 * ids[j], &ex.inputs));
      AX_RETURN_IF_ERROR(read_doc(*shards, 2 * ids[j] + 1, &ex.targets));
    }
    return Status::Ok();
  };
  return std::unique_ptr<Seq2SeqLoader>(
      new Seq2SeqLoader(std::make_unique<Impl>(order, slice, std::move(fill))));
}

Seq2SeqLoader::Seq2SeqLoader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Seq2SeqLoader::~Seq2SeqLoader() = default;

Status Seq2SeqLoader::next(Seq2SeqBatch* out) { return impl_->core.next(out); }
LoaderState Seq2SeqLoader::state() const { return impl_->core.state(); }
Status Seq2SeqLoader::restore(const LoaderState& state) { return impl_->core.restore(state); }
uint64_t Seq2SeqLoader::examples_per_epoch() const { return impl_->core.per_epoch(); }

}  // namespace ax::data
