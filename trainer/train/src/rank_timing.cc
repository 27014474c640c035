// RankTiming, the placement each rank publishes and the debug_slow knob (rank_timing.h).
#include "rank_timing.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "ax/common/check.h"
#include "ax/common/strings.h"
#include "ax/trainer/comm/activity.h"
#include "ax/trainer/comm/communicator.h"

namespace ax::train::internal {
namespace {

constexpr int kTimesPerRank = 3;  // data, compute, comm

std::string placement_key(int rank) { return str_cat("placement/", rank); }

// "0-3,8" of the cores this process may run on.
std::string affinity_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return "?";
  std::string out;
  int first = -1;
  for (int c = 0; c <= CPU_SETSIZE; ++c) {
    const bool in = c < CPU_SETSIZE && CPU_ISSET(c, &set);
    if (in && first < 0) first = c;
    if (!in && first >= 0) {
      out += str_cat(out.empty() ? "" : ",", first, c - 1 > first ? str_cat("-", c - 1) : "");
      first = -1;
    }
  }
  return out;
}

}  // namespace

std::string describe_placement(const job::JobContext& ctx, const Backend& backend) {
  std::string host = ctx.hostname;
  if (host.empty()) {
    char buf[256] = {};
    host = gethostname(buf, sizeof buf - 1) == 0 ? buf : "?";
  }
  const std::string device =
      backend.device_ordinal() >= 0 ? backend.name() : str_cat("cpu cores ", affinity_cores());
  return str_cat("host ", host, ", local rank ", ctx.local_rank, ", ", device);
}

void debug_slow(const TrainConfig& train, int rank, int64_t step, const char* phase) {
  if (train.debug_slow_rank != rank || train.debug_slow_ms <= 0) return;
  if (train.debug_slow_phase != phase) return;
  if (train.debug_slow_step != 0 && train.debug_slow_step != step) return;
  std::this_thread::sleep_for(
      std::chrono::microseconds(static_cast<int64_t>(train.debug_slow_ms * 1000.0)));
}

StatusOr<std::unique_ptr<RankTiming>> RankTiming::create(const Distributed& dist, Backend* backend,
                                                         const job::JobContext& ctx) {
  AX_CHECK(dist.multi() && dist.store != nullptr);
  AX_RETURN_IF_ERROR(dist.store->set(placement_key(ctx.rank), describe_placement(ctx, *backend)));
  AX_ASSIGN_OR_RETURN(
      void* buffer, backend->alloc(static_cast<size_t>(ctx.world) * kTimesPerRank * sizeof(float)));
  return std::unique_ptr<RankTiming>(new RankTiming(dist, backend, buffer));
}

RankTiming::RankTiming(const Distributed& dist, Backend* backend, void* buffer)
    : dist_(dist), backend_(backend), buffer_(buffer) {}

RankTiming::~RankTiming() { backend_->free(buffer_); }

double RankTiming::comm_seconds() const {
  double s = comm::collective_wait_seconds();
  // Not fsdp_prefetch: its collectives overlap the compute (its waits are timed on the host).
  for (comm::Communicator* c :
       {dist_.groups.world.get(), dist_.groups.data.get(), dist_.groups.fsdp.get(),
        dist_.groups.tensor.get(), dist_.groups.replica.get()}) {
    if (c != nullptr) s += c->device_collective_seconds();
  }
  return s;
}

void RankTiming::begin_step() {
  step_comm0_ = comm_seconds();
  step_data_ = 0;
}

void RankTiming::add_data(double seconds) { step_data_ += seconds; }

double RankTiming::end_step(std::chrono::steady_clock::time_point start) {
  backend_->synchronize();
  const double step =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double comm = std::max(0.0, comm_seconds() - step_comm0_);
  data_s_ += step_data_;
  comm_s_ += comm;
  compute_s_ += std::max(0.0, step - step_data_ - comm);
  ++steps_;
  return step;
}

void RankTiming::restart_window() {
  data_s_ = compute_s_ = comm_s_ = 0;
  steps_ = 0;
}

RankSpread RankTiming::gather(double margin, double min_excess_s) {
  const int world = dist_.ctx.world, rank = dist_.ctx.rank;
  const double n = static_cast<double>(std::max<int64_t>(1, steps_));
  const float mine[kTimesPerRank] = {static_cast<float>(data_s_ / n),
                                     static_cast<float>(compute_s_ / n),
                                     static_cast<float>(comm_s_ / n)};
  restart_window();
  Tensor all(buffer_, DType::kF32, {static_cast<int64_t>(world) * kTimesPerRank});
  Tensor own(static_cast<float*>(buffer_) + static_cast<size_t>(rank) * kTimesPerRank, DType::kF32,
             {kTimesPerRank});
  backend_->copy_from_host(own, mine);
  comm::collective_or_die(dist_.groups.world->all_gather(all, own), "the stragglers' gather");
  std::vector<float> values(static_cast<size_t>(world) * kTimesPerRank);
  backend_->copy_to_host(values.data(), all);
  std::vector<RankTimes> times(static_cast<size_t>(world));
  for (size_t r = 0; r < times.size(); ++r) {
    times[r] = {values[r * kTimesPerRank], values[r * kTimesPerRank + 1],
                values[r * kTimesPerRank + 2]};
  }
  RankSpread spread = rank_spread(times, margin, min_excess_s, previous_candidate_);
  previous_candidate_ = spread.candidate;
  return spread;
}

std::string RankTiming::where(int rank) {
  auto it = where_.find(rank);
  if (it != where_.end()) return it->second;
  StatusOr<std::string> text = dist_.store->get(placement_key(rank), comm::Millis(1000));
  return where_[rank] = text.ok() ? *text : std::string();
}

}  // namespace ax::train::internal
