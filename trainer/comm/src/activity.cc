// The training thread's activity, its record in the job's store and the reporter thread
// (activity.h; docs/reliability.md "Stuck ranks").
#include "ax/trainer/comm/activity.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <vector>

#include "ax/common/logging.h"
#include "ax/common/strings.h"
#include "ax/trainer/comm/communicator.h"
#include "comm_internal.h"

namespace ax::train::comm {
namespace {

using SteadyClock = std::chrono::steady_clock;

// The process's activity. Never destroyed: communicators and threads may use it until _Exit.
struct ActivityState {
  std::atomic<std::thread::id> training{};
  std::atomic<int64_t> wait_ns{0};
  std::mutex mu;
  Phase phase = Phase::kSetup;
  int64_t phase_since_ms = 0;
  int64_t step = 0;
  std::string op, group, prefix;
  int64_t seq = 0;
  bool inside = false;
  int64_t op_since_ms = 0;
  int64_t generation = 0;
  int64_t state_since_ms = 0;
  std::set<const GroupActivity*> groups;
};

ActivityState& activity_state() {
  static auto* s = [] {
    auto* a = new ActivityState();
    a->phase_since_ms = a->state_since_ms = unix_ms();
    return a;
  }();
  return *s;
}

bool on_training_thread() { return activity_state().training.load() == std::this_thread::get_id(); }

// "0.4 s", "5.2 s", "312 s"
std::string activity_seconds(int64_t ms) {
  char buf[32];
  const double s = static_cast<double>(std::max<int64_t>(0, ms)) / 1000.0;
  std::snprintf(buf, sizeof(buf), s < 10 ? "%.1f s" : "%.0f s", s);
  return buf;
}

}  // namespace

std::string_view phase_name(Phase phase) {
  switch (phase) {
    case Phase::kSetup:
      return "setup";
    case Phase::kData:
      return "data loading";
    case Phase::kForward:
      return "forward";
    case Phase::kBackward:
      return "backward";
    case Phase::kOptimizer:
      return "optimizer";
    case Phase::kCheckpoint:
      return "checkpoint";
    case Phase::kEvaluation:
      return "evaluation";
    case Phase::kLogging:
      return "logging";
  }
  return "?";
}

int64_t unix_ms() {
  return std::chrono::duration_cast<Millis>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void set_phase(Phase phase) {
  ActivityState& s = activity_state();
  s.training.store(std::this_thread::get_id());
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.phase == phase) return;
  s.phase = phase;
  s.phase_since_ms = s.state_since_ms = unix_ms();
  ++s.generation;
}

void set_step(int64_t step) {
  ActivityState& s = activity_state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.step = step;
}

double collective_wait_seconds() {
  return static_cast<double>(activity_state().wait_ns.load()) * 1e-9;
}

std::shared_ptr<GroupActivity> GroupActivity::track(std::string prefix, std::string name) {
  std::shared_ptr<GroupActivity> g(new GroupActivity(std::move(prefix), std::move(name)));
  ActivityState& s = activity_state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.groups.insert(g.get());
  return g;
}

GroupActivity::GroupActivity(std::string prefix, std::string name)
    : prefix_(std::move(prefix)), name_(std::move(name)) {}

GroupActivity::~GroupActivity() {
  ActivityState& s = activity_state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.groups.erase(this);
}

int64_t GroupActivity::entered() const { return entered_.load(); }

CollectiveScope::CollectiveScope(GroupActivity* group, std::string_view op, bool timed)
    : training_thread_(on_training_thread()), timed_(timed) {
  if (group != nullptr) seq_ = group->entered_.fetch_add(1) + 1;
  if (!training_thread_) return;
  start_ = SteadyClock::now();
  ActivityState& s = activity_state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.op = std::string(op);
  s.group = group != nullptr ? group->name() : std::string();
  s.prefix = group != nullptr ? group->prefix() : std::string();
  s.seq = seq_;
  s.inside = true;
  s.op_since_ms = s.state_since_ms = unix_ms();
  ++s.generation;
}

CollectiveScope::~CollectiveScope() {
  if (!training_thread_) return;
  ActivityState& s = activity_state();
  if (timed_) {
    s.wait_ns.fetch_add(
        std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now() - start_).count());
  }
  std::lock_guard<std::mutex> lock(s.mu);
  s.inside = false;
  s.op_since_ms = s.state_since_ms = unix_ms();
  ++s.generation;
}

