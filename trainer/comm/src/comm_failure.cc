// Group names, argument checks and the naming of missing ranks after a failed collective: the
// alive round of a group, the failure domain of a rank's groups and the job-wide agreement on the
// first failure (docs/comm.md "Timeouts and failures").
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>

#include "ax/common/logging.h"
#include "ax/trainer/comm/activity.h"
#include "comm_internal.h"

namespace ax::train::comm::internal {
namespace {

std::string seconds(Millis t) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g s", static_cast<double>(t.count()) / 1000.0);
  return buf;
}

bool dtype_ok(const Tensor& t, bool allow_bf16) {
  return t.dtype == DType::kF32 || (allow_bf16 && t.dtype == DType::kBF16);
}

Status check_dtype(std::string_view op, const std::string& group, const Tensor& t,
                   bool allow_bf16) {
  if (!dtype_ok(t, allow_bf16)) {
    return InvalidArgument(op, " on ", group, ": tensor ", t.shape_string(), " has dtype ",
                           dtype_name(t.dtype), "; this backend takes f32",
                           allow_bf16 ? " or bf16" : "");
  }
  if (t.numel() > 0 && t.empty()) {
    return InvalidArgument(op, " on ", group, ": tensor ", t.shape_string(), " has no data");
  }
  return Status::Ok();
}

}  // namespace

std::string joined(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (const std::string& item : items) out += str_cat(out.empty() ? "" : sep, item);
  return out;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? "," : "") + std::to_string(ranks[i]);
  return s;
}

std::string group_name(std::string_view backend, const std::string& tag,
                       const std::vector<int>& ranks) {
  return str_cat(backend, " ", tag, " (ranks ", rank_list(ranks), ")");
}

StatusOr<int> check_group(const std::string& tag, const std::vector<int>& ranks, int global_rank) {
  if (tag.empty() || tag.find('/') != std::string::npos) {
    return InvalidArgument("communicator tag '", tag, "' must be non-empty and without '/'");
  }
  if (ranks.empty()) return InvalidArgument("group ", tag, " has no ranks");
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || (i > 0 && ranks[i] <= ranks[i - 1])) {
      return InvalidArgument("group ", tag, ": ranks ", rank_list(ranks),
                             " must be sorted, distinct and non-negative");
    }
  }
  auto it = std::find(ranks.begin(), ranks.end(), global_rank);
  if (it == ranks.end()) {
    return InvalidArgument("group ", tag, " (ranks ", rank_list(ranks), ") does not contain rank ",
                           global_rank);
  }
  return static_cast<int>(it - ranks.begin());
}

Status check_all_reduce(const std::string& group, const Tensor& buf, bool allow_bf16) {
  return check_dtype("all_reduce", group, buf, allow_bf16);
}

Status check_reduce_scatter(const std::string& group, int size, const Tensor& out, const Tensor& in,
                            bool allow_bf16) {
  AX_RETURN_IF_ERROR(check_dtype("reduce_scatter", group, out, allow_bf16));
  AX_RETURN_IF_ERROR(check_dtype("reduce_scatter", group, in, allow_bf16));
  if (in.dtype != out.dtype || in.numel() != out.numel() * size) {
    return InvalidArgument("reduce_scatter on ", group, ": in ", in.shape_string(),
                           " must have size() × out elements = ", size, " × ", out.numel(),
                           " of out's dtype (out ", out.shape_string(), ")");
  }
  return Status::Ok();
}

Status check_all_gather(const std::string& group, int size, const Tensor& out, const Tensor& in,
                        bool allow_bf16) {
  AX_RETURN_IF_ERROR(check_dtype("all_gather", group, out, allow_bf16));
  AX_RETURN_IF_ERROR(check_dtype("all_gather", group, in, allow_bf16));
  if (in.dtype != out.dtype || out.numel() != in.numel() * size) {
    return InvalidArgument("all_gather on ", group, ": out ", out.shape_string(),
                           " must have size() × in elements = ", size, " × ", in.numel(),
                           " of in's dtype (in ", in.shape_string(), ")");
  }
  return Status::Ok();
}

Status check_broadcast(const std::string& group, int size, const Tensor& buf, int root,
                       bool allow_bf16) {
  AX_RETURN_IF_ERROR(check_dtype("broadcast", group, buf, allow_bf16));
  if (root < 0 || root >= size) {
    return InvalidArgument("broadcast on ", group, ": root ", root, " is not a group rank (0..",
                           size - 1, ")");
  }
  return Status::Ok();
}

