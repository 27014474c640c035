// What every store shares: barrier and all-gather over per-rank keys, the prefix store. Both
// count the ranks in with add() where the store has it, so that each rank waits for one key and
// an all-gather reads one packed value: a store serving thousands of ranks then does work and
// holds waiting keys in proportion to the ranks, not to their square (docs/reliability.md "The
// store at scale").
#include "ax/trainer/comm/store.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "ax/common/strings.h"
#include "store_internal.h"
#include "store_wire.h"

namespace ax::train::comm {

namespace {

std::string rank_key(const std::string& name, int rank) { return str_cat(name, "/", rank); }

// The ranks whose "<name>/<r>" is not set, found after a timeout: blocks of ranks asked at once
// (one request each on the TCP store), rank by rank only inside a block that misses some, so
// that thousands of ranks do not each make thousands of requests to say who is missing.
StatusOr<std::vector<int>> missing_ranks(Store& store, const std::string& name, int world) {
  constexpr int kBlock = 64;
  std::vector<int> missing;
  for (int lo = 0; lo < world; lo += kBlock) {
    const int hi = std::min(world, lo + kBlock);
    std::vector<std::string> keys;
    for (int r = lo; r < hi; ++r) keys.push_back(rank_key(name, r));
    Status all = store.wait(keys, Millis(0));
    if (all.ok()) continue;
    if (all.code() != StatusCode::kDeadlineExceeded) return all;
    for (int r = lo; r < hi; ++r) {
      Status one = store.wait({keys[static_cast<size_t>(r - lo)]}, Millis(0));
      if (one.code() == StatusCode::kDeadlineExceeded) {
        missing.push_back(r);
      } else if (!one.ok()) {
        return one;
      }
    }
  }
  return missing;
}

// Counts this rank in at "<name>/arrived": true for the rank that completes the count.
// Unimplemented on a store without add() (PMIx).
StatusOr<bool> count_in(Store& store, const std::string& name, int world) {
  AX_ASSIGN_OR_RETURN(int64_t arrived, store.add(str_cat(name, "/arrived"), 1));
  return arrived >= world;
}

// The error after `waited` (a wait of a barrier or all-gather) failed: on a timeout, names the
// ranks whose key is missing.
Status arrival_failed(Store& store, const Status& waited, const char* what, const std::string& name,
                      int world, Millis timeout, const char* last_key) {
  if (waited.code() != StatusCode::kDeadlineExceeded) return waited;
  AX_ASSIGN_OR_RETURN(std::vector<int> missing, missing_ranks(store, name, world));
  if (missing.empty()) {  // every rank's key is there, but the last one did not finish its part
    return DeadlineExceeded(what, " '", name, "': every rank of ", world, " arrived, but the ",
                            "last one's '", name, "/", last_key, "' did not come within ",
                            seconds_text(timeout), " (", store.describe(), ")");
  }
  return DeadlineExceeded(what, " '", name, "': ", ranks_text(missing), " of ", world,
                          " did not arrive within ", seconds_text(timeout), " (", store.describe(),
                          ")");
}

std::vector<std::string> rank_keys(const std::string& name, int world) {
  std::vector<std::string> keys;
  keys.reserve(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) keys.push_back(rank_key(name, r));
  return keys;
}

// An all-gather's values as one value ("<name>/values"): u32 count, then u32 length + bytes each.
std::string pack(const std::vector<std::string>& values) {
  std::string out;
  wire::put_u32(out, static_cast<uint32_t>(values.size()));
  for (const std::string& v : values) wire::put_str(out, v);
  return out;
}

StatusOr<std::vector<std::string>> unpack(const std::string& packed, const std::string& name,
                                          int world) {
  wire::Reader r(packed);
  const bool count_ok = r.u(4) == static_cast<uint64_t>(world);
  std::vector<std::string> values(count_ok ? static_cast<size_t>(world) : 0);
  for (std::string& v : values) v = r.str();
  if (!r.ok() || values.size() != static_cast<size_t>(world)) {
    return DataLoss("all-gather '", name, "': '", name, "/values' does not hold ", world,
                    " values");
  }
  return values;
}

Status check_rank(int rank, int world) {
  if (world < 1 || rank < 0 || rank >= world) {
    return InvalidArgument("rank ", rank, " of a world of ", world);
  }
  return Status::Ok();
}

class PrefixStore final : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> base)
      : prefix_(std::move(prefix) + "/"), base_(std::move(base)) {}

  Status set(const std::string& key, std::string_view value) override {
    return base_->set(prefix_ + key, value);
  }
  StatusOr<std::string> get(const std::string& key, Millis timeout) override {
    return base_->get(prefix_ + key, timeout);
  }
  StatusOr<int64_t> add(const std::string& key, int64_t delta) override {
    return base_->add(prefix_ + key, delta);
  }
  Status wait(const std::vector<std::string>& keys, Millis timeout) override {
    return base_->wait(prefixed(keys), timeout);
  }
  StatusOr<std::vector<std::string>> get_many(const std::vector<std::string>& keys,
                                              Millis timeout) override {
    return base_->get_many(prefixed(keys), timeout);
  }
  // The base's collective: a prefix names keys, not a subset of ranks.
  Status sync(Millis timeout) override { return base_->sync(timeout); }
  std::string describe() const override { return str_cat(base_->describe(), " prefix ", prefix_); }