ActivityRecord current_activity() {
  ActivityState& s = activity_state();
  ActivityRecord r;
  std::lock_guard<std::mutex> lock(s.mu);
  r.phase = std::string(phase_name(s.phase));
  r.phase_since_ms = s.phase_since_ms;
  r.step = s.step;
  r.op = s.op;
  r.group = s.group;
  r.prefix = s.prefix;
  r.seq = s.seq;
  r.inside = s.inside;
  r.op_since_ms = s.op_since_ms;
  for (const GroupActivity* g : s.groups) r.entered[g->prefix()] = g->entered();
  r.generation = s.generation;
  r.state_since_ms = s.state_since_ms;
  return r;
}

std::string activity_key(int global_rank) { return str_cat("activity/", global_rank); }

// One "key=value" per line (no value holds a newline: names and tags have none); the count of a
// group as "entered/<prefix>=N".
std::string format_activity(const ActivityRecord& r) {
  std::string out = str_cat(
      "phase=", r.phase, "\nphase_since=", r.phase_since_ms, "\nstep=", r.step, "\nop=", r.op,
      "\ngroup=", r.group, "\nprefix=", r.prefix, "\nseq=", r.seq, "\ninside=", r.inside ? 1 : 0,
      "\nop_since=", r.op_since_ms, "\npublished=", r.published_ms, "\nevery=", r.every_ms,
      "\ngeneration=", r.generation, "\nstate_since=", r.state_since_ms, "\n");
  for (const auto& [prefix, n] : r.entered) out += str_cat("entered/", prefix, "=", n, "\n");
  return out;
}

StatusOr<ActivityRecord> parse_activity(std::string_view text) {
  ActivityRecord r;
  while (!text.empty()) {
    const size_t end = std::min(text.find('\n'), text.size());
    const std::string_view line = text.substr(0, end);
    text.remove_prefix(std::min(end + 1, text.size()));
    if (line.empty()) continue;
    // Group names hold '=' ("gloo fsdp[d=0,t=0] (ranks 0,1)"), and so do group prefixes: a
    // value follows the first '=', a count the last.
    const size_t eq = starts_with(line, "entered/") ? line.rfind('=') : line.find('=');
    if (eq == std::string_view::npos) return DataLoss("activity record: line '", line, "'");
    const std::string key(line.substr(0, eq)), value(line.substr(eq + 1));
    auto number = [&](int64_t* out) -> Status {
      std::optional<int64_t> v = parse_int64(value);
      if (!v) return DataLoss("activity record: ", key, "='", value, "' is not a number");
      *out = *v;
      return Status::Ok();
    };
    int64_t inside = 0;
    if (key == "phase") {
      r.phase = value;
    } else if (key == "op") {
      r.op = value;
    } else if (key == "group") {
      r.group = value;
    } else if (key == "prefix") {
      r.prefix = value;
    } else if (key == "phase_since") {
      AX_RETURN_IF_ERROR(number(&r.phase_since_ms));
    } else if (key == "step") {
      AX_RETURN_IF_ERROR(number(&r.step));
    } else if (key == "seq") {
      AX_RETURN_IF_ERROR(number(&r.seq));
    } else if (key == "inside") {
      AX_RETURN_IF_ERROR(number(&inside));
      r.inside = inside != 0;
    } else if (key == "op_since") {
      AX_RETURN_IF_ERROR(number(&r.op_since_ms));
    } else if (key == "published") {
      AX_RETURN_IF_ERROR(number(&r.published_ms));
    } else if (key == "every") {
      AX_RETURN_IF_ERROR(number(&r.every_ms));
    } else if (key == "generation") {
      AX_RETURN_IF_ERROR(number(&r.generation));
    } else if (key == "state_since") {
      AX_RETURN_IF_ERROR(number(&r.state_since_ms));
    } else if (starts_with(key, "entered/")) {
      AX_RETURN_IF_ERROR(number(&r.entered[key.substr(8)]));
    }  // other keys: a newer writer's; ignored
  }
  return r;
}

