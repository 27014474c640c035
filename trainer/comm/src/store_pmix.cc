// The PMIx store (`srun --mpi=pmix`): set = PMIx_Put(PMIX_GLOBAL) + PMIx_Commit, sync =
// PMIx_Fence over the namespace with PMIX_COLLECT_DATA, get = PMIx_Get. docs/bootstrap.md says
// which lookups work under Slurm's mpi/pmix plugin (Slurm 22.05, PMIx 4.2, checked with
// tests/slurm/pmix_exchange.sh):
//   - a key named "<anything>/<rank>" (what store_barrier, store_all_gather and our callers use)
//     is asked of that rank directly, with PMIX_TIMEOUT: the servers fetch it on demand (direct
//     modex) and wait for the owner to commit it, so this works before any fence too;
//   - any other key is found only after a fence: PMIX_RANK_UNDEF with PMIX_OPTIONAL ("any rank,
//     local cache") misses values of ranks on other nodes even then, so the lookup goes on rank by
//     rank with PMIX_OPTIONAL, which finds what the collecting fence brought.
#include "ax/common/build_config.h"
#include "ax/trainer/comm/store.h"

#if AX_HAVE_PMIX

#include <pmix.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

#include "ax/common/logging.h"
#include "ax/common/strings.h"
#include "store_internal.h"

namespace ax::train::comm {

namespace {

std::string pmix_error(const char* call, pmix_status_t rc) {
  return str_cat(call, ": ", PMIx_Error_string(rc), " (", rc, ")");
}

// PMIX_TIMEOUT is whole seconds, 0 = forever: round up and never pass 0.
int timeout_seconds(Millis timeout) {
  return static_cast<int>(std::max<int64_t>(1, (timeout.count() + 999) / 1000));
}

// Process-wide PMIx client: PMIx_Init once, PMIx_Finalize at exit.
struct PmixClient {
  pmix_proc_t self{};
  uint32_t size = 0;
  std::mutex mu;
};

StatusOr<PmixClient*> pmix_client() {
  static PmixClient* client = nullptr;
  static Status init_status;
  static std::once_flag once;
  std::call_once(once, [] {
    auto* c = new PmixClient;
    pmix_status_t rc = PMIx_Init(&c->self, nullptr, 0);
    if (rc != PMIX_SUCCESS) {
      init_status = FailedPrecondition(
          pmix_error("PMIx_Init", rc),
          ": this process was not started by a PMIx server (use srun --mpi=pmix)");
      delete c;
      return;
    }
    std::atexit([] { PMIx_Finalize(nullptr, 0); });
    pmix_proc_t job;
    PMIX_LOAD_PROCID(&job, c->self.nspace, PMIX_RANK_WILDCARD);
    pmix_value_t* v = nullptr;
    rc = PMIx_Get(&job, PMIX_JOB_SIZE, nullptr, 0, &v);
    if (rc == PMIX_SUCCESS && v != nullptr && v->type == PMIX_UINT32) c->size = v->data.uint32;
    if (v != nullptr) PMIX_VALUE_RELEASE(v);
    if (c->size == 0) {
      init_status =
          FailedPrecondition("PMIx namespace '", c->self.nspace, "' has no job size (",
                             rc == PMIX_SUCCESS ? "wrong type" : PMIx_Error_string(rc),
                             "): a singleton PMIx process, not one started by srun --mpi=pmix");
      delete c;
      return;
    }
    client = c;
  });
  if (client == nullptr) return init_status;
  return client;
}

// "name/12" → 12; -1 when the key does not end in a rank.
int64_t rank_hint(const std::string& key, uint32_t size) {
  size_t slash = key.rfind('/');
  if (slash == std::string::npos) return -1;
  std::optional<int64_t> r = parse_int64(key.substr(slash + 1));
  return r && *r >= 0 && *r < size ? *r : -1;
}

// One non-blocking fence and its completion.
struct Fence {
  pmix_proc_t all{};
  pmix_info_t info[2];
  std::mutex mu;
  std::condition_variable cv;
  bool finished = false;
  pmix_status_t status = PMIX_SUCCESS;

