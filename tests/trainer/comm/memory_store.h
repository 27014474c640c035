// A Store in this process, for threads standing in for ranks (the comm layer's CPU tests).
#pragma once

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "ax/trainer/comm/store.h"

namespace ax::train::comm {

// A Store in this process, for threads standing in for ranks.
class MemoryStore : public Store {
 public:
  Status set(const std::string& key, std::string_view value) override {
    std::lock_guard<std::mutex> lock(mu_);
    kv_[key] = std::string(value);
    cv_.notify_all();
    return Status::Ok();
  }
  StatusOr<std::string> get(const std::string& key, Millis timeout) override {
    AX_RETURN_IF_ERROR(wait({key}, timeout));
    std::lock_guard<std::mutex> lock(mu_);
    return kv_[key];
  }
  StatusOr<int64_t> add(const std::string& key, int64_t delta) override {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t v = (kv_.count(key) ? std::stoll(kv_[key]) : 0) + delta;
    kv_[key] = std::to_string(v);
    cv_.notify_all();
    return v;
  }
  Status wait(const std::vector<std::string>& keys, Millis timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    bool all = cv_.wait_for(lock, timeout, [&] {
      return std::all_of(keys.begin(), keys.end(), [&](const auto& k) { return kv_.count(k); });
    });
    return all ? Status::Ok() : DeadlineExceeded("keys not set");
  }
  Status sync(Millis) override { return Unimplemented("sync"); }
  std::string describe() const override { return "memory"; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> kv_;
};

}  // namespace ax::train::comm
