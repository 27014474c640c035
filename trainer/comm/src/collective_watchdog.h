// The watchdog of a communicator whose collectives are enqueued on a device stream (NCCL) and
// the record of its first failure. Transport-free: the NCCL communicator gives it CUDA events and
// ncclCommGetAsyncError; the CPU tests give it fakes (docs/comm.md "NCCL: hangs and the
// watchdog").
//
// On a GPU the host does not wait in the collective call (it returns once NCCL has enqueued the
// kernel) but later, in whatever waits for the stream (the backend's copy_to_host, synchronize,
// sum_squares): a peer that never arrives leaves that wait blocked forever. The watchdog bounds
// it: it follows each enqueued collective from the moment the stream reaches it, and when one runs
// longer than the timeout, or NCCL reports an asynchronous error, it hands the failure to the
// communicator, which names the missing ranks and ends the process (or aborts the communicator,
// which lets the stream move on).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "ax/common/status.h"
#include "ax/trainer/comm/store.h"

namespace ax::train::comm::internal {

// Where an enqueued collective stands on the device.
enum class DeviceProgress : uint8_t {
  kQueued,   // the stream has not reached it (earlier work, or an event it waits for)
  kRunning,  // started (its start marker passed), not finished
  kDone,
};

// The device side of one enqueued collective: CUDA events recorded on its stream just before and
// just after the NCCL call (nccl_communicator.cc), fakes in the tests.
class TrackedCollective {
 public:
  virtual ~TrackedCollective() = default;
  // An error: the device failed (cudaEventQuery returned neither success nor not-ready).
  virtual StatusOr<DeviceProgress> progress() = 0;
};

// "timed out after 30 s": the cause a hung collective is reported with (Gloo's words).
std::string timeout_cause(Millis timeout);

class CollectiveWatchdog {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  struct Hooks {
    // ncclCommGetAsyncError: Ok while the communicator is healthy.
    std::function<Status()> async_error;
    // Called once, with the collective that failed or hung, its peers and sequence number
    // (track) and the cause; the watchdog stops watching afterwards. Called from the watchdog's
    // thread (or poll()'s caller).
    std::function<void(const std::string& op, const std::vector<int>& peers, const Status& cause,
                       int64_t seq)>
        fail;
  };

  // Collectives of a group that run longer than `timeout` fail. No thread until start().
  CollectiveWatchdog(Millis timeout, Hooks hooks);
  ~CollectiveWatchdog();  // stop()
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  // A thread that calls poll() every `interval` while collectives are pending and sleeps
  // otherwise; `thread_init` runs first on it (cudaSetDevice).
  void start(Millis interval, std::function<void()> thread_init);
  // Joins the thread (after a fail hook in progress has returned). Idempotent.
  void stop();

  // Follows `collective` (named `op` in a failure) until it is done. Collectives of one
  // watchdog must run in the order they are tracked (one stream). `peers`: the group ranks a
  // point-to-point transfer waits for, handed to the fail hook (empty for a collective); `seq`:
  // the call's number in its group (activity.h), 0 when unknown.
  void track(std::string op, std::unique_ptr<TrackedCollective> collective,
             std::vector<int> peers = {}, int64_t seq = 0);

  // One round at `now`: asks for the asynchronous error, drops the finished collectives at the
  // head of the queue and times the oldest unfinished one from the first round that saw it
  // running (time spent queued behind other work does not count). Calls the fail hook and
  // returns true on an error or timeout.
  bool poll(TimePoint now);

  size_t pending() const;
  bool failed() const;
  // The poll interval the communicators use: a hundredth of the timeout, between 1 ms and 100 ms.
  static Millis interval_for(Millis timeout);

 private:
  struct Entry {
    std::string op;
    std::unique_ptr<TrackedCollective> collective;
    std::vector<int> peers;
    int64_t seq = 0;
    std::optional<TimePoint> running_since;
  };
  void run(Millis interval, const std::function<void()>& thread_init);

  const Millis timeout_;
  const Hooks hooks_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Entry> queue_;
  bool failed_ = false;
  bool stop_ = false;
  std::thread thread_;
};

// A communicator's first failure, recorded once whichever thread meets it first (the caller's
// or the watchdog's); every later call returns the same Status.
class FailureLatch {
 public:
  // `prefix` is the group's store prefix ("<tag>/<instance>"); `ranks` its global ranks.
  FailureLatch(std::string group, std::string prefix, std::vector<int> ranks, int group_rank,
               Millis timeout);
  Status status() const;  // Ok until a failure is recorded
  // Records the failure of `op` unless one is recorded already (then returns that one): the
  // rank's failure (fail_rank on `store`: the rank's other groups closed, the culprit named once
  // for the job), which this group's owner must join (join_failure_domain) for as long as it
  // lives. Callers that meet the failure while another thread records it wait for that record.
  // `peers`: the group ranks a point-to-point transfer waited for (fail_rank); `seq` the call's
  // number in the group (0: unknown).
  Status record(std::string_view op, const Status& cause, Store& store,
                const std::vector<int>& peers = {}, int64_t seq = 0);

 private:
  const std::string group_, prefix_;
  const std::vector<int> ranks_;
  const int group_rank_;
  const Millis timeout_;
  mutable std::mutex mu_;
  Status failed_;
};

// What a communicator does when its watchdog reports a collective that failed or hung, in this
// order: record the failure (the culprit is named while this rank's stream is still blocked, so
// nothing computes on a half-done collective meanwhile), hand it to the owner's policy
// (`on_failure`, may end the process: ax-train exits naming the group and the missing ranks),
// then `abort` the communicator, which ends its kernels so that whatever waits for the stream
// moves on and sees the failure at its next call.
void handle_async_failure(FailureLatch& latch, std::string_view op, const std::vector<int>& peers,
                          const Status& cause, Store& store,
                          const std::function<void(const Status&)>& on_failure,
                          const std::function<void()>& abort, int64_t seq = 0);

}  // namespace ax::train::comm::internal
