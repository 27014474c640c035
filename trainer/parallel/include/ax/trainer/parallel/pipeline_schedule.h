// Pipeline schedules as pure functions (docs/sharding.md "Pipeline parallelism"): the order in
// which one stage runs the forward (F) and backward (B) passes of a step's micro-batches, the
// point-to-point transfers around each pass (fused so that neighbours never wait on each other
// in a cycle), and the bubble the order implies. The train loop executes the program of its
// stage; tests check the orders, the transfers and the bubble without any rank.
#pragma once

#include <string>
#include <vector>

#include "ax/common/status.h"

namespace ax::train {

enum class PipelineSchedule : uint8_t {
  kGpipe,  // every forward, then every backward: m micro-batches of activations per stage
  k1F1B,   // warm-up forwards, one forward one backward, cool-down: at most P - stage alive
};

StatusOr<PipelineSchedule> parse_pipeline_schedule(const std::string& name);  // gpipe | 1f1b
const char* name_of(PipelineSchedule schedule);

struct PipelineEvent {
  enum class Kind : uint8_t { kForward, kBackward };
  Kind kind = Kind::kForward;
  int micro_batch = 0;
  bool operator==(const PipelineEvent&) const = default;
};

// The passes of stage `stage` of `stages` over `micro_batches` micro-batches, in order.
std::vector<PipelineEvent> pipeline_events(PipelineSchedule schedule, int stage, int stages,
                                           int micro_batches);

// One transfer with a neighbour stage: the activation of a micro-batch (stage s's output to
// s + 1) or its gradient (s + 1's input gradient to s).
struct PipelineTransfer {
  enum class Kind : uint8_t { kSendActivation, kRecvActivation, kSendGradient, kRecvGradient };
  Kind kind = Kind::kSendActivation;
  int micro_batch = 0;
  int peer = 0;  // the neighbour stage
  bool operator==(const PipelineTransfer&) const = default;
};

// One pass and the transfers around it: `before` is one exchange (its receives) ahead of the
// pass, `after` one exchange behind it. A pass's output is sent in `after`, and the next pass's
// input from the same neighbour is received in the same exchange when the next pass needs one
// (Megatron's send_forward_recv_backward / send_backward_recv_forward).
struct PipelineAction {
  PipelineEvent event;
  std::vector<PipelineTransfer> before;
  std::vector<PipelineTransfer> after;
};

std::vector<PipelineAction> pipeline_program(PipelineSchedule schedule, int stage, int stages,
                                             int micro_batches);

// The most micro-batches whose activations a stage holds at once under `events` (forwarded and
// not yet backwarded).
int peak_in_flight(const std::vector<PipelineEvent>& events);

// The idle fraction of a step, averaged over the stages, when every stage runs its events in
// order, a forward costs `forward_cost` and a backward `backward_cost`, F(s, i) waits for
// F(s - 1, i), B(s, i) for B(s + 1, i) and the last stage's B(i) for its F(i); transfers are free.
// (p - 1) / (m + p - 1) for GPipe and 1F1B.
double pipeline_bubble(PipelineSchedule schedule, int stages, int micro_batches,
                       double forward_cost = 1, double backward_cost = 2);

}  // namespace ax::train
