#include <algorithm>

#include "ax/common/check.h"
#include "ax/trainer/backend/backend.h"

namespace ax::train {

void AllocationCounter::on_alloc(const void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  AX_CHECK(sizes_.emplace(ptr, bytes).second) << "block counted twice";
  in_use_ += bytes;
  peak_ = std::max(peak_, in_use_);
}

void AllocationCounter::on_free(const void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sizes_.find(ptr);
  AX_CHECK(it != sizes_.end()) << "freeing a block the backend did not count";
  in_use_ -= it->second;
  sizes_.erase(it);
}

size_t AllocationCounter::in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_use_;
}

size_t AllocationCounter::peak() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_;
}

}  // namespace ax::train
