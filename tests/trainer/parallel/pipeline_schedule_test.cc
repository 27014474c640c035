// The pipeline schedules as pure functions: the event orders of GPipe, 1F1B and interleaved
// 1F1B, the activations each keeps alive, the bubble of the orders, and the transfers of the
// programs executed by every stage at once under the strictest rules (a send waits for the
// matching receive).
#include "ax/trainer/parallel/pipeline_schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace ax::train {
namespace {

using K = PipelineEvent::Kind;
using T = PipelineTransfer::Kind;

std::string text(const std::vector<PipelineEvent>& events) {
  std::string s;
  for (const PipelineEvent& e : events) {
    if (!s.empty()) s += " ";
    s += (e.kind == K::kForward ? "F" : "B") + std::to_string(e.micro_batch);
    if (e.chunk > 0) s += "." + std::to_string(e.chunk);
  }
  return s;
}

TEST(PipelineSchedule, GpipeRunsEveryForwardThenEveryBackward) {
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(text(pipeline_events(PipelineSchedule::kGpipe, s, 3, 4)), "F0 F1 F2 F3 B3 B2 B1 B0");
  }
}

TEST(PipelineSchedule, OneFOneBWarmsUpAlternatesAndCoolsDown) {
  const PipelineSchedule k = PipelineSchedule::k1F1B;
  EXPECT_EQ(text(pipeline_events(k, 0, 4, 6)), "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5");
  EXPECT_EQ(text(pipeline_events(k, 1, 4, 6)), "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 B4 B5");
  EXPECT_EQ(text(pipeline_events(k, 3, 4, 6)), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5");
  // Fewer micro-batches than stages: the warm-up is every forward.
  EXPECT_EQ(text(pipeline_events(k, 0, 4, 2)), "F0 F1 B0 B1");
}

TEST(PipelineSchedule, EveryPassOnceAndBackwardAfterForward) {
  for (PipelineSchedule k : {PipelineSchedule::kGpipe, PipelineSchedule::k1F1B}) {
    for (int p = 1; p <= 5; ++p) {
      for (int m = 1; m <= 9; ++m) {
        for (int s = 0; s < p; ++s) {
          std::map<int, int> forward_at, backward_at;
          const std::vector<PipelineEvent> events = pipeline_events(k, s, p, m);
          ASSERT_EQ(events.size(), static_cast<size_t>(2 * m));
          for (size_t i = 0; i < events.size(); ++i) {
            auto& at = events[i].kind == K::kForward ? forward_at : backward_at;
            EXPECT_TRUE(at.emplace(events[i].micro_batch, static_cast<int>(i)).second);
          }
          for (int i = 0; i < m; ++i) EXPECT_LT(forward_at.at(i), backward_at.at(i));
        }
      }
    }
  }
}

TEST(PipelineSchedule, OneFOneBKeepsAtMostTheStagesInFlightAndGpipeEveryMicroBatch) {
  for (int p = 1; p <= 5; ++p) {
    for (int m = 1; m <= 12; ++m) {
      for (int s = 0; s < p; ++s) {
        EXPECT_EQ(peak_in_flight(pipeline_events(PipelineSchedule::k1F1B, s, p, m)),
                  std::min(p - s, m));
        EXPECT_EQ(peak_in_flight(pipeline_events(PipelineSchedule::kGpipe, s, p, m)), m);
      }
    }
  }
}

TEST(PipelineSchedule, BubbleIsStagesMinusOneOverMicroBatchesPlusStagesMinusOne) {
  for (PipelineSchedule k : {PipelineSchedule::kGpipe, PipelineSchedule::k1F1B}) {
    for (int p = 1; p <= 6; ++p) {
      for (int m = 1; m <= 16; ++m) {
        for (auto [f, b] : {std::pair{1.0, 2.0}, std::pair{1.0, 1.0}, std::pair{3.0, 5.0}}) {
          EXPECT_NEAR(pipeline_bubble(k, p, m, f, b), (p - 1.0) / (m + p - 1.0), 1e-12)
              << name_of(k) << " p=" << p << " m=" << m << " f=" << f << " b=" << b;
        }
      }
    }
  }
  EXPECT_NEAR(pipeline_bubble(PipelineSchedule::k1F1B, 4, 8), 3.0 / 11.0, 1e-12);
}

// Every stage runs its program at once; an exchange finishes when each of its sends has met the
// peer's receive and each receive the peer's send (a rendezvous: Gloo and NCCL may buffer, which
// can only help). Fails on a deadlock and on a send met by a receive of another thing.
// With chunks, a transfer also names the model chunk (chunk · p + stage): an activation goes from
// chunk c to c + 1, a gradient from c to c - 1, so the receive must be for that chunk.
void expect_programs_meet(PipelineSchedule k, int p, int m, int v = 1) {
  const std::string what = std::string(name_of(k)) + " p=" + std::to_string(p) +
                           " m=" + std::to_string(m) + " v=" + std::to_string(v);
  std::vector<std::vector<std::vector<PipelineTransfer>>> calls(static_cast<size_t>(p));
  for (int s = 0; s < p; ++s) {
    for (const PipelineAction& a : pipeline_program(k, s, p, m, v)) {
      for (const auto* x : {&a.before, &a.after}) {
        if (!x->empty()) calls[static_cast<size_t>(s)].push_back(*x);
      }
    }
  }
  // What each stage has posted to / from each peer so far, in order: (kind, micro-batch).
  using Key = std::pair<int, int>;  // (from, to)
  auto is_send = [](const PipelineTransfer& t) {
    return t.kind == T::kSendActivation || t.kind == T::kSendGradient;
  };
  auto key_of = [&](int s, const PipelineTransfer& t) {
    return is_send(t) ? Key{s, t.peer} : Key{t.peer, s};
  };
  // (kind, micro-batch, the model chunk the data goes to)
  using Posted = std::tuple<T, int, int>;
  auto chunk_to = [&](int s, const PipelineTransfer& t) {
    const int c = t.chunk * p + s;
    return t.kind == T::kSendActivation ? c + 1 : t.kind == T::kSendGradient ? c - 1 : c;
  };
  std::map<Key, std::vector<Posted>> sent, received;
  std::vector<size_t> at(static_cast<size_t>(p), 0);
  // The place of each op of a stage's current call in its list; empty: not posted yet.
  std::vector<std::vector<size_t>> place(static_cast<size_t>(p));
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < p; ++s) {
      const size_t us = static_cast<size_t>(s);
      if (at[us] == calls[us].size()) continue;
      const std::vector<PipelineTransfer>& call = calls[us][at[us]];
      if (place[us].empty()) {
        for (const PipelineTransfer& t : call) {
          auto& list = (is_send(t) ? sent : received)[key_of(s, t)];
          place[us].push_back(list.size());
          list.push_back({t.kind, t.micro_batch, chunk_to(s, t)});
        }
        progress = true;
      }
      bool done = true;
      for (size_t o = 0; o < call.size(); ++o) {
        const PipelineTransfer& t = call[o];
        const auto& theirs = (is_send(t) ? received : sent)[key_of(s, t)];
        const size_t n = place[us][o];
        if (theirs.size() <= n) {
          done = false;
          continue;
        }
        const T want = t.kind == T::kSendActivation   ? T::kRecvActivation
                       : t.kind == T::kRecvActivation ? T::kSendActivation
                       : t.kind == T::kSendGradient   ? T::kRecvGradient
                                                      : T::kSendGradient;
        EXPECT_EQ(std::get<0>(theirs[n]), want) << what << " stage " << s;
        EXPECT_EQ(std::get<1>(theirs[n]), t.micro_batch) << what << " stage " << s;
        EXPECT_EQ(std::get<2>(theirs[n]), chunk_to(s, t)) << what << " stage " << s;
      }
      if (done) {
        ++at[us];
        place[us].clear();
        progress = true;
      }
    }
  }
  for (int s = 0; s < p; ++s) {
    EXPECT_EQ(at[static_cast<size_t>(s)], calls[static_cast<size_t>(s)].size())
        << what << ": stage " << s << " is stuck";
  }
}