 private:
  std::vector<std::string> prefixed(const std::vector<std::string>& keys) const {
    std::vector<std::string> full;
    full.reserve(keys.size());
    for (const std::string& k : keys) full.push_back(prefix_ + k);
    return full;
  }

  std::string prefix_;
  std::shared_ptr<Store> base_;
};

}  // namespace

StatusOr<std::vector<std::string>> Store::get_many(const std::vector<std::string>& keys,
                                                   Millis timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<std::string> values;
  values.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    const auto left =
        std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now());
    StatusOr<std::string> v = get(keys[i], std::max(left, Millis(0)));
    if (v.ok()) {
      values.push_back(std::move(*v));
      continue;
    }
    if (v.status().code() != StatusCode::kDeadlineExceeded) return v.status();
    std::vector<std::string> missing;  // named as the TCP store's one request names them
    for (size_t j = i; j < keys.size(); ++j) {
      if (wait({keys[j]}, Millis(0)).code() == StatusCode::kDeadlineExceeded) {
        missing.push_back(keys[j]);
      }
    }
    return DeadlineExceeded("keys ", keys_text(missing), " not set within ", seconds_text(timeout),
                            " (", describe(), ")");
  }
  return values;
}

std::string seconds_text(Millis timeout) {
  if (timeout.count() % 1000 == 0) return str_cat(timeout.count() / 1000, " s");
  return str_cat(static_cast<double>(timeout.count()) / 1000.0, " s");
}

std::string ranks_text(const std::vector<int>& ranks) {
  constexpr size_t kShown = 16;  // thousands of missing ranks stay one readable line
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size() && i < kShown; ++i) {
    out += str_cat(i > 0 ? ", " : "", ranks[i]);
  }
  if (ranks.size() > kShown) out += str_cat(" and ", ranks.size() - kShown, " more");
  return out;
}

std::string keys_text(const std::vector<std::string>& keys) {
  std::string out;
  constexpr size_t kShown = 8;
  for (size_t i = 0; i < keys.size() && i < kShown; ++i) {
    out += str_cat(i > 0 ? ", " : "", "'", keys[i], "'");
  }
  if (keys.size() > kShown) out += str_cat(" and ", keys.size() - kShown, " more");
  return out;
}

Status store_barrier(Store& store, const std::string& name, int rank, int world, Millis timeout) {
  AX_RETURN_IF_ERROR(check_rank(rank, world));
  AX_RETURN_IF_ERROR(store.set(rank_key(name, rank), "1"));
  StatusOr<bool> last = count_in(store, name, world);
  Status waited;
  if (last.ok()) {
    if (*last) AX_RETURN_IF_ERROR(store.set(str_cat(name, "/all"), "1"));
    waited = store.wait({str_cat(name, "/all")}, timeout);
  } else if (last.status().code() == StatusCode::kUnimplemented) {
    waited = store.wait(rank_keys(name, world), timeout);
  } else {
    return last.status();
  }
  if (waited.ok()) return waited;
  return arrival_failed(store, waited, "barrier", name, world, timeout, "all");
}

StatusOr<std::vector<std::string>> store_all_gather(Store& store, const std::string& name, int rank,
                                                    int world, std::string_view value,
                                                    Millis timeout) {
  AX_RETURN_IF_ERROR(check_rank(rank, world));
  AX_RETURN_IF_ERROR(store.set(rank_key(name, rank), value));
  StatusOr<bool> last = count_in(store, name, world);
  if (!last.ok()) {
    if (last.status().code() != StatusCode::kUnimplemented) return last.status();
    const std::vector<std::string> keys = rank_keys(name, world);
    Status waited = store.wait(keys, timeout);
    if (!waited.ok()) {
      return arrival_failed(store, waited, "all-gather", name, world, timeout, "values");
    }
    return store.get_many(keys, timeout);
  }
  // The last rank in reads every value once and leaves them packed in one key, which is all the
  // others read: the store sends world values to each rank, but looks up only 2 keys per rank.
  if (*last) {
    AX_ASSIGN_OR_RETURN(std::vector<std::string> values,
                        store.get_many(rank_keys(name, world), timeout));
    AX_RETURN_IF_ERROR(store.set(str_cat(name, "/values"), pack(values)));
    return values;
  }
  StatusOr<std::string> packed = store.get(str_cat(name, "/values"), timeout);
  if (!packed.ok()) {
    return arrival_failed(store, packed.status(), "all-gather", name, world, timeout, "values");
  }
  return unpack(*packed, name, world);
}

std::shared_ptr<Store> make_prefix_store(std::string prefix, std::shared_ptr<Store> base) {
  return std::make_shared<PrefixStore>(std::move(prefix), std::move(base));
}

}  // namespace ax::train::comm
