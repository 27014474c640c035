// The CPU side of NCCL's bootstrap, compiled in every build so the CPU tests cover it: the
// unique-id exchange through the Store and the poll loop of non-blocking NCCL calls.
#include <chrono>
#include <cstdio>
#include <thread>

#include "comm_internal.h"

namespace ax::train::comm::internal {

StatusOr<std::string> exchange_unique_id(Store& store, const std::string& prefix,
                                         const std::string& group, int root_global_rank,
                                         int group_rank,
                                         const std::function<StatusOr<std::string>()>& make_id,
                                         Millis timeout) {
  const std::string key = prefix + "/nccl_id";
  if (group_rank == 0) {
    StatusOr<std::string> id = make_id();
    if (!id.ok()) return id.status().with_context(str_cat("creating ", group, ": "));
    AX_RETURN_IF_ERROR(store.set(key, *id).with_context(str_cat("creating ", group, ": ")));
    return id;
  }
  StatusOr<std::string> id = store.get(key, timeout);
  if (!id.ok() && id.status().code() == StatusCode::kDeadlineExceeded) {
    return DeadlineExceeded("creating ", group, ": rank ", root_global_rank,
                            " (the group's first rank) did not publish the NCCL id within ",
                            timeout.count() / 1000.0, " s");
  }
  if (!id.ok()) return id.status().with_context(str_cat("creating ", group, ": "));
  return id;
}

Status poll_until(const std::function<StatusOr<bool>()>& poll, Millis timeout, Millis interval,
                  const std::function<void()>& abort, const std::string& what) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    StatusOr<bool> done = poll();
    if (!done.ok()) {
      abort();
      return done.status().with_context(str_cat(what, ": "));
    }
    if (*done) return Status::Ok();
    if (std::chrono::steady_clock::now() >= deadline) {
      abort();
      return DeadlineExceeded(what, " did not finish within ", timeout.count() / 1000.0, " s");
    }
    std::this_thread::sleep_for(interval);
  }
}

}  // namespace ax::train::comm::internal