TEST(PipelineSchedule, ProgramsOfAllStagesMeetWithoutDeadlock) {
  for (PipelineSchedule k : {PipelineSchedule::kGpipe, PipelineSchedule::k1F1B}) {
    for (int p = 1; p <= 5; ++p) {
      for (int m = 1; m <= 9; ++m) expect_programs_meet(k, p, m);
    }
  }
}

TEST(PipelineSchedule, InterleavedRunsRoundsOfStagesMicroBatchesPerChunk) {
  const PipelineSchedule k = PipelineSchedule::kInterleaved;
  // p = 2, V = 2, m = 4: model chunks 0 and 2 on stage 0, 1 and 3 on stage 1 (".1" = the
  // stage's second chunk). Stage 0 runs 2 + 2 forwards ahead, stage 1 two.
  EXPECT_EQ(text(pipeline_events(k, 0, 2, 4, 2)),
            "F0 F1 F0.1 F1.1 F2 B0.1 F3 B1.1 F2.1 B0 F3.1 B1 B2.1 B3.1 B2 B3");
  EXPECT_EQ(text(pipeline_events(k, 1, 2, 4, 2)),
            "F0 F1 F0.1 B0.1 F1.1 B1.1 F2 B0 F3 B1 F2.1 B2.1 F3.1 B3.1 B2 B3");
  // m = p: every forward first (Megatron's rule).
  EXPECT_EQ(text(pipeline_events(k, 1, 2, 2, 2)), "F0 F1 F0.1 F1.1 B0.1 B1.1 B0 B1");
}

