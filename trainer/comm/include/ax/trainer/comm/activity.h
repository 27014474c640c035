// What this process's training thread is doing, kept cheaply so that a rank that stops answering
// can be named with what it was doing instead, and so that each rank can time its waits in
// collectives (docs/reliability.md "Stragglers" and "Stuck ranks").
//
// The training thread sets its phase (data, forward, backward, ...) and step; every communicator
// counts the collectives of its group (the sequence number of each, the same on every member of
// the group) and notes when the training thread enters and leaves one. All of that stays in this
// process: a few atomics and a mutex per call, no store traffic. An ActivityReporter thread
// publishes it to the job's store only when one state (a phase, or a wait in one collective)
// has lasted a while, and the failure path of a collective reads what the missing ranks
// published (comm_failure.cc).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "ax/common/status.h"
#include "ax/trainer/comm/store.h"

namespace ax::train::comm {

enum class Phase : uint8_t {
  kSetup,
  kData,
  kForward,
  kBackward,
  kOptimizer,
  kCheckpoint,
  kEvaluation,
  kLogging,  // the progress line, metrics, the stragglers' gather, the stop agreement
};
// "setup", "data loading", "forward", "backward", "optimizer", "checkpoint", "evaluation",
// "logging".
std::string_view phase_name(Phase phase);

// The calling thread becomes the training thread (whose collectives are timed and reported) and
// is now in `phase`. Cheap: call it at every phase change.
void set_phase(Phase phase);
// The step the training thread is working on (1-based; 0 before the first).
void set_step(int64_t step);

// Seconds the training thread has spent inside collectives that block it (Gloo's, the wait for
// an FSDP prefetch), since the process started. An NCCL collective returns once enqueued: its
// time on the device is Communicator::device_collective_seconds().
double collective_wait_seconds();

// The collectives of one communicator (a group of more than one rank). Sequence numbers count
// every call on the communicator from 1, on whichever thread: the n-th collective of a group is
// the same call on every member.
class GroupActivity {
 public:
  // `prefix` is the group's store prefix ("<tag>/<instance>", the same on every member); `name`
  // its name in messages ("gloo world (ranks 0,1,2,3)").
  static std::shared_ptr<GroupActivity> track(std::string prefix, std::string name);
  ~GroupActivity();
  GroupActivity(const GroupActivity&) = delete;
  GroupActivity& operator=(const GroupActivity&) = delete;

  const std::string& prefix() const { return prefix_; }
  const std::string& name() const { return name_; }
  int64_t entered() const;  // collectives called so far (the last one's sequence number)

 private:
  friend class CollectiveScope;
  GroupActivity(std::string prefix, std::string name);
  const std::string prefix_, name_;
  std::atomic<int64_t> entered_{0};
};

// One collective call, from entry to return: takes the group's next sequence number and, on the
// training thread, records it as what the thread is inside of. `timed`: the call blocks until
// the collective is done (Gloo), so its duration counts as collective wait; NCCL's calls return
// once enqueued (false). `group` may be null (a wait that belongs to no counted group: the
// FSDP prefetch's result).
class CollectiveScope {
 public:
  CollectiveScope(GroupActivity* group, std::string_view op, bool timed = true);
  ~CollectiveScope();
  CollectiveScope(const CollectiveScope&) = delete;
  CollectiveScope& operator=(const CollectiveScope&) = delete;
  int64_t seq() const { return seq_; }  // 0 without a group

 private:
  bool training_thread_ = false;
  bool timed_ = false;
  int64_t seq_ = 0;
  std::chrono::steady_clock::time_point start_;
};

// What a rank last published (ActivityReporter), as the failure path reads it.
struct ActivityRecord {
  std::string phase;           // phase_name()
  int64_t phase_since_ms = 0;  // Unix time in ms (the rank's clock)
  int64_t step = 0;
  // The training thread's last collective: the one it is inside of when `inside`.
  std::string op, group, prefix;
  int64_t seq = 0;
  bool inside = false;
  int64_t op_since_ms = 0;                 // when it entered (inside) or left it
  std::map<std::string, int64_t> entered;  // per group prefix: collectives called so far
  int64_t published_ms = 0;
  int64_t every_ms = 0;  // how often the rank republishes while one state lasts
  // Bumped at every change of phase and every entry to or exit from a collective, and when the
  // latest happened: the current state has lasted since state_since_ms.
  int64_t generation = 0;
  int64_t state_since_ms = 0;
};
std::string format_activity(const ActivityRecord& record);
StatusOr<ActivityRecord> parse_activity(std::string_view text);
// This process's activity now (what the reporter publishes).
ActivityRecord current_activity();
// The store key of a rank's record.
std::string activity_key(int global_rank);

// What a rank that never entered collective `seq` of the group `prefix` (named `op` on this
// rank; seq 0 = unknown) was doing instead, read from its record at Unix time `now_ms`, e.g.
//   "it never entered all_gather #37 of this group (its last there was #36) and has been in
//    data loading for 5.2 s (step 3)"
//   "it has been waiting in reduce_scatter #40 on gloo fsdp[d=0,t=0] (ranks 0,1) for 5.2 s
//    (backward, step 3)"
// A record older than its republish period allows ends "(its last report, 40 s old: ...)".
std::string describe_absence(const ActivityRecord& record, std::string_view op,
                             const std::string& prefix, int64_t seq, int64_t now_ms);

// Unix time in milliseconds.
int64_t unix_ms();

// The timing of the reporter, derived from the collective timeout: it looks at the activity
// every `poll` (timeout / 10, between 50 ms and 1 s), publishes a state that has lasted
// `publish_after` (timeout / 2, between 100 ms and 30 s), again every `publish_after` while it
// lasts, and, once a state outside collectives has lasted the whole timeout, reads the job's
// failure cause at every poll.
struct ReporterTiming {
  Millis poll, publish_after;
  static ReporterTiming for_timeout(Millis timeout);
};

// The background thread of a rank of a multi-rank job that publishes its activity at
// activity_key(rank) (see ReporterTiming) and ends the process when the job has failed while
// this rank is outside collectives (held in data loading, say, or in a long checkpoint): it
// prints "ax-train: the job failed while this rank was in <phase> (<s> s, step N): <cause>"
// ("rank 0 reports this rank, rank 1 (host n1), as the one that stopped answering" when the
// cause is this rank) and exits with kExitCollectiveFailed, as a rank that meets the failure in
// a collective does.
// Store calls are quick (no waits), but they share the store's connection with the training
// thread: a long store wait there (a checkpoint round) delays them.
class ActivityReporter {
 public:
  // `start_thread` false: no thread (tests call round()).
  ActivityReporter(std::shared_ptr<Store> store, int global_rank, Millis timeout,
                   bool start_thread = true);
  ~ActivityReporter();  // stops and joins the thread
  ActivityReporter(const ActivityReporter&) = delete;
  ActivityReporter& operator=(const ActivityReporter&) = delete;
  // One round at Unix time `now_ms` (the thread's body; tests call it directly): publishes when
  // due; returns the failure line when the process should end, else nullopt.
  std::optional<std::string> round(int64_t now_ms);
  int64_t published() const { return published_; }  // records written so far

 private:
  void run();
  std::shared_ptr<Store> store_;
  const int rank_;
  const Millis timeout_;
  const ReporterTiming timing_;
  int64_t last_generation_ = -1;
  int64_t last_publish_ms_ = 0;
  std::atomic<int64_t> published_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace ax::train::comm
