// What TokenLoader and Seq2SeqLoader share: global positions and replica
// slicing over SampleOrder, the (epoch, sample_in_epoch) state, and the
// prefetch thread. A loader supplies only how to read a list of sample ids into
// its batch type. See docs/data-order.md.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "ax/common/status.h"
#include "ax/datasets/loader/sample_order.h"
#include "ax/datasets/loader/token_loader.h"

namespace ax::data::internal {

struct SliceOptions {
  uint64_t global_batch = 0;
  uint64_t replica = 0;
  uint64_t num_replicas = 1;
  uint64_t window_blocks = 1;
  int prefetch_batches = 0;
};

inline Status validate_slicing(const SliceOptions& o) {
  if (o.num_replicas < 1) return InvalidArgument("num_replicas must be at least 1");
  if (o.replica >= o.num_replicas) {
    return InvalidArgument("replica ", o.replica, " is out of range for ", o.num_replicas,
                           " replicas");
  }
  if (o.global_batch < 1) return InvalidArgument("global_batch must be at least 1");
  if (o.global_batch % o.num_replicas != 0) {
    return InvalidArgument("global batch ", o.global_batch, " is not divisible by ", o.num_replicas,
                           " replicas");
  }
  if (o.window_blocks < 1) return InvalidArgument("window_blocks must be at least 1");
  if (o.prefetch_batches < 0) {
    return InvalidArgument("prefetch_batches must be >= 0, got ", o.prefetch_batches);
  }
  return Status::Ok();
}

// Batch needs a `LoaderState state_after` member. Fill reads this replica's
// sample ids, in order, into a batch (it may run on the prefetch thread, never
// on two threads at once).
template <typename Batch>
class LoaderCore {
 public:
  using Fill = std::function<Status(std::span<const uint64_t> ids, Batch* out)>;

  // `slice` must have passed validate_slicing; order.num_samples >= 1.
  LoaderCore(const OrderOptions& order, const SliceOptions& slice, Fill fill)
      : order_(order), slice_(slice), fill_(std::move(fill)) {
    start();
  }
  ~LoaderCore() { stop(); }
  LoaderCore(const LoaderCore&) = delete;
  LoaderCore& operator=(const LoaderCore&) = delete;

  uint64_t per_epoch() const { return order_.num_samples(); }
  LoaderState state() const { return state_at(position_); }

  Status next(Batch* out) {
    if (slice_.prefetch_batches == 0) {
      AX_RETURN_IF_ERROR(produce(position_, out));
      position_ += slice_.global_batch;
      return Status::Ok();
    }
    if (!producer_.joinable()) start();  // after an error: retry from the failed batch
    Item item;
    {
      std::unique_lock<std::mutex> lock(mu_);
      ready_.wait(lock, [&] { return !queue_.empty(); });
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    space_.notify_one();
    if (!item.status.ok()) {
      stop();  // the producer ends after an error
      return item.status;
    }
    *out = std::move(item.batch);
    position_ += slice_.global_batch;
    return Status::Ok();
  }

  Status restore(const LoaderState& state) {
    const uint64_t n = per_epoch();
    if (state.sample_in_epoch >= n) {
      return InvalidArgument("loader state has sample_in_epoch ", state.sample_in_epoch,
                             " but an epoch has ", n, " samples (different data or seq_len?)");
    }
    if (state.epoch > (UINT64_MAX / 2 - state.sample_in_epoch) / n) {
      return InvalidArgument("loader state epoch ", state.epoch, " is out of range");
    }
    stop();
    position_ = state.epoch * n + state.sample_in_epoch;
    start();
    return Status::Ok();
  }

 private:
  struct Item {
    Status status;
    Batch batch;
  };

  LoaderState state_at(uint64_t position) const {
    return LoaderState{position / per_epoch(), position % per_epoch()};
  }

  // The batch of global positions [position, position + global_batch): this
  // replica's slice.
  Status produce(uint64_t position, Batch* out) {
    const uint64_t local = slice_.global_batch / slice_.num_replicas;
    const uint64_t first = position + slice_.replica * local;
    ids_.resize(local);
    for (uint64_t j = 0; j < local; ++j) {
      ids_[j] = order_.at((first + j) / per_epoch(), (first + j) % per_epoch());
    }
    AX_RETURN_IF_ERROR(fill_(ids_, out));
    out->state_after = state_at(position + slice_.global_batch);
    return Status::Ok();
  }

  void start() {
    if (slice_.prefetch_batches == 0) return;
    stopping_ = false;
    producer_ = std::thread([this, position = position_] { run(position); });
  }

  // Joins the producer and drops what it prepared. A producer blocked on a full
  // queue wakes up.
  void stop() {
    if (!producer_.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    space_.notify_all();
    producer_.join();
    queue_.clear();
  }

  void run(uint64_t position) {
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_) return;
      }
      Item item;
      item.status = produce(position, &item.batch);
      const bool failed = !item.status.ok();
      {
        std::unique_lock<std::mutex> lock(mu_);
        space_.wait(lock, [&] {
          return stopping_ || queue_.size() < static_cast<size_t>(slice_.prefetch_batches);
        });
        if (stopping_) return;
        queue_.push_back(std::move(item));
      }
      ready_.notify_one();
      if (failed) return;
      position += slice_.global_batch;
    }
  }

  SampleOrder order_;  // used by one thread at a time: the producer, or next()
                       // without one
  const SliceOptions slice_;
  const Fill fill_;
  std::vector<uint64_t> ids_;
  uint64_t position_ = 0;  // global position after the last batch next() returned

  std::thread producer_;
  std::mutex mu_;
  std::condition_variable ready_;  // queue_ not empty
  std::condition_variable space_;  // queue_ has room, or stopping_
  std::deque<Item> queue_;
  bool stopping_ = false;
};

}  // namespace ax::data::internal
