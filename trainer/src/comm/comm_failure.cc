// Group names, argument checks and the naming of missing ranks after a failed collective.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>

#include "ax/common/logging.h"
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
                               const std::vector<int>& ranks, int group_rank, Millis window) {
  AliveReport report;
  const std::string base = prefix + "/alive/";
  report.store_status = store.set(base + std::to_string(group_rank), "1");
  if (!report.store_status.ok()) return report;
  const auto deadline = std::chrono::steady_clock::now() + window;
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
    if (r == group_rank) continue;
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