StatusOr<int64_t> group_instance(Store& store, const std::string& tag, int size) {
  StatusOr<int64_t> n = store.add(str_cat(tag, "/instances"), 1);
  if (n.ok()) return (*n - 1) / size;
  if (n.status().code() != StatusCode::kUnimplemented) {
    return n.status().with_context(str_cat("creating group ", tag, ": "));
  }
  static std::mutex mu;
  static std::map<std::string, int64_t> created;
  std::lock_guard<std::mutex> lock(mu);
  return created[tag]++;
}

Millis alive_window(Millis timeout) { return std::min<Millis>(timeout, Millis(5000)); }

AliveReport find_missing_ranks(Store& store, const std::string& prefix,
                               const std::vector<int>& ranks, int group_rank, Millis window,
                               const std::vector<int>& peers) {
  AliveReport report;
  const std::string base = prefix + "/alive/";
  report.store_status = store.set(base + std::to_string(group_rank), "1");
  if (!report.store_status.ok()) return report;
  const auto deadline = std::chrono::steady_clock::now() + window;
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
    if (r == group_rank) continue;
    if (!peers.empty() && std::find(peers.begin(), peers.end(), r) == peers.end()) continue;
    Millis left = std::max(
        Millis(0), std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now()));
    StatusOr<std::string> v = store.get(base + std::to_string(r), left);
    if (v.ok()) continue;
    if (v.status().code() != StatusCode::kDeadlineExceeded) {
      report.store_status = v.status();
      return report;
    }
    report.missing.push_back(ranks[r]);
  }
  return report;
}

Status collective_failure(std::string_view op, const std::string& group, StatusCode code,
                          const std::string& cause, const AliveReport& report,
                          const std::string& store_description) {
  std::string head = str_cat(op, " on ", group, " failed: ");
  if (!report.store_status.ok()) {
    // The TCP store lives in rank 0's process: when it stops answering, rank 0 is gone.
    std::string who = starts_with(store_description, "tcp")
                          ? std::string("the store host, rank 0, is gone")
                          : str_cat("the store (", store_description, ") failed");
    return Status(StatusCode::kUnavailable,
                  str_cat(head, who, " (", cause, "; ", report.store_status.message(), ")"));
  }
  if (report.missing.empty()) return Status(code, str_cat(head, cause));
  const bool one = report.missing.size() == 1;
  return Status(code, str_cat(head, one ? "rank " : "ranks ", rank_list(report.missing),
                              " did not answer (", cause, ")"));
}

namespace {

// The registered groups of one rank (one per store: every group of a job shares its store) and
// the verdict of its first failure.
struct Domain {
  std::map<int, GroupEntry> groups;
  int next_id = 0;
  bool failing = false;
  bool closing = false;  // fail_rank is calling the groups' close functions (outside the lock)
  int users = 0;         // fail_rank calls holding this Domain across an unlock
  std::optional<Status> verdict;
};
using Domains = std::map<const Store*, Domain>;

std::mutex g_domains_mu;
std::condition_variable g_domains_cv;  // a verdict was given, or the closing ended

Domains& domains() {
  static auto* d = new Domains();  // never destroyed: used until _Exit
  return *d;
}

// Under g_domains_mu: forgets a domain that nothing uses any more, so that a later store at the
// same address starts afresh.
void forget_if_unused(Domains::iterator it) {
  const Domain& d = it->second;
  if (d.groups.empty() && d.users == 0 && (!d.failing || d.verdict)) domains().erase(it);
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "";
  return name;
}

}  // namespace

int join_failure_domain(Store& store, int global_rank, GroupEntry entry) {
  int id = 0;
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(g_domains_mu);
    Domain& d = domains()[&store];
    first = d.groups.empty();
    id = d.next_id++;
    d.groups.emplace(id, std::move(entry));
  }
  // Read only to name this rank after it failed; a store that cannot take it costs the host name.
  if (first) (void)store.set(str_cat("hosts/", global_rank), host_name());
  return id;
}

void leave_failure_domain(Store& store, int id) {
  std::unique_lock<std::mutex> lock(g_domains_mu);
  // A failure of another group may be closing this one right now, with a copy of its close
  // function: the group's owner must outlive that call, so its destructor waits here.
  g_domains_cv.wait(lock, [&] {
    auto it = domains().find(&store);
    return it == domains().end() || !it->second.closing;
  });
  auto it = domains().find(&store);
  if (it == domains().end()) return;
  it->second.groups.erase(id);
  forget_if_unused(it);
}

