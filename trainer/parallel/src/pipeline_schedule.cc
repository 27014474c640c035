// The pipeline schedules (pipeline_schedule.h): event orders, the transfers around each pass,
// and the bubble of an order by simulating it.
#include "ax/trainer/parallel/pipeline_schedule.h"

#include <algorithm>

namespace ax::train {

StatusOr<PipelineSchedule> parse_pipeline_schedule(const std::string& name) {
  if (name == "gpipe") return PipelineSchedule::kGpipe;
  if (name == "1f1b") return PipelineSchedule::k1F1B;
  return InvalidArgument("train.pipeline_schedule='", name, "': expected gpipe|1f1b");
}

const char* name_of(PipelineSchedule schedule) {
  return schedule == PipelineSchedule::kGpipe ? "gpipe" : "1f1b";
}

std::vector<PipelineEvent> pipeline_events(PipelineSchedule schedule, int stage, int stages,
                                           int micro_batches) {
  AX_CHECK(stages >= 1 && stage >= 0 && stage < stages && micro_batches >= 1);
  using K = PipelineEvent::Kind;
  std::vector<PipelineEvent> events;
  const int m = micro_batches;
  if (schedule == PipelineSchedule::kGpipe) {
    for (int i = 0; i < m; ++i) events.push_back({K::kForward, i});
    for (int i = m; i-- > 0;) events.push_back({K::kBackward, i});
    return events;
  }
  // 1F1B (PipeDream-Flush, Megatron's default): stage s runs P - s - 1 forwards ahead, then
  // alternates, then drains the backwards it owes.
  const int warmup = std::min(stages - stage - 1, m);
  for (int i = 0; i < warmup; ++i) events.push_back({K::kForward, i});
  for (int i = 0; i < m - warmup; ++i) {
    events.push_back({K::kForward, warmup + i});
    events.push_back({K::kBackward, i});
  }
  for (int i = m - warmup; i < m; ++i) events.push_back({K::kBackward, i});
  return events;
}

std::vector<PipelineAction> pipeline_program(PipelineSchedule schedule, int stage, int stages,
                                             int micro_batches) {
  using K = PipelineEvent::Kind;
  using T = PipelineTransfer::Kind;
  const std::vector<PipelineEvent> events = pipeline_events(schedule, stage, stages, micro_batches);
  const bool first = stage == 0, last = stage == stages - 1;
  std::vector<PipelineAction> program;
  bool input_received = false;  // the next pass's input came with the previous exchange
  for (size_t k = 0; k < events.size(); ++k) {
    const PipelineEvent& e = events[k];
    PipelineAction a{e, {}, {}};
    const bool forward = e.kind == K::kForward;
    if (!input_received && forward && !first) {
      a.before.push_back({T::kRecvActivation, e.micro_batch, stage - 1});
    }
    if (!input_received && !forward && !last) {
      a.before.push_back({T::kRecvGradient, e.micro_batch, stage + 1});
    }
    input_received = false;
    const PipelineEvent* next = k + 1 < events.size() ? &events[k + 1] : nullptr;
    if (forward && !last) {
      a.after.push_back({T::kSendActivation, e.micro_batch, stage + 1});
      if (next != nullptr && next->kind == K::kBackward) {
        a.after.push_back({T::kRecvGradient, next->micro_batch, stage + 1});
        input_received = true;
      }
    }
    if (!forward && !first) {
      a.after.push_back({T::kSendGradient, e.micro_batch, stage - 1});
      if (next != nullptr && next->kind == K::kForward) {
        a.after.push_back({T::kRecvActivation, next->micro_batch, stage - 1});
        input_received = true;
      }
    }
    program.push_back(std::move(a));
  }
  return program;
}

int peak_in_flight(const std::vector<PipelineEvent>& events) {
  int alive = 0, peak = 0;
  for (const PipelineEvent& e : events) {
    alive += e.kind == PipelineEvent::Kind::kForward ? 1 : -1;
    peak = std::max(peak, alive);
  }
  return peak;
}

double pipeline_bubble(PipelineSchedule schedule, int stages, int micro_batches,
                       double forward_cost, double backward_cost) {
  using K = PipelineEvent::Kind;
  const int p = stages, m = micro_batches;
  std::vector<std::vector<PipelineEvent>> events(static_cast<size_t>(p));
  for (int s = 0; s < p; ++s) events[static_cast<size_t>(s)] = pipeline_events(schedule, s, p, m);
  // finish[s][kind][i]: when pass (kind, i) of stage s ends; < 0 = not yet run.
  std::vector<std::vector<double>> fwd(static_cast<size_t>(p), std::vector<double>(m, -1));
  std::vector<std::vector<double>> bwd = fwd;
  std::vector<size_t> next(static_cast<size_t>(p), 0);
  std::vector<double> clock(static_cast<size_t>(p), 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < p; ++s) {
      const size_t us = static_cast<size_t>(s);
      while (next[us] < events[us].size()) {
        const PipelineEvent& e = events[us][next[us]];
        const size_t i = static_cast<size_t>(e.micro_batch);
        double ready = 0;
        if (e.kind == K::kForward) {
          if (s > 0 && fwd[us - 1][i] < 0) break;
          ready = s > 0 ? fwd[us - 1][i] : 0;
        } else {
          const double dep = s + 1 < p ? bwd[us + 1][i] : fwd[us][i];
          if (dep < 0) break;
          ready = dep;
        }
        const double start = std::max(clock[us], ready);
        clock[us] = start + (e.kind == K::kForward ? forward_cost : backward_cost);
        (e.kind == K::kForward ? fwd : bwd)[us][i] = clock[us];
        ++next[us];
        progress = true;
      }
    }
  }
  for (int s = 0; s < p; ++s) {
    AX_CHECK_EQ(next[static_cast<size_t>(s)], events[static_cast<size_t>(s)].size())
        << "the " << name_of(schedule) << " schedule deadlocks at stage " << s;
  }
  const double makespan = *std::max_element(clock.begin(), clock.end());
  const double busy = m * (forward_cost + backward_cost);
  return (makespan - busy) / makespan;  // every stage is busy for the same time
}

}  // namespace ax::train