  ~Fence() {
    PMIX_INFO_DESTRUCT(&info[0]);
    PMIX_INFO_DESTRUCT(&info[1]);
  }
  static void done(pmix_status_t status, void* cbdata) {
    auto* ref = static_cast<std::shared_ptr<Fence>*>(cbdata);
    {
      std::lock_guard<std::mutex> lock((*ref)->mu);
      (*ref)->status = status;
      (*ref)->finished = true;
    }
    (*ref)->cv.notify_all();
    delete ref;
  }
};

class PmixStore final : public Store {
 public:
  explicit PmixStore(PmixClient* client) : c_(client) {}

  Status set(const std::string& key, std::string_view value) override {
    AX_RETURN_IF_ERROR(check_key(key));
    std::lock_guard<std::mutex> lock(c_->mu);
    pmix_value_t v;
    PMIX_VALUE_CONSTRUCT(&v);
    v.type = PMIX_BYTE_OBJECT;
    v.data.bo.bytes = const_cast<char*>(value.data());
    v.data.bo.size = value.size();
    pmix_status_t rc = PMIx_Put(PMIX_GLOBAL, key.c_str(), &v);  // copies the bytes
    if (rc == PMIX_SUCCESS) rc = PMIx_Commit();
    if (rc != PMIX_SUCCESS) return Unavailable(pmix_error("PMIx_Put", rc), " of '", key, "'");
    return Status::Ok();
  }

  StatusOr<std::string> get(const std::string& key, Millis timeout) override {
    AX_RETURN_IF_ERROR(check_key(key));
    std::lock_guard<std::mutex> lock(c_->mu);
    int64_t hint = rank_hint(key, c_->size);
    pmix_status_t rc;
    if (hint >= 0) {
      // The owner's server answers NOT-FOUND at once, rather than waiting, while the owner has
      // not yet connected to it (a rank 0 that starts later than the rank asking: seen once in
      // CI as "ax.job-secret/0 not set within 30 s" after a few seconds). Ask again until the
      // deadline.
      const auto deadline = std::chrono::steady_clock::now() + timeout;
      Millis pause(20);
      while (true) {
        const auto left =
            std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now());
        rc = lookup(static_cast<uint32_t>(hint), key, std::max(left, Millis(1)), false);
        if (rc != PMIX_ERR_NOT_FOUND || left <= Millis(0)) break;
        std::this_thread::sleep_for(std::min(pause, left));
        pause = std::min(pause * 2, Millis(500));
      }
    } else {
      rc = lookup(PMIX_RANK_UNDEF, key, timeout, true);
      for (uint32_t r = 0; r < c_->size && rc != PMIX_SUCCESS; ++r) {
        rc = lookup(r, key, timeout, true);
      }
    }
    if (rc == PMIX_SUCCESS) return std::move(found_);
    if (rc == PMIX_ERR_NOT_FOUND || rc == PMIX_ERR_TIMEOUT) {
      return DeadlineExceeded("key '", key, "' not set within ", seconds_text(timeout), " (",
                              describe(), "; ", pmix_error("PMIx_Get", rc),
                              hint >= 0 ? ")" : "; other ranks' keys appear after sync())");
    }
    return Unavailable(pmix_error("PMIx_Get", rc), " of '", key, "' (", describe(), ")");
  }

  StatusOr<int64_t> add(const std::string& key, int64_t delta) override {
    return Unimplemented("add() on the PMIx store (PMIx has no atomic counters); use a TCP ",
                         "store bootstrapped through PMIx");
  }

  Status wait(const std::vector<std::string>& keys, Millis timeout) override {
    for (const std::string& k : keys) {
      StatusOr<std::string> v = get(k, timeout);
      if (!v.ok()) return v.status();
    }
    return Status::Ok();
  }