namespace {

// "<head>stopping: <who> stopped answering (rank R reports it)" from the agreed cause
// ("R|who"), when there is one.
std::optional<Status> stopping(const std::string& head, const TransportError& err,
                               const StatusOr<std::string>& cause) {
  const size_t bar = cause.ok() ? cause->find('|') : std::string::npos;
  if (bar == std::string::npos) return std::nullopt;
  return Status(err.code,
                str_cat(head, "stopping: ", cause->substr(bar + 1), " stopped answering (rank ",
                        cause->substr(0, bar), " reports it)"));
}

// How long a failing rank waits for the TCP store's record of a closed connection (a killed
// rank's closes as its peers' connections do, so it is there within moments, or not at all).
constexpr Millis kGoneWait{1000};

// The cause of this rank's failure, in order: one the job already agreed on; a rank whose store
// connection closed (killed or crashed: known at once, no alive round); else the alive round of
// the failed group.
Status decide_failure(Store& store, std::string_view op, const std::string& group,
                      const std::string& prefix, const std::vector<int>& ranks, int group_rank,
                      const TransportError& err, Millis window, const std::vector<int>& peers) {
  const int me = ranks[static_cast<size_t>(group_rank)];
  const Millis cause_wait = window + Millis(2000);
  const std::string head = str_cat(op, " on ", group, " failed: ");
  if (std::optional<Status> s = stopping(head, err, store.get(kFailureCauseKey, Millis(0)))) {
    return *s;
  }
  StatusOr<std::string> gone = store.get(kStoreFirstGoneKey, kGoneWait);
  std::optional<int64_t> gone_rank = gone.ok() ? parse_int64(*gone) : std::nullopt;
  if (gone_rank && *gone_rank >= 0 && *gone_rank != me) {
    AliveReport report{Status::Ok(), {static_cast<int>(*gone_rank)}};
    return agree_on_cause(store, op, group, me, err, report, cause_wait);
  }
  AliveReport report = find_missing_ranks(store, prefix, ranks, group_rank, window, peers);
  const std::string detail =
      report.store_status.ok() ? absence_detail(store, report.missing, op, prefix, err.seq) : "";
  return agree_on_cause(store, op, group, me, err, report, cause_wait, detail);
}

}  // namespace

std::string describe_ranks(Store& store, const std::vector<int>& ranks) {
  std::vector<std::string> hosts;
  for (int r : ranks) {
    StatusOr<std::string> h = store.get(str_cat("hosts/", r), Millis(100));
    if (!h.ok() || h->empty()) {
      hosts.clear();
      break;
    }
    if (std::find(hosts.begin(), hosts.end(), *h) == hosts.end()) hosts.push_back(*h);
  }
  // The pipeline stage of each rank, when the mesh is pipelined (published with the groups;
  // never waited for: a mesh without stages has no such keys).
  std::vector<std::string> stages;
  for (int r : ranks) {
    StatusOr<std::string> s = store.get(str_cat(kStageKeyPrefix, r), Millis(0));
    if (!s.ok() || s->empty()) {
      stages.clear();
      break;
    }
    if (std::find(stages.begin(), stages.end(), *s) == stages.end()) stages.push_back(*s);
  }
  std::vector<std::string> where;
  if (!hosts.empty())
    where.push_back(str_cat(hosts.size() == 1 ? "host " : "hosts ", joined(hosts, ",")));
  if (!stages.empty()) {
    where.push_back(
        str_cat(stages.size() == 1 ? "pipeline stage " : "pipeline stages ", joined(stages, ",")));
  }
  std::string out = str_cat(ranks.size() == 1 ? "rank " : "ranks ", rank_list(ranks));
  if (where.empty()) return out;
  return str_cat(out, " (", joined(where, ", "), ")");
}

std::string absence_detail(Store& store, const std::vector<int>& missing, std::string_view op,
                           const std::string& prefix, int64_t seq) {
  constexpr size_t kMostRanks = 4;  // a longer list says nothing more about the cause
  std::vector<std::pair<int, std::string>> found;
  for (size_t i = 0; i < missing.size() && i < kMostRanks; ++i) {
    // Published already, or never: a live rank outside collectives republishes within half the
    // timeout, and the timeout has passed.
    StatusOr<std::string> text = store.get(activity_key(missing[i]), Millis(0));
    if (!text.ok()) continue;
    StatusOr<ActivityRecord> record = parse_activity(*text);
    if (!record.ok()) continue;
    found.push_back({missing[i], describe_absence(*record, op, prefix, seq, unix_ms())});
  }
  if (found.empty()) return "";
  if (missing.size() == 1) return ": " + found[0].second;
  std::string out;
  for (const auto& [rank, text] : found)
    out += str_cat(out.empty() ? ": " : "; ", "rank ", rank, ": ", text);
  return out;
}

