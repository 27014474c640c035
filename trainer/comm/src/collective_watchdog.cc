// The collective watchdog and the failure latch of device communicators (collective_watchdog.h).
#include "collective_watchdog.h"

#include <algorithm>
#include <cstdio>

#include "ax/common/check.h"
#include "ax/common/logging.h"
#include "comm_internal.h"

namespace ax::train::comm::internal {

std::string timeout_cause(Millis timeout) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "timed out after %g s",
                static_cast<double>(timeout.count()) / 1000.0);
  return buf;
}

CollectiveWatchdog::CollectiveWatchdog(Millis timeout, Hooks hooks)
    : timeout_(timeout), hooks_(std::move(hooks)) {}

CollectiveWatchdog::~CollectiveWatchdog() { stop(); }

Millis CollectiveWatchdog::interval_for(Millis timeout) {
  return std::clamp<Millis>(timeout / 100, Millis(1), Millis(100));
}

void CollectiveWatchdog::start(Millis interval, std::function<void()> thread_init) {
  AX_CHECK(!thread_.joinable()) << "watchdog started twice";
  thread_ = std::thread([this, interval, init = std::move(thread_init)] { run(interval, init); });
}

void CollectiveWatchdog::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void CollectiveWatchdog::track(std::string op, std::unique_ptr<TrackedCollective> collective,
                               std::vector<int> peers, int64_t seq) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_) return;  // nothing more to report: the group has failed
    queue_.push_back({std::move(op), std::move(collective), std::move(peers), seq, std::nullopt});
  }
  cv_.notify_all();
}

size_t CollectiveWatchdog::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

bool CollectiveWatchdog::failed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_;
}

bool CollectiveWatchdog::poll(TimePoint now) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_ || queue_.empty()) return false;
  }
  // Outside the lock: the hook takes the communicator's own lock, which a thread in track()
  // may hold.
  Status async = hooks_.async_error ? hooks_.async_error() : Status::Ok();
  std::string op;
  std::vector<int> peers;
  int64_t seq = 0;
  Status cause;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_ || queue_.empty()) return false;
    if (!async.ok()) {
      op = queue_.front().op;
      peers = queue_.front().peers;
      seq = queue_.front().seq;
      cause = async;
    }
    while (cause.ok() && !queue_.empty()) {
      Entry& head = queue_.front();
      StatusOr<DeviceProgress> progress = head.collective->progress();
      if (!progress.ok()) {
        op = head.op;
        peers = head.peers;
        seq = head.seq;
        cause = progress.status();
        break;
      }
      if (*progress == DeviceProgress::kDone) {
        queue_.pop_front();
        continue;
      }
      if (*progress == DeviceProgress::kRunning) {
        if (!head.running_since) head.running_since = now;
        if (now - *head.running_since >= timeout_) {
          op = head.op;
          peers = head.peers;
          seq = head.seq;
          cause = DeadlineExceeded(timeout_cause(timeout_));
        }
      }
      break;  // later collectives wait behind this one on the stream
    }
    if (cause.ok()) return false;
    failed_ = true;
  }
  hooks_.fail(op, peers, cause, seq);
  return true;
}

void CollectiveWatchdog::run(Millis interval, const std::function<void()>& thread_init) {
  if (thread_init) thread_init();
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (failed_ || queue_.empty()) {
      cv_.wait(lock, [&] { return stop_ || (!failed_ && !queue_.empty()); });
      continue;
    }
    lock.unlock();
    poll(std::chrono::steady_clock::now());
    lock.lock();
    cv_.wait_for(lock, interval, [&] { return stop_; });
  }
}

FailureLatch::FailureLatch(std::string group, std::string prefix, std::vector<int> ranks,
                           int group_rank, Millis timeout)
    : group_(std::move(group)),
      prefix_(std::move(prefix)),
      ranks_(std::move(ranks)),
      group_rank_(group_rank),
      timeout_(timeout) {}

Status FailureLatch::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_;
}

Status FailureLatch::record(std::string_view op, const Status& cause, Store& store,
                            const std::vector<int>& peers, int64_t seq) {
  // Held through the alive round: a second thread that fails meanwhile waits and returns the
  // first failure rather than running a round of its own.
  std::lock_guard<std::mutex> lock(mu_);
  if (!failed_.ok()) return failed_;
  failed_ = fail_rank(store, op, group_, prefix_, ranks_, group_rank_,
                      TransportError{cause.code(), cause.message(), seq}, timeout_, peers);
  // The owner reports it (ax-train: one line per rank); the log has it at debug level.
  AX_LOG(kDebug, "comm") << failed_.message();
  return failed_;
}

void handle_async_failure(FailureLatch& latch, std::string_view op, const std::vector<int>& peers,
                          const Status& cause, Store& store,
                          const std::function<void(const Status&)>& on_failure,
                          const std::function<void()>& abort, int64_t seq) {
  Status failure = latch.record(op, cause, store, peers, seq);
  if (on_failure) on_failure(failure);
  abort();
}

}  // namespace ax::train::comm::internal
