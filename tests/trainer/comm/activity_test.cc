// What a rank publishes about itself and how a failed collective reads it (activity.h,
// docs/reliability.md "Stuck ranks"): the training thread's phase and collectives, their sequence
// numbers, the record's text, the reporter's timing, the line of a rank that never entered a
// collective, and the exit of a rank held outside collectives once the job has failed. An
// in-memory store stands in for the job's; the multi-rank runs are in
// tests/trainer/train/reliability_test.cc.
#include "ax/trainer/comm/activity.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "comm_internal.h"
#include "memory_store.h"

namespace ax::train::comm {
namespace {

using std::chrono::milliseconds;

TEST(Activity, TheTrainingThreadsCollectivesAreRecordedCountedAndTimed) {
  set_phase(Phase::kForward);
  set_step(7);
  auto group = GroupActivity::track("fsdp[d=0,t=0]/0", "gloo fsdp[d=0,t=0] (ranks 0,1)");
  const double waited = collective_wait_seconds();
  {
    CollectiveScope scope(group.get(), "all_gather");
    EXPECT_EQ(scope.seq(), 1);
    const ActivityRecord a = current_activity();
    EXPECT_TRUE(a.inside);
    EXPECT_EQ(a.op, "all_gather");
    EXPECT_EQ(a.seq, 1);
    EXPECT_EQ(a.group, "gloo fsdp[d=0,t=0] (ranks 0,1)");
    EXPECT_EQ(a.prefix, "fsdp[d=0,t=0]/0");
    EXPECT_EQ(a.phase, "forward");
    EXPECT_EQ(a.step, 7);
    std::this_thread::sleep_for(milliseconds(30));
  }
  EXPECT_GE(collective_wait_seconds() - waited, 0.029);
  ActivityRecord a = current_activity();
  EXPECT_FALSE(a.inside);
  EXPECT_EQ(a.entered.at("fsdp[d=0,t=0]/0"), 1);

  // Another thread (Gloo's FSDP prefetch): its calls take sequence numbers, nothing else.
  std::thread([&] {
    CollectiveScope scope(group.get(), "reduce_scatter");
    EXPECT_EQ(scope.seq(), 2);
  }).join();
  a = current_activity();
  EXPECT_EQ(a.op, "all_gather");
  EXPECT_EQ(a.entered.at("fsdp[d=0,t=0]/0"), 2);
  EXPECT_EQ(group->entered(), 2);

  // An NCCL call only enqueues: recorded, not timed as a wait.
  const double before = collective_wait_seconds();
  {
    CollectiveScope scope(group.get(), "all_reduce", /*timed=*/false);
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_LT(collective_wait_seconds() - before, 0.005);
  EXPECT_EQ(current_activity().seq, 3);

  // A phase change is a new state; the same phase again is not.
  const int64_t generation = current_activity().generation;
  set_phase(Phase::kForward);
  EXPECT_EQ(current_activity().generation, generation);
  set_phase(Phase::kData);
  EXPECT_EQ(current_activity().generation, generation + 1);
  EXPECT_EQ(current_activity().phase, "data loading");

  group.reset();  // a destroyed communicator leaves the record
  EXPECT_EQ(current_activity().entered.count("fsdp[d=0,t=0]/0"), 0u);
}

ActivityRecord example_record(int64_t now) {
  ActivityRecord r;
  r.phase = "data loading";
  r.phase_since_ms = now - 5200;
  r.step = 3;
  r.op = "all_reduce";
  r.group = "gloo world (ranks 0,1,2,3)";
  r.prefix = "world/0";
  r.seq = 11;
  r.inside = false;
  r.op_since_ms = now - 5300;
  r.entered = {{"world/0", 11}, {"fsdp[d=0,t=0]/0", 36}};
  r.published_ms = now - 200;
  r.every_ms = 1000;
  r.generation = 1234;
  r.state_since_ms = now - 5200;
  return r;
}

TEST(Activity, RecordsRoundTripThroughTheirText) {
  const ActivityRecord r = example_record(1'800'000'000'000);
  StatusOr<ActivityRecord> back = parse_activity(format_activity(r));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(format_activity(*back), format_activity(r));
  EXPECT_EQ(back->entered.at("fsdp[d=0,t=0]/0"), 36);
  EXPECT_EQ(back->group, "gloo world (ranks 0,1,2,3)");
  EXPECT_FALSE(parse_activity("phase=data\nstep=three\n").ok());
  EXPECT_FALSE(parse_activity("no equals sign\n").ok());
  EXPECT_TRUE(parse_activity("phase=data\nsomething_newer=1\n").ok());
}

TEST(Activity, DescribesWhatAMissingRankDidInstead) {
  const int64_t now = 1'800'000'000'000;
  ActivityRecord r = example_record(now);
  // It never entered the 37th all_gather of the fsdp group: it is loading data.
  EXPECT_EQ(describe_absence(r, "all_gather", "fsdp[d=0,t=0]/0", 37, now),
            "it never entered all_gather #37 of this group (its last there was #36) and has "
            "been in data loading for 5.2 s (step 3)");
  EXPECT_EQ(describe_absence(r, "all_gather", "tensor[d=0,f=0]/0", 1, now),
            "it never entered all_gather #1 of this group (it had entered none of this group's) "
            "and has been in data loading for 5.2 s (step 3)");
  // Unknown sequence number (or one it has reached): what it does, nothing more.
  EXPECT_EQ(describe_absence(r, "all_gather", "fsdp[d=0,t=0]/0", 0, now),
            "it has been in data loading for 5.2 s (step 3)");
  // Waiting in another group's collective.
  r.inside = true;
  r.op = "reduce_scatter";
  r.seq = 40;
  r.group = "gloo fsdp[d=0,t=0] (ranks 0,1)";
  r.phase = "backward";
  r.op_since_ms = now - 12000;
  EXPECT_EQ(describe_absence(r, "all_reduce", "world/0", 12, now),
            "it never entered all_reduce #12 of this group (its last there was #11) and has been "
            "waiting in reduce_scatter #40 on gloo fsdp[d=0,t=0] (ranks 0,1) for 12 s "
            "(backward, step 3)");
  // A record much older than its republish period: the process stopped reporting (SIGSTOP).
  r.published_ms = now - 40000;
  r.op_since_ms = now - 52000;
  EXPECT_EQ(describe_absence(r, "all_reduce", "world/0", 12, now),
            "it never entered all_reduce #12 of this group (its last there was #11); its last "
            "report, 40 s old, had it waiting in reduce_scatter #40 on gloo fsdp[d=0,t=0] "
            "(ranks 0,1) for 12 s (backward, step 3)");
}

TEST(ActivityReporter, PublishesOnlyAStateThatLastsAndRepublishesWhileItDoes) {
  auto store = std::make_shared<MemoryStore>();
  const ReporterTiming timing = ReporterTiming::for_timeout(milliseconds(2000));
  EXPECT_EQ(timing.poll, milliseconds(200));
  EXPECT_EQ(timing.publish_after, milliseconds(1000));
  EXPECT_EQ(ReporterTiming::for_timeout(milliseconds(300000)).poll, milliseconds(1000));
  EXPECT_EQ(ReporterTiming::for_timeout(milliseconds(300000)).publish_after, milliseconds(30000));
  EXPECT_EQ(ReporterTiming::for_timeout(milliseconds(100)).poll, milliseconds(50));

  ActivityReporter reporter(store, 5, milliseconds(2000), /*start_thread=*/false);
  set_phase(Phase::kOptimizer);
  set_step(2);
  set_phase(Phase::kData);
  set_step(3);
  const int64_t t0 = current_activity().state_since_ms;
  EXPECT_FALSE(reporter.round(t0 + 500));  // a short state: nothing
  EXPECT_EQ(reporter.published(), 0);
  EXPECT_FALSE(store->get(activity_key(5), milliseconds(0)).ok());
  EXPECT_FALSE(reporter.round(t0 + 1000));
  EXPECT_EQ(reporter.published(), 1);
  StatusOr<std::string> text = store->get(activity_key(5), milliseconds(0));
  ASSERT_TRUE(text.ok());
  StatusOr<ActivityRecord> record = parse_activity(*text);
  ASSERT_TRUE(record.ok());
  EXPECT_EQ(record->phase, "data loading");
  EXPECT_EQ(record->step, 3);
  EXPECT_EQ(record->published_ms, t0 + 1000);
  EXPECT_EQ(record->every_ms, 1000);
  reporter.round(t0 + 1500);  // the same state, within the period
  EXPECT_EQ(reporter.published(), 1);
  reporter.round(t0 + 2000);  // a period later: again, so a reader sees it is still there
  EXPECT_EQ(reporter.published(), 2);

  // Held outside collectives for the whole timeout when the job has failed: the rank ends,
  // saying so; not before the timeout, and not without a cause.
  EXPECT_FALSE(reporter.round(t0 + 2100));
  ASSERT_TRUE(store->set(internal::kFailureCauseKey, "0|rank 5 (host n2)").ok());
  EXPECT_FALSE(reporter.round(t0 + 1900));
  std::optional<std::string> line = reporter.round(t0 + 2200);
  ASSERT_TRUE(line.has_value());
  EXPECT_EQ(*line,
            "the job failed while this rank was in data loading (2.2 s, step 3): rank 0 reports "
            "this rank, rank 5 (host n2), as the one that stopped answering");
  // Another rank (rank 55 is not rank 5) held outside collectives as long.
  ActivityReporter other(store, 55, milliseconds(2000), /*start_thread=*/false);
  line = other.round(t0 + 2200);
  ASSERT_TRUE(line.has_value());
  EXPECT_EQ(*line,
            "the job failed while this rank was in data loading (2.2 s, step 3): rank 5 (host "
            "n2) stopped answering (rank 0 reports it)");
}

TEST(ActivityFailure, TheClaimingRankSaysWhatTheMissingRankWasDoing) {
  MemoryStore store;
  const int64_t now = unix_ms();
  ActivityRecord r = example_record(now);
  r.published_ms = now;
  ASSERT_TRUE(store.set(activity_key(1), format_activity(r)).ok());
  // Rank 0 timed out in the fsdp group's 37th all_gather; rank 1 never sets its alive key.
  Status s = internal::fail_rank(
      store, "all_gather", "gloo fsdp[d=0,t=0] (ranks 0,1)", "fsdp[d=0,t=0]/0", {0, 1}, 0,
      internal::TransportError{StatusCode::kDeadlineExceeded, "timed out after 0.2 s", 37},
      milliseconds(200));
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
  const std::string head =
      "all_gather on gloo fsdp[d=0,t=0] (ranks 0,1) failed: rank 1 stopped answering first "
      "(timed out after 0.2 s): it never entered all_gather #37 of this group (its last there "
      "was #36) and has been in data loading for ";
  EXPECT_EQ(s.message().substr(0, head.size()), head) << s.message();
  EXPECT_NE(s.message().find(" s (step 3)"), std::string::npos) << s.message();

  // Without a record (a rank that never published one), the line is as it always was.
  MemoryStore bare;
  s = internal::fail_rank(
      bare, "all_gather", "gloo fsdp[d=0,t=0] (ranks 0,1)", "fsdp[d=0,t=0]/0", {0, 1}, 0,
      internal::TransportError{StatusCode::kDeadlineExceeded, "timed out after 0.2 s", 37},
      milliseconds(200));
  EXPECT_EQ(s.message(),
            "all_gather on gloo fsdp[d=0,t=0] (ranks 0,1) failed: rank 1 stopped answering first "
            "(timed out after 0.2 s)");
}

}  // namespace
}  // namespace ax::train::comm