Status agree_on_cause(Store& store, std::string_view op, const std::string& group, int global_rank,
                      const TransportError& err, const AliveReport& report, Millis wait,
                      const std::string& detail) {
  if (!report.store_status.ok()) {
    return collective_failure(op, group, err.code, err.cause, report, store.describe());
  }
  const std::string head = str_cat(op, " on ", group, " failed: ");
  if (!report.missing.empty()) {
    StatusOr<int64_t> claim = store.add(kFailureClaimKey, 1);
    if (claim.ok() && *claim == 1) {
      const std::string who = describe_ranks(store, report.missing);
      (void)store.set(kFailureCauseKey, str_cat(global_rank, "|", who));
      return Status(err.code,
                    str_cat(head, who, " stopped answering first (", err.cause, ")", detail));
    }
    if (!claim.ok()) {  // no add (PMIx): every rank says what its own round found
      return Status(err.code, str_cat(head, describe_ranks(store, report.missing),
                                      " did not answer (", err.cause, ")", detail));
    }
  }
  StatusOr<std::string> cause = store.get(kFailureCauseKey, wait);
  if (std::optional<Status> s = stopping(head, err, cause)) return *s;
  return collective_failure(op, group, err.code, err.cause, report, store.describe());
}

Status fail_rank(Store& store, std::string_view op, const std::string& group,
                 const std::string& prefix, const std::vector<int>& ranks, int group_rank,
                 const TransportError& err, Millis timeout, const std::vector<int>& peers) {
  const Millis window = alive_window(timeout);
  const Millis cause_wait = window + Millis(2000);
  std::vector<GroupEntry> groups;
  {
    std::unique_lock<std::mutex> lock(g_domains_mu);
    Domain& d = domains()[&store];  // `users` keeps it in the map while the lock is released
    ++d.users;
    if (d.failing) {
      // Another group of this rank failed first (or the other thread's): its verdict holds.
      g_domains_cv.wait_for(lock, 2 * cause_wait, [&] { return d.verdict.has_value(); });
      std::optional<Status> verdict = d.verdict;
      --d.users;
      forget_if_unused(domains().find(&store));
      if (verdict) return *verdict;
      return Status(err.code, str_cat(op, " on ", group, " failed: ", err.cause,
                                      " (after another group of this rank failed)"));
    }
    d.failing = true;
    d.closing = true;
    for (const auto& [id, entry] : d.groups) groups.push_back(entry);
  }
  // Alive keys first, then the connections: a peer woken by the close finds this rank alive.
  for (const GroupEntry& g : groups) {
    (void)store.set(str_cat(g.prefix, "/alive/", g.group_rank), "1");
  }
  // The failed group itself is the caller's to close, when it chooses (NCCL's watchdog: only
  // after the verdict, so that the stream stays blocked meanwhile).
  for (const GroupEntry& g : groups) {
    if (g.close && g.prefix != prefix) g.close();
  }
  {
    std::lock_guard<std::mutex> lock(g_domains_mu);
    domains()[&store].closing = false;
  }
  g_domains_cv.notify_all();
  Status verdict = decide_failure(store, op, group, prefix, ranks, group_rank, err, window, peers);
  {
    std::lock_guard<std::mutex> lock(g_domains_mu);
    auto it = domains().find(&store);
    it->second.verdict = verdict;
    --it->second.users;
    forget_if_unused(it);
  }
  g_domains_cv.notify_all();
  return verdict;
}

TransportError classify_gloo_error(std::string_view what, Millis timeout) {
  auto has = [&](std::string_view s) { return what.find(s) != std::string_view::npos; };
  if (has("imed out") || has("imeout")) {
    return {StatusCode::kDeadlineExceeded, str_cat("timed out after ", seconds(timeout))};
  }
  if (has("closed by peer") || has("reset by peer") || has("Broken pipe") ||
      has("Connection refused") || has("ECONNRESET") || has("EPIPE")) {
    return {StatusCode::kUnavailable, "peer closed the connection"};
  }
  return {StatusCode::kUnavailable, gloo_message(what)};
}

std::string gloo_message(std::string_view what) {
  std::string_view line = what.substr(0, what.find('\n'));
  if (!line.empty() && line.front() == '[') {
    size_t end = line.find("] ");
    if (end != std::string_view::npos) line.remove_prefix(end + 2);
  }
  return std::string(line);
}

}  // namespace ax::train::comm::internal