TEST(PipelineSchedule, InterleavedRunsEveryPassOfEveryChunkOnceBackwardAfterForward) {
  for (int p = 1; p <= 5; ++p) {
    for (int v = 1; v <= 4; ++v) {
      for (int m = p; m <= 4 * p; m += p) {
        for (int s = 0; s < p; ++s) {
          std::map<std::pair<int, int>, int> forward_at, backward_at;  // (chunk, micro-batch)
          const std::vector<PipelineEvent> events =
              pipeline_events(PipelineSchedule::kInterleaved, s, p, m, v);
          ASSERT_EQ(events.size(), static_cast<size_t>(2 * m * v));
          for (size_t i = 0; i < events.size(); ++i) {
            const PipelineEvent& e = events[i];
            ASSERT_TRUE(e.chunk >= 0 && e.chunk < v && e.micro_batch >= 0 && e.micro_batch < m);
            auto& at = e.kind == K::kForward ? forward_at : backward_at;
            EXPECT_TRUE(at.emplace(std::pair{e.chunk, e.micro_batch}, static_cast<int>(i)).second);
          }
          for (const auto& [pass, at] : forward_at) EXPECT_LT(at, backward_at.at(pass));
          EXPECT_EQ(forward_at.size(), static_cast<size_t>(m * v));
          EXPECT_EQ(backward_at.size(), static_cast<size_t>(m * v));
        }
      }
    }
  }
}

TEST(PipelineSchedule, InterleavedProgramsOfAllStagesMeetWithoutDeadlock) {
  for (int p = 1; p <= 5; ++p) {
    for (int v = 1; v <= 4; ++v) {
      for (int m = p; m <= 4 * p; m += p) {
        expect_programs_meet(PipelineSchedule::kInterleaved, p, m, v);
      }
    }
  }
}