  // PMIx_Fence_nb, waited for here: Slurm's plugin honours PMIX_TIMEOUT only while the node's
  // own ranks are missing; once a node's ranks are all in, the fence waits for the other nodes
  // up to Slurm's PMIxTimeout (300 s), so the deadline is kept on this side too.
  Status sync(Millis timeout) override {
    std::lock_guard<std::mutex> lock(c_->mu);
    auto fence = std::make_shared<Fence>();
    PMIX_LOAD_PROCID(&fence->all, c_->self.nspace, PMIX_RANK_WILDCARD);
    bool collect = true;
    int seconds = timeout_seconds(timeout);
    PMIX_INFO_LOAD(&fence->info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    PMIX_INFO_LOAD(&fence->info[1], PMIX_TIMEOUT, &seconds, PMIX_INT);
    // The callback owns one reference: the info must outlive a fence we stopped waiting for.
    auto* ref = new std::shared_ptr<Fence>(fence);
    pmix_status_t rc = PMIx_Fence_nb(&fence->all, 1, fence->info, 2, &Fence::done, ref);
    if (rc != PMIX_SUCCESS) {
      delete ref;
      return Unavailable(pmix_error("PMIx_Fence_nb", rc), " (", describe(), ")");
    }
    std::unique_lock<std::mutex> wait(fence->mu);
    if (!fence->cv.wait_for(wait, timeout, [&] { return fence->finished; })) {
      rc = PMIX_ERR_TIMEOUT;
    } else {
      rc = fence->status;
    }
    if (rc == PMIX_ERR_TIMEOUT) {
      return DeadlineExceeded("PMIx_Fence: not every rank of ", c_->size, " arrived within ",
                              seconds_text(timeout), " (", describe(), ")");
    }
    if (rc != PMIX_SUCCESS) return Unavailable(pmix_error("PMIx_Fence", rc), " (", describe(), ")");
    return Status::Ok();
  }

  std::string describe() const override {
    return str_cat("pmix ", c_->self.nspace, " rank ", c_->self.rank, " of ", c_->size);
  }

 private:
  static Status check_key(const std::string& key) {
    if (key.empty() || key.size() > PMIX_MAX_KEYLEN) {
      return InvalidArgument("PMIx store: key '", key, "' is empty or longer than ",
                             PMIX_MAX_KEYLEN, " bytes");
    }
    return Status::Ok();
  }

  // PMIx_Get of (rank, key) into found_. `local_only` looks in this process's cache (what a
  // fence with PMIX_COLLECT_DATA filled) and never asks the server.
  pmix_status_t lookup(uint32_t rank, const std::string& key, Millis timeout, bool local_only) {
    pmix_proc_t proc;
    PMIX_LOAD_PROCID(&proc, c_->self.nspace, rank);
    bool yes = true;
    int seconds = timeout_seconds(timeout);
    pmix_info_t info;
    if (local_only) {
      PMIX_INFO_LOAD(&info, PMIX_OPTIONAL, &yes, PMIX_BOOL);
    } else {
      PMIX_INFO_LOAD(&info, PMIX_TIMEOUT, &seconds, PMIX_INT);
    }
    pmix_value_t* v = nullptr;
    pmix_status_t rc = PMIx_Get(&proc, key.c_str(), &info, 1, &v);
    PMIX_INFO_DESTRUCT(&info);
    if (rc == PMIX_SUCCESS) {
      if (v != nullptr && v->type == PMIX_BYTE_OBJECT) {
        found_.assign(v->data.bo.bytes, v->data.bo.size);
      } else if (v != nullptr && v->type == PMIX_STRING) {
        found_ = v->data.string != nullptr ? v->data.string : "";
      } else {
        rc = PMIX_ERR_TYPE_MISMATCH;
      }
    }
    if (v != nullptr) PMIX_VALUE_RELEASE(v);
    return rc;
  }

  PmixClient* c_;
  std::string found_;  // the last lookup's value (under c_->mu)
};

}  // namespace

StatusOr<std::shared_ptr<Store>> make_pmix_store() {
  AX_ASSIGN_OR_RETURN(PmixClient * client, pmix_client());
  return std::shared_ptr<Store>(std::make_shared<PmixStore>(client));
}

}  // namespace ax::train::comm

#else  // !AX_HAVE_PMIX

namespace ax::train::comm {

StatusOr<std::shared_ptr<Store>> make_pmix_store() {
  return Unimplemented("this ax was built without PMIx (configure with -DAX_WITH_PMIX=ON and ",
                       "install libpmix-dev)");
}

}  // namespace ax::train::comm

#endif  // AX_HAVE_PMIX
