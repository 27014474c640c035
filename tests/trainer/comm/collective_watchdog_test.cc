// The GPU communicators' watchdog and failure record without a GPU: fake collectives whose
// progress the test sets stand in for CUDA events, a function for ncclCommGetAsyncError, an
// in-memory store for the alive round. nccl_communicator_test runs the same code on GPUs.
#include "collective_watchdog.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm_internal.h"
#include "memory_store.h"

namespace ax::train::comm::internal {
namespace {

using std::chrono::milliseconds;
using TimePoint = CollectiveWatchdog::TimePoint;

// A collective whose device progress the test moves along.
struct FakeState {
  std::atomic<DeviceProgress> progress{DeviceProgress::kQueued};
  std::atomic<bool> device_error{false};
  std::atomic<bool> destroyed{false};
};

class FakeCollective : public TrackedCollective {
 public:
  explicit FakeCollective(std::shared_ptr<FakeState> state) : state_(std::move(state)) {}
  ~FakeCollective() override { state_->destroyed = true; }
  StatusOr<DeviceProgress> progress() override {
    if (state_->device_error) return Internal("cudaEventQuery: an illegal memory access");
    return state_->progress.load();
  }

 private:
  std::shared_ptr<FakeState> state_;
};

// Records what the watchdog reports.
struct Reports {
  std::mutex mu;
  std::vector<std::pair<std::string, Status>> fails;
  std::vector<std::vector<int>> peers;  // of each failure
  std::vector<int64_t> seqs;            // of each failure
  Status async_error;
  CollectiveWatchdog::Hooks hooks() {
    return {
        [this] {
          std::lock_guard<std::mutex> lock(mu);
          return async_error;
        },
        [this](const std::string& op, const std::vector<int>& p, const Status& cause, int64_t seq) {
          std::lock_guard<std::mutex> lock(mu);
          fails.push_back({op, cause});
          peers.push_back(p);
          seqs.push_back(seq);
        }};
  }
  size_t count() {
    std::lock_guard<std::mutex> lock(mu);
    return fails.size();
  }
};

std::shared_ptr<FakeState> track(CollectiveWatchdog& dog, const std::string& op,
                                 std::vector<int> peers = {}, int64_t seq = 0) {
  auto state = std::make_shared<FakeState>();
  dog.track(op, std::make_unique<FakeCollective>(state), std::move(peers), seq);
  return state;
}

// The failure names the hung collective's number in its group (activity.h), which the failure
// line compares with what the missing rank published.
TEST(CollectiveWatchdog, AFailureCarriesTheCollectivesSequenceNumber) {
  Reports reports;
  CollectiveWatchdog dog(milliseconds(100), reports.hooks());
  auto first = track(dog, "all_gather", {}, 36);
  auto second = track(dog, "all_gather", {}, 37);
  const TimePoint t0{};
  first->progress = DeviceProgress::kDone;
  second->progress = DeviceProgress::kRunning;
  EXPECT_FALSE(dog.poll(t0));
  EXPECT_TRUE(dog.poll(t0 + milliseconds(100)));
  ASSERT_EQ(reports.count(), 1u);
  EXPECT_EQ(reports.seqs[0], 37);
}

TEST(CollectiveWatchdog, TimeQueuedBehindOtherWorkDoesNotCountOnlyRunningTime) {
  Reports reports;
  CollectiveWatchdog dog(milliseconds(1000), reports.hooks());
  auto ar = track(dog, "all_reduce");
  const TimePoint t0{};
  // Queued for an hour (a long compute kernel before it on the stream): no failure.
  EXPECT_FALSE(dog.poll(t0));
  EXPECT_FALSE(dog.poll(t0 + std::chrono::hours(1)));
  ar->progress = DeviceProgress::kRunning;
  const TimePoint started = t0 + std::chrono::hours(1) + milliseconds(10);
  EXPECT_FALSE(dog.poll(started));  // first seen running: the clock starts here
  EXPECT_FALSE(dog.poll(started + milliseconds(999)));
  EXPECT_TRUE(dog.poll(started + milliseconds(1000)));
  ASSERT_EQ(reports.count(), 1u);
  EXPECT_EQ(reports.fails[0].first, "all_reduce");
  EXPECT_EQ(reports.fails[0].second.code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(reports.fails[0].second.message(), "timed out after 1 s");
  // Reported once; the group is failed for good.
  EXPECT_TRUE(dog.failed());
  EXPECT_FALSE(dog.poll(started + std::chrono::hours(2)));
  EXPECT_EQ(reports.count(), 1u);
}

TEST(CollectiveWatchdog, FinishedCollectivesLeaveAndEachIsTimedFromItsOwnStart) {
  Reports reports;
  CollectiveWatchdog dog(milliseconds(100), reports.hooks());
  auto a = track(dog, "all_gather");
  auto b = track(dog, "reduce_scatter");
  const TimePoint t0{};
  a->progress = DeviceProgress::kRunning;
  EXPECT_FALSE(dog.poll(t0));
  a->progress = DeviceProgress::kDone;
  EXPECT_FALSE(dog.poll(t0 + milliseconds(90)));  // b still queued behind a
  EXPECT_EQ(dog.pending(), 1u);
  EXPECT_TRUE(a->destroyed);  // its events are released once it is done
  b->progress = DeviceProgress::kRunning;
  EXPECT_FALSE(dog.poll(t0 + milliseconds(150)));  // b's clock starts now, not at t0
  EXPECT_FALSE(dog.poll(t0 + milliseconds(249)));
  b->progress = DeviceProgress::kDone;
  EXPECT_FALSE(dog.poll(t0 + milliseconds(400)));
  EXPECT_EQ(dog.pending(), 0u);
  EXPECT_EQ(reports.count(), 0u);
}

TEST(CollectiveWatchdog, AsynchronousErrorFailsTheOldestPendingCollectiveAtOnce) {
  Reports reports;
  CollectiveWatchdog dog(milliseconds(300000), reports.hooks());
  track(dog, "reduce_scatter")->progress = DeviceProgress::kRunning;
  track(dog, "all_reduce");
  EXPECT_FALSE(dog.poll(TimePoint{}));
  reports.async_error = Unavailable("remote process exited or there was a network error");
  EXPECT_TRUE(dog.poll(TimePoint{} + milliseconds(5)));
  ASSERT_EQ(reports.count(), 1u);
  EXPECT_EQ(reports.fails[0].first, "reduce_scatter");
  EXPECT_EQ(reports.fails[0].second.code(), StatusCode::kUnavailable);
}

TEST(CollectiveWatchdog, DeviceErrorFailsAndNothingIsTrackedAfterAFailure) {
  Reports reports;
  CollectiveWatchdog dog(milliseconds(1000), reports.hooks());
  auto a = track(dog, "broadcast");
  a->device_error = true;
  EXPECT_TRUE(dog.poll(TimePoint{}));
  ASSERT_EQ(reports.count(), 1u);
  EXPECT_EQ(reports.fails[0].second.code(), StatusCode::kInternal);
  auto later = track(dog, "all_reduce");
  EXPECT_TRUE(later->destroyed);  // dropped at once: the group already failed
}

// A point-to-point batch is tracked with the group ranks it waits for; a hang hands them on, so
// that the failure looks for those peers only.
TEST(CollectiveWatchdog, HungPointToPointHandsItsPeersToTheFailure) {
  Reports reports;
  CollectiveWatchdog dog(milliseconds(100), reports.hooks());
  auto all_reduce = track(dog, "all_reduce");
  auto recv = track(dog, "recv from rank 7", {2});
  all_reduce->progress = DeviceProgress::kDone;
  recv->progress = DeviceProgress::kRunning;
  const TimePoint t0{};
  EXPECT_FALSE(dog.poll(t0));
  EXPECT_TRUE(dog.poll(t0 + milliseconds(100)));
  ASSERT_EQ(reports.count(), 1u);
  EXPECT_EQ(reports.fails[0].first, "recv from rank 7");
  EXPECT_EQ(reports.peers[0], std::vector<int>{2});
  EXPECT_EQ(reports.fails[0].second.message(), "timed out after 0.1 s");
}

TEST(CollectiveWatchdog, NothingPendingAsksNothing) {
  int asked = 0;
  CollectiveWatchdog dog(milliseconds(10), {[&] {
                                              ++asked;
                                              return Status::Ok();
                                            },
                                            [](const std::string&, const std::vector<int>&,
                                               const Status&, int64_t) {}});
  EXPECT_FALSE(dog.poll(TimePoint{}));
  EXPECT_EQ(asked, 0);
}

TEST(CollectiveWatchdog, ThreadEndsAHungCollectiveWithinTheTimeout) {
  Reports reports;
  CollectiveWatchdog dog(milliseconds(300), reports.hooks());
  std::atomic<int> inits{0};
  dog.start(CollectiveWatchdog::interval_for(milliseconds(300)), [&] { ++inits; });
  auto done = track(dog, "all_gather");
  done->progress = DeviceProgress::kDone;
  const auto t0 = std::chrono::steady_clock::now();
  track(dog, "all_reduce")->progress = DeviceProgress::kRunning;
  while (reports.count() == 0 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10)) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(reports.count(), 1u);
  EXPECT_EQ(reports.fails[0].first, "all_reduce");
  EXPECT_GE(waited, 0.3);
  EXPECT_LT(waited, 3.0);
  dog.stop();
  EXPECT_EQ(inits.load(), 1);  // cudaSetDevice's place: once, on the watchdog's thread
}

TEST(CollectiveWatchdog, IntervalIsAHundredthOfTheTimeoutWithinBounds) {
  EXPECT_EQ(CollectiveWatchdog::interval_for(milliseconds(300000)), milliseconds(100));
  EXPECT_EQ(CollectiveWatchdog::interval_for(milliseconds(2000)), milliseconds(20));
  EXPECT_EQ(CollectiveWatchdog::interval_for(milliseconds(10)), milliseconds(1));
}

// Rank 0 of a group whose rank 1 (global 5) never answers: the latch names it as the job's
// cause, once, for every thread that meets the failure.
TEST(FailureLatch, RecordsTheFirstFailureOnceForEveryThread) {
  MemoryStore store;
  FailureLatch latch("nccl fsdp[d=0,t=0] (ranks 4,5)", "fsdp[d=0,t=0]/0", {4, 5}, 0,
                     milliseconds(200));
  const int id = join_failure_domain(store, 4, {"fsdp[d=0,t=0]/0", 0, nullptr});
  EXPECT_TRUE(latch.status().ok());
  Status a, b;
  std::thread watchdog([&] {
    a = latch.record("all_gather", DeadlineExceeded(timeout_cause(milliseconds(200))), store);
  });
  std::thread caller([&] { b = latch.record("reduce_scatter", Unavailable("aborted"), store); });
  watchdog.join();
  caller.join();
  EXPECT_EQ(a.message(), b.message());
  EXPECT_EQ(latch.status().message(), a.message());
  EXPECT_NE(a.message().find("on nccl fsdp[d=0,t=0] (ranks 4,5) failed: rank 5 stopped answering "
                             "first ("),
            std::string::npos)
      << a.message();
  leave_failure_domain(store, id);
}

// A point-to-point transfer that hangs names its peer only: rank 0 of a pipeline group of three
// waits for rank 1 (global 6) while rank 2 (global 7) is busy elsewhere, as a stage that does
// not take part in this transfer is. A collective's alive round would name both.
TEST(FailureLatch, PointToPointLooksForItsPeersOnly) {
  MemoryStore store;
  FailureLatch latch("nccl pipe (ranks 5,6,7)", "pipe/0", {5, 6, 7}, 0, milliseconds(200));
  const int id = join_failure_domain(store, 5, {"pipe/0", 0, nullptr});
  Status s = latch.record("recv from rank 6", DeadlineExceeded(timeout_cause(milliseconds(200))),
                          store, {1});
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(s.message(),
            "recv from rank 6 on nccl pipe (ranks 5,6,7) failed: rank 6 stopped answering first "
            "(timed out after 0.2 s)");
  leave_failure_domain(store, id);

  MemoryStore collective_store;
  FailureLatch collective("nccl pipe (ranks 5,6,7)", "pipe/0", {5, 6, 7}, 0, milliseconds(200));
  const int cid = join_failure_domain(collective_store, 5, {"pipe/0", 0, nullptr});
  Status c = collective.record("all_reduce", DeadlineExceeded(timeout_cause(milliseconds(200))),
                               collective_store);
  EXPECT_NE(c.message().find("ranks 6,7 stopped answering first"), std::string::npos)
      << c.message();
  leave_failure_domain(collective_store, cid);
}

// The rank's other groups are closed while the failure is recorded; this group is aborted last.
TEST(HandleAsyncFailure, RecordsThenHandsToThePolicyThenAborts) {
  MemoryStore store;
  FailureLatch latch("nccl world (ranks 0,1)", "world/0", {0, 1}, 0, milliseconds(100));
  std::vector<std::string> steps;
  const int own = join_failure_domain(store, 0, {"world/0", 0, [&] { steps.push_back("close"); }});
  const int other =
      join_failure_domain(store, 0, {"fsdp[d=0]/0", 0, [&] { steps.push_back("close fsdp"); }});
  auto policy = [&](const Status& s) {
    steps.push_back("policy: " + s.message());
    EXPECT_EQ(latch.status().message(), s.message());  // already recorded for other callers
  };
  handle_async_failure(latch, "all_reduce", {}, DeadlineExceeded(timeout_cause(milliseconds(100))),
                       store, policy, [&] { steps.push_back("abort"); });
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(steps[0], "close fsdp");
  EXPECT_EQ(steps[1],
            "policy: all_reduce on nccl world (ranks 0,1) failed: rank 1 stopped answering first "
            "(timed out after 0.1 s)");
  EXPECT_EQ(steps[2], "abort");
  leave_failure_domain(store, own);
  leave_failure_domain(store, other);

  // Without a policy the communicator is still aborted, so that the stream moves on.
  MemoryStore quiet_store;
  FailureLatch quiet("nccl world (ranks 0,1)", "world/1", {0, 1}, 0, milliseconds(50));
  const int id = join_failure_domain(quiet_store, 0, {"world/1", 0, nullptr});
  int aborts = 0;
  handle_async_failure(quiet, "barrier", {}, Unavailable("x"), quiet_store, nullptr,
                       [&] { ++aborts; });
  EXPECT_EQ(aborts, 1);
  EXPECT_FALSE(quiet.status().ok());
  leave_failure_domain(quiet_store, id);
}

}  // namespace
}  // namespace ax::train::comm::internal
