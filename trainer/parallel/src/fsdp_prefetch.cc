// FSDP prefetch (fsdp_prefetch.h).
#include "fsdp_prefetch.h"

#include "ax/common/check.h"
#include "ax/trainer/comm/activity.h"

namespace ax::train {

Prefetcher::Prefetcher(comm::Communicator* comm) : comm_(comm), enqueues_(comm->enqueues()) {
  if (!enqueues_) thread_ = std::thread([this] { loop(); });
}

Prefetcher::~Prefetcher() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Prefetcher::submit(Tensor out, Tensor in) {
  std::lock_guard<std::mutex> lock(mu_);
  AX_CHECK(!busy_) << "one FSDP prefetch at a time";
  busy_ = true;
  if (enqueues_) {
    status_ = comm_->all_gather(out, in);
    return;
  }
  out_ = out;
  in_ = in;
  cv_.notify_all();
}

Status Prefetcher::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  if (enqueues_) {
    if (busy_ && status_.ok()) comm_->join();
    busy_ = false;
    return status_;
  }
  // The training thread waits here for a collective: its time counts as a wait in collectives
  // (the stragglers' figures), and a rank stuck here says so (activity.h).
  comm::CollectiveScope waiting(nullptr, "the FSDP prefetch's all_gather");
  cv_.wait(lock, [this] { return !busy_; });
  return status_;
}

void Prefetcher::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return quit_ || busy_; });
    if (quit_) return;
    Tensor out = out_, in = in_;
    lock.unlock();
    Status s = comm_->all_gather(out, in);
    lock.lock();
    status_ = s;
    busy_ = false;
    cv_.notify_all();
  }
}

}  // namespace ax::train
