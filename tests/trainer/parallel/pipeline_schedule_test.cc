// The pipeline schedules as pure functions: the event orders of GPipe and 1F1B, the activations
// each keeps alive, the bubble of the orders, and the transfers of the programs executed by
// every stage at once under the strictest rules (a send waits for the matching receive).
#include "ax/trainer/parallel/pipeline_schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
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
void expect_programs_meet(PipelineSchedule k, int p, int m) {
  const std::string what =
      std::string(name_of(k)) + " p=" + std::to_string(p) + " m=" + std::to_string(m);
  std::vector<std::vector<std::vector<PipelineTransfer>>> calls(static_cast<size_t>(p));
  for (int s = 0; s < p; ++s) {
    for (const PipelineAction& a : pipeline_program(k, s, p, m)) {
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
  std::map<Key, std::vector<std::pair<T, int>>> sent, received;
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
          list.push_back({t.kind, t.micro_batch});
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
        EXPECT_EQ(theirs[n].first, want) << what << " stage " << s;
        EXPECT_EQ(theirs[n].second, t.micro_batch) << what << " stage " << s;
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

TEST(PipelineSchedule, NamesParse) {
  EXPECT_EQ(*parse_pipeline_schedule("gpipe"), PipelineSchedule::kGpipe);
  EXPECT_EQ(*parse_pipeline_schedule("1f1b"), PipelineSchedule::k1F1B);
  EXPECT_FALSE(parse_pipeline_schedule("interleaved").ok());
}

}  // namespace
}  // namespace ax::train