// Megatron-LM's (Narayanan et al. 2021) interleaved bubble: bubble time / ideal time =
// (p - 1) / (V·m), so the idle fraction is (p - 1) / (V·m + p - 1), V times smaller in m.
TEST(PipelineSchedule, InterleavedBubbleIsMegatronsPMinusOneOverVTimesM) {
  for (int p = 1; p <= 6; ++p) {
    for (int v = 1; v <= 4; ++v) {
      for (int m = p; m <= 4 * p; m += p) {
        for (auto [f, b] : {std::pair{1.0, 2.0}, std::pair{1.0, 1.0}, std::pair{3.0, 5.0}}) {
          const double bubble = pipeline_bubble(PipelineSchedule::kInterleaved, p, m, f, b, v);
          const std::string what = "p=" + std::to_string(p) + " v=" + std::to_string(v) +
                                   " m=" + std::to_string(m) + " f=" + std::to_string(f);
          EXPECT_NEAR(bubble / (1 - bubble), (p - 1.0) / (v * m), 1e-12) << what;
          EXPECT_NEAR(bubble, (p - 1.0) / (v * m + p - 1.0), 1e-12) << what;
        }
      }
    }
  }
  // p = 4, m = 8: 1F1B idles 3/11 of the step, V = 2 3/19, V = 4 3/35.
  EXPECT_NEAR(pipeline_bubble(PipelineSchedule::kInterleaved, 4, 8, 1, 2, 2), 3.0 / 19.0, 1e-12);
  EXPECT_NEAR(pipeline_bubble(PipelineSchedule::kInterleaved, 4, 8, 1, 2, 4), 3.0 / 35.0, 1e-12);
}

// The price: stage s runs 2·(p - s - 1) + (V - 1)·p forwards ahead, so stage 0 holds
// (V·p + p - 1) chunk passes at once, p + (p - 1)/V stages' worth of activations (Megatron's
// p·(1 + (p - 1)/(p·V))) against 1F1B's p. The program receives activations ahead of their
// forward passes, which holds at most one more slot here.
TEST(PipelineSchedule, InterleavedKeepsPPlusPMinusOneOverVStagesOfActivationsOnStageZero) {
  for (int p = 2; p <= 5; ++p) {
    for (int v = 1; v <= 4; ++v) {
      for (int m = 2 * p; m <= 4 * p; m += p) {
        for (int s = 0; s < p; ++s) {
          const int peak =
              peak_in_flight(pipeline_events(PipelineSchedule::kInterleaved, s, p, m, v));
          EXPECT_EQ(peak, std::min(m * v, 2 * (p - s - 1) + (v - 1) * p + 1)) << p << v << m << s;
          // Slots as the executor takes them: at a receive or at a local forward, until the
          // backward.
          int alive = 0, slots = 0;
          for (const PipelineAction& a :
               pipeline_program(PipelineSchedule::kInterleaved, s, p, m, v)) {
            for (const auto* x : {&a.before, &a.after}) {
              for (const PipelineTransfer& t : *x) {
                if (t.kind == T::kRecvActivation) slots = std::max(slots, ++alive);
              }
              if (x == &a.before && a.event.kind == K::kForward && s == 0 && a.event.chunk == 0) {
                slots = std::max(slots, ++alive);
              }
              if (x == &a.before && a.event.kind == K::kBackward) --alive;
            }
          }
          EXPECT_LE(slots, peak + 1) << p << v << m << s;
        }
        EXPECT_DOUBLE_EQ(
            peak_in_flight(pipeline_events(PipelineSchedule::kInterleaved, 0, p, m, v)) /
                static_cast<double>(v),
            p + (p - 1.0) / v);
      }
    }
  }
}

TEST(PipelineSchedule, NamesParse) {
  EXPECT_EQ(*parse_pipeline_schedule("gpipe"), PipelineSchedule::kGpipe);
  EXPECT_EQ(*parse_pipeline_schedule("1f1b"), PipelineSchedule::k1F1B);
  EXPECT_EQ(*parse_pipeline_schedule("interleaved"), PipelineSchedule::kInterleaved);
  EXPECT_FALSE(parse_pipeline_schedule("zero-bubble").ok());
}

}  // namespace
}  // namespace ax::train
