// Each rank's times per step and their gather at every progress line, which names a straggler
// (docs/reliability.md "Stragglers"); and train.debug_slow_*, the knob tests slow a rank with.
// Private to trainer/train: the Trainer (trainer.h) owns one when the job has several ranks.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "ax/common/status.h"
#include "ax/job_context/job_context.h"
#include "ax/trainer/backend/backend.h"
#include "ax/trainer/config/config.h"
#include "ax/trainer/metrics/metrics.h"
#include "ax/trainer/parallel/distributed.h"

namespace ax::train::internal {

class RankTiming {
 public:
  // For a job of several ranks: publishes where this rank runs (placement/<rank>: host, local
  // rank, GPU or CPU cores) and allocates the gather's buffer on the backend.
  static StatusOr<std::unique_ptr<RankTiming>> create(const Distributed& dist, Backend* backend,
                                                      const job::JobContext& ctx);
  ~RankTiming();
  RankTiming(const RankTiming&) = delete;
  RankTiming& operator=(const RankTiming&) = delete;

  // A step begins: the collective counters are read.
  void begin_step();
  // Time this step waited for its data.
  void add_data(double seconds);
  // The step ends: the backend is synchronised first, so that an asynchronous device's work
  // (and its collectives' timing events) belongs to the step that enqueued it; then the step's
  // wall time is split into data, waits in collectives (the training thread's blocking calls
  // and the device time of NCCL collectives on the compute stream) and compute (the rest).
  // Returns the step's wall time.
  double end_step(std::chrono::steady_clock::time_point start);

  // Every rank, at a progress line: all-gathers each rank's mean times per step since the last
  // call (3 floats per rank, over the world communicator) and starts a new window. A rank past
  // the margin on this line and the previous one is the straggler (rank_spread).
  RankSpread gather(double margin, double min_excess_s);
  // Starts a new window without a gather (the first line of a process: its step warms up).
  void restart_window();
  // Rank 0: where `rank` runs, as it published it ("host n1, local rank 2, cpu cores 0-3").
  std::string where(int rank);

 private:
  RankTiming(const Distributed& dist, Backend* backend, void* buffer);
  double comm_seconds() const;

  const Distributed& dist_;
  Backend* backend_;
  void* buffer_;  // world × 3 floats on the backend
  double step_comm0_ = 0, step_data_ = 0;
  double data_s_ = 0, compute_s_ = 0, comm_s_ = 0;
  int64_t steps_ = 0;
  int previous_candidate_ = -1;
  std::map<int, std::string> where_;
};

// "host n1, local rank 2, cuda:2 NVIDIA H200" or "host n1, local rank 2, cpu cores 0-3,8".
std::string describe_placement(const job::JobContext& ctx, const Backend& backend);

// train.debug_slow_*: sleeps when this rank, this step and this phase ("compute" or "data") are
// the ones the config names.
void debug_slow(const TrainConfig& train, int rank, int64_t step, const char* phase);

}  // namespace ax::train::internal