std::string describe_absence(const ActivityRecord& r, std::string_view op,
                             const std::string& prefix, int64_t seq, int64_t now_ms) {
  // A live rank republishes every `every` while one state lasts: a record much older than that
  // is from a process that stopped running (SIGSTOP, a hung kernel call) or moved on since.
  const int64_t age = now_ms - r.published_ms;
  const bool stale = r.every_ms > 0 && age > 2 * r.every_ms + 2000;
  const int64_t at = stale ? r.published_ms : now_ms;
  std::string where;
  if (r.inside) {
    where = str_cat("waiting in ", r.op, r.seq > 0 ? str_cat(" #", r.seq) : std::string(),
                    r.group.empty() ? std::string() : str_cat(" on ", r.group), " for ",
                    activity_seconds(at - r.op_since_ms), " (", r.phase, ", step ", r.step, ")");
  } else {
    where = str_cat("in ", r.phase, " for ", activity_seconds(at - r.phase_since_ms), " (step ",
                    r.step, ")");
  }
  std::string entry;
  if (seq > 0) {
    auto it = r.entered.find(prefix);
    const int64_t there = it == r.entered.end() ? 0 : it->second;
    if (there < seq) {
      entry = str_cat("it never entered ", op, " #", seq, " of this group (",
                      there > 0 ? str_cat("its last there was #", there)
                                : std::string("it had entered none of this group's"),
                      ")");
    }
  }
  if (stale) {
    return str_cat(entry.empty() ? "" : entry + "; ", "its last report, ", activity_seconds(age),
                   " old, had it ", where);
  }
  return str_cat(entry.empty() ? "it" : entry + " and", " has been ", where);
}

ReporterTiming ReporterTiming::for_timeout(Millis timeout) {
  return {std::clamp<Millis>(timeout / 10, Millis(50), Millis(1000)),
          std::clamp<Millis>(timeout / 2, Millis(100), Millis(30000))};
}

ActivityReporter::ActivityReporter(std::shared_ptr<Store> store, int global_rank, Millis timeout,
                                   bool start_thread)
    : store_(std::move(store)),
      rank_(global_rank),
      timeout_(timeout),
      timing_(ReporterTiming::for_timeout(timeout)) {
  if (start_thread) thread_ = std::thread([this] { run(); });
}

ActivityReporter::~ActivityReporter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::optional<std::string> ActivityReporter::round(int64_t now_ms) {
  ActivityRecord a = current_activity();
  const int64_t age = now_ms - a.state_since_ms;
  const int64_t after = timing_.publish_after.count();
  if (age >= after && (a.generation != last_generation_ || now_ms - last_publish_ms_ >= after)) {
    a.published_ms = now_ms;
    a.every_ms = after;
    Status s = store_->set(activity_key(rank_), format_activity(a));
    if (!s.ok()) {
      AX_LOG(kDebug, "comm") << "publishing this rank's activity: " << s.message();
    } else {
      ++published_;
    }
    last_generation_ = a.generation;
    last_publish_ms_ = now_ms;
  }
  // Outside collectives for longer than a collective may take: if the job failed meanwhile
  // (the others timed out waiting for this rank), nothing will wake this rank; it ends here.
  if (a.inside || age < timeout_.count()) return std::nullopt;
  StatusOr<std::string> cause = store_->get(internal::kFailureCauseKey, Millis(0));
  if (!cause.ok()) return std::nullopt;
  const size_t bar = cause->find('|');
  if (bar == std::string::npos) return std::nullopt;
  const std::string who = cause->substr(bar + 1), reporter = cause->substr(0, bar);
  const std::string me = str_cat("rank ", rank_);
  const bool names_me = who == me || starts_with(who, me + " (");
  return str_cat("the job failed while this rank was in ", a.phase, " (",
                 activity_seconds(now_ms - a.phase_since_ms), ", step ", a.step, "): ",
                 names_me ? str_cat("rank ", reporter, " reports this rank, ", who,
                                    ", as the one that stopped answering")
                          : str_cat(who, " stopped answering (rank ", reporter, " reports it)"));
}

void ActivityReporter::run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, timing_.poll, [&] { return stop_; });
    if (stop_) return;
    lock.unlock();
    std::optional<std::string> failed = round(unix_ms());
    if (failed) exit_collective_failed(str_cat("ax-train: ", *failed));
    lock.lock();
  }
}

}  // namespace ax::train::comm
