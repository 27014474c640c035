// What every store shares: barrier and all-gather over per-rank keys, the prefix store.
#include "ax/trainer/comm/store.h"

#include <utility>

#include "ax/common/strings.h"
#include "store_internal.h"

namespace ax::train::comm {

namespace {

std::string rank_key(const std::string& name, int rank) { return str_cat(name, "/", rank); }

// Waits for "<name>/<r>" of every rank; on timeout, finds out which ranks are missing.
Status wait_ranks(Store& store, const char* what, const std::string& name, int world,
                  Millis timeout) {
  std::vector<std::string> keys;
  keys.reserve(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) keys.push_back(rank_key(name, r));
  Status st = store.wait(keys, timeout);
  if (st.ok() || st.code() != StatusCode::kDeadlineExceeded) return st;
  std::vector<int> missing;
  for (int r = 0; r < world; ++r) {
    Status one = store.wait({keys[static_cast<size_t>(r)]}, Millis(0));
    if (one.code() == StatusCode::kDeadlineExceeded) {
      missing.push_back(r);
    } else if (!one.ok()) {
      return one;
    }
  }
  return DeadlineExceeded(what, " '", name, "': ", ranks_text(missing), " of ", world,
                          " did not arrive within ", seconds_text(timeout), " (", store.describe(),
                          ")");
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
    std::vector<std::string> full;
    full.reserve(keys.size());
    for (const std::string& k : keys) full.push_back(prefix_ + k);
    return base_->wait(full, timeout);
  }
  // The base's collective: a prefix names keys, not a subset of ranks.
  Status sync(Millis timeout) override { return base_->sync(timeout); }
  std::string describe() const override { return str_cat(base_->describe(), " prefix ", prefix_); }

 private:
  std::string prefix_;
  std::shared_ptr<Store> base_;
};

}  // namespace

std::string seconds_text(Millis timeout) {
  if (timeout.count() % 1000 == 0) return str_cat(timeout.count() / 1000, " s");
  return str_cat(static_cast<double>(timeout.count()) / 1000.0, " s");
}

std::string ranks_text(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) out += str_cat(i > 0 ? ", " : "", ranks[i]);
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
  return wait_ranks(store, "barrier", name, world, timeout);
}

StatusOr<std::vector<std::string>> store_all_gather(Store& store, const std::string& name, int rank,
                                                    int world, std::string_view value,
                                                    Millis timeout) {
  AX_RETURN_IF_ERROR(check_rank(rank, world));
  AX_RETURN_IF_ERROR(store.set(rank_key(name, rank), value));
  AX_RETURN_IF_ERROR(wait_ranks(store, "all-gather", name, world, timeout));
  std::vector<std::string> out;
  out.reserve(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    AX_ASSIGN_OR_RETURN(std::string v, store.get(rank_key(name, r), timeout));
    out.push_back(std::move(v));
  }
  return out;
}

std::shared_ptr<Store> make_prefix_store(std::string prefix, std::shared_ptr<Store> base) {
  return std::make_shared<PrefixStore>(std::move(prefix), std::move(base));
}

}  // namespace ax::train::comm
