// The pipeline schedules (pipeline_schedule.h): event orders, the transfers around each pass,
// and the bubble of an order by simulating it.
#include "ax/trainer/parallel/pipeline_schedule.h"

#include <algorithm>
#include <set>
#include <tuple>

namespace ax::train {

StatusOr<PipelineSchedule> parse_pipeline_schedule(const std::string& name) {
  if (name == "gpipe") return PipelineSchedule::kGpipe;
  if (name == "1f1b") return PipelineSchedule::k1F1B;
  if (name == "interleaved") return PipelineSchedule::kInterleaved;
  return InvalidArgument("train.pipeline_schedule='", name, "': expected gpipe|1f1b|interleaved");
}

const char* name_of(PipelineSchedule schedule) {
  switch (schedule) {
    case PipelineSchedule::kGpipe:
      return "gpipe";
    case PipelineSchedule::k1F1B:
      return "1f1b";
    case PipelineSchedule::kInterleaved:
      return "interleaved";
  }
  return "?";
}

namespace {

// Megatron's interleaved order (forward_backward_pipelining_with_interleaving): the k-th forward
// runs chunk (k mod P·V) / P on micro-batch (k / (P·V))·P + k mod P, P micro-batches through one
// chunk before the next; backwards go through the chunks in reverse. Stage s runs
// 2·(P - s - 1) + (V - 1)·P forwards ahead (all of them when m = P), then alternates.
std::vector<PipelineEvent> interleaved_events(int stage, int stages, int m, int chunks) {
  using K = PipelineEvent::Kind;
  const int P = stages, V = chunks, total = m * V;
  AX_CHECK(m % P == 0) << "interleaved: " << m << " micro-batches, not a multiple of " << P;
  auto pass = [&](int k, K kind) {
    const int round = k % (P * V);
    const int v = kind == K::kForward ? round / P : V - 1 - round / P;
    return PipelineEvent{kind, k / (P * V) * P + k % P, v};
  };
  const int warmup = m == P ? total : std::min(total, 2 * (P - stage - 1) + (V - 1) * P);
  std::vector<PipelineEvent> events;
  for (int k = 0; k < warmup; ++k) events.push_back(pass(k, K::kForward));
  for (int k = 0; k < total - warmup; ++k) {
    events.push_back(pass(warmup + k, K::kForward));
    events.push_back(pass(k, K::kBackward));
  }
  for (int k = total - warmup; k < total; ++k) events.push_back(pass(k, K::kBackward));
  return events;
}

}  // namespace

std::vector<PipelineEvent> pipeline_events(PipelineSchedule schedule, int stage, int stages,
                                           int micro_batches, int chunks) {
  AX_CHECK(stages >= 1 && stage >= 0 && stage < stages && micro_batches >= 1 && chunks >= 1);
  AX_CHECK(chunks == 1 || schedule == PipelineSchedule::kInterleaved)
      << name_of(schedule) << " runs one chunk per stage";
  if (schedule == PipelineSchedule::kInterleaved) {
    return interleaved_events(stage, stages, micro_batches, chunks);
  }
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

namespace {

// The interleaved programs of all stages, built by running the stages in lockstep rounds: in
// each round every stage runs its next pass if the pass's input has arrived, then makes one
// exchange that sends the pass's output and receives whatever the neighbours sent in that round
// (Megatron's send_forward_backward_recv_forward_backward receives ahead of need in the same
// way). Every exchange of a round meets only exchanges of the same round, so no wait can form a
// cycle. The receives of rounds in which a stage has no runnable pass go ahead of its next pass,
// in one exchange: they meet sends of those rounds, none of which waits on this stage.
// The stages form a ring over the P·V chunks: chunk c sends its output to chunk c + 1.
std::vector<std::vector<PipelineAction>> interleaved_programs(int stages, int micro_batches,
                                                              int chunks) {
  using K = PipelineEvent::Kind;
  using T = PipelineTransfer::Kind;
  const int P = stages, last_chunk = stages * chunks - 1;
  const size_t ps = static_cast<size_t>(P);
  std::vector<std::vector<PipelineEvent>> events(ps);
  for (int s = 0; s < P; ++s) {
    events[static_cast<size_t>(s)] =
        pipeline_events(PipelineSchedule::kInterleaved, s, P, micro_batches, chunks);
  }
  // arrived[s]: the inputs stage s has received, as (kind, micro-batch, chunk) of its own pass.
  std::vector<std::set<std::tuple<K, int, int>>> arrived(ps);
  std::vector<std::vector<PipelineAction>> programs(ps);
  std::vector<std::vector<PipelineTransfer>> ahead(ps);  // receives of idle rounds
  std::vector<size_t> next(ps, 0);
  for (bool running = true; running;) {
    running = false;
    std::vector<const PipelineEvent*> ran(ps, nullptr);
    std::vector<std::vector<PipelineTransfer>> ops(ps);
    std::vector<std::pair<size_t, std::tuple<K, int, int>>> sent;  // usable from the next round
    for (int s = 0; s < P; ++s) {
      const size_t us = static_cast<size_t>(s);
      if (next[us] == events[us].size()) continue;
      running = true;
      const PipelineEvent& e = events[us][next[us]];
      const int c = e.chunk * P + s;
      const bool forward = e.kind == K::kForward;
      const bool local = forward ? c == 0 : c == last_chunk;  // embeds, or holds the loss
      if (!local && arrived[us].count({e.kind, e.micro_batch, e.chunk}) == 0) continue;
      ran[us] = &e;
      ++next[us];
      if (forward ? c == last_chunk : c == 0) continue;  // no output to send
      // The neighbour and its chunk that take the output.
      const int to = forward ? (s + 1) % P : (s + P - 1) % P;
      const int their_chunk = (forward ? c + 1 : c - 1) / P;
      ops[us].push_back(
          {forward ? T::kSendActivation : T::kSendGradient, e.micro_batch, to, e.chunk});
      ops[static_cast<size_t>(to)].push_back(
          {forward ? T::kRecvActivation : T::kRecvGradient, e.micro_batch, s, their_chunk});
      sent.push_back({static_cast<size_t>(to), {e.kind, e.micro_batch, their_chunk}});
    }
    for (const auto& [to, input] : sent) arrived[to].insert(input);
    bool progress = false;
    for (size_t s = 0; s < ps; ++s) {
      if (ran[s] == nullptr) {
        ahead[s].insert(ahead[s].end(), ops[s].begin(), ops[s].end());
        continue;
      }
      progress = true;
      programs[s].push_back({*ran[s], std::move(ahead[s]), std::move(ops[s])});
      ahead[s].clear();
    }
    AX_CHECK(progress || !running) << "the interleaved schedule deadlocks";
  }
  return programs;
}

}  // namespace

std::vector<PipelineAction> pipeline_program(PipelineSchedule schedule, int stage, int stages,
                                             int micro_batches, int chunks) {
  if (schedule == PipelineSchedule::kInterleaved) {
    AX_CHECK(stage >= 0 && stage < stages);
    return interleaved_programs(stages, micro_batches, chunks)[static_cast<size_t>(stage)];
  }
  using K = PipelineEvent::Kind;
  using T = PipelineTransfer::Kind;
  const std::vector<PipelineEvent> events =
      pipeline_events(schedule, stage, stages, micro_batches, chunks);
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
                       double forward_cost, double backward_cost, int chunks) {
  using K = PipelineEvent::Kind;
  const int p = stages, m = micro_batches, V = chunks;
  std::vector<std::vector<PipelineEvent>> events(static_cast<size_t>(p));
  for (int s = 0; s < p; ++s) {
    events[static_cast<size_t>(s)] = pipeline_events(schedule, s, p, m, V);
  }
  // fwd / bwd[c][i]: when pass (kind, i) of the model's chunk c (= chunk · p + stage) ends;
  // < 0 = not yet run. A chunk's pass costs 1/V of the stage's.
  const size_t last = static_cast<size_t>(p * V - 1);
  std::vector<std::vector<double>> fwd(last + 1, std::vector<double>(m, -1));
  std::vector<std::vector<double>> bwd = fwd;
  const double f = V == 1 ? forward_cost : forward_cost / V;
  const double b = V == 1 ? backward_cost : backward_cost / V;
  std::vector<size_t> next(static_cast<size_t>(p), 0);
  std::vector<double> clock(static_cast<size_t>(p), 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < p; ++s) {
      const size_t us = static_cast<size_t>(s);
      while (next[us] < events[us].size()) {
        const PipelineEvent& e = events[us][next[us]];
        const size_t i = static_cast<size_t>(e.micro_batch);
        const size_t c = static_cast<size_t>(e.chunk * p + s);
        double ready = 0;
        if (e.kind == K::kForward) {
          if (c > 0 && fwd[c - 1][i] < 0) break;
          ready = c > 0 ? fwd[c - 1][i] : 0;
        } else {
          const double dep = c < last ? bwd[c + 1][i] : fwd[c][i];
          if (dep < 0) break;
          ready = dep;
        }
        const double start = std::max(clock[us], ready);
        clock[us] = start + (e.kind == K::kForward ? f : b);
        (e.kind == K::kForward ? fwd : bwd)[c][i] = clock[us];
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
  const double busy = m * V * (f + b);  // every stage is busy for the same time
  return (makespan - busy) / makespan;
}

}  // namespace ax::train
