// FSDP prefetch: the all-gather of the next layer's weights runs while the current layer
// computes, on a communicator of its own (MeshGroups::fsdp_prefetch). One gather at a time.
//
// How it runs depends on the communicator (docs/sharding.md "Prefetch"):
//   - one that enqueues (NCCL): submit() issues the gather on the calling thread, the training
//     thread. NCCL requires every rank to issue its collectives in the same order, and the
//     kernels of all communicators of a device share the GPU: issued from a second thread, the
//     gather would land before or after the main thread's reduce-scatters and tensor-parallel
//     all-reduces in an order that differs between ranks, and ranks would wait on each other in
//     a cycle. The communicator runs it on its own stream after the work enqueued so far (the
//     cast of its input, the previous use of its slot); wait() makes the compute stream wait
//     for it (join()), without blocking the host.
//   - one that blocks (Gloo): a background thread runs the gather, which touches host memory
//     only, while the training thread computes.
#pragma once

#include <condition_variable>
#include <mutex>
#include <thread>

#include "ax/common/status.h"
#include "ax/trainer/backend/tensor.h"
#include "ax/trainer/comm/communicator.h"

namespace ax::train {

class Prefetcher {
 public:
  explicit Prefetcher(comm::Communicator* comm);
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // Starts all_gather(out, in); the previous gather must have been waited for.
  void submit(Tensor out, Tensor in);
  // The gather's status, once `out` may be used by what the caller enqueues next.
  Status wait();

 private:
  void loop();

  comm::Communicator* comm_;
  const bool enqueues_;
  std::mutex mu_;
  std::condition_variable cv_;
  Tensor out_, in_;
  bool busy_ = false, quit_ = false;
  Status status_;
  std::thread thread_;  // blocking communicators only; last: starts once the members above exist
};

}  // namespace ax::train
