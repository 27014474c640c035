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
  // Megatron's interleaved 1F1B: each stage holds V model chunks (chunk c of P·V on stage
  // c mod P) and runs 1F1B over the (micro-batch, chunk) passes, P micro-batches per round.
  kInterleaved,
};

// gpipe | 1f1b | interleaved
StatusOr<PipelineSchedule> parse_pipeline_schedule(const std::string& name);
const char* name_of(PipelineSchedule schedule);

struct PipelineEvent {
  enum class Kind : uint8_t { kForward, kBackward };
  Kind kind = Kind::kForward;
  int micro_batch = 0;
  int chunk = 0;  // the stage's model chunk, 0..V-1 (the whole model's chunk chunk·P + stage)
  bool operator==(const PipelineEvent&) const = default;
};

// The passes of stage `stage` of `stages` over `micro_batches` micro-batches, in order, with
// `chunks` (V) model chunks per stage: 1 unless the schedule is interleaved, which needs
// micro_batches to be a multiple of stages.
std::vector<PipelineEvent> pipeline_events(PipelineSchedule schedule, int stage, int stages,
                                           int micro_batches, int chunks = 1);

// One transfer with a neighbour stage: the activation of a micro-batch (stage s's output to
// s + 1) or its gradient (s + 1's input gradient to s). With chunks the stages form a ring: the
// last stage's chunk v sends its output to the first stage's chunk v + 1.
struct PipelineTransfer {
  enum class Kind : uint8_t { kSendActivation, kRecvActivation, kSendGradient, kRecvGradient };
  Kind kind = Kind::kSendActivation;
  int micro_batch = 0;
  int peer = 0;   // the neighbour stage
  int chunk = 0;  // this stage's chunk whose output is sent or whose input is received
  bool operator==(const PipelineTransfer&) const = default;
};

// One pass and the transfers around it: `before` is one exchange (its receives) ahead of the
// pass, `after` one exchange behind it. A pass's output is sent in `after`, and the next pass's
// input from the same neighbour is received in the same exchange when the next pass needs one
// (Megatron's send_forward_recv_backward / send_backward_recv_forward). Interleaved: the stages
// run in lockstep rounds, `after` sends the pass's output and receives whatever the neighbours
// sent in that round (inputs may arrive passes ahead; a gradient may be sent and another
// received in one exchange), and `before` receives what came while the stage had nothing to run.
struct PipelineAction {
  PipelineEvent event;
  std::vector<PipelineTransfer> before;
  std::vector<PipelineTransfer> after;
};

std::vector<PipelineAction> pipeline_program(PipelineSchedule schedule, int stage, int stages,
                                             int micro_batches, int chunks = 1);

// The most (micro-batch, chunk) passes whose activations a stage holds at once under `events`
// (forwarded and not yet backwarded); a chunk's activations are 1/V of a stage's.
int peak_in_flight(const std::vector<PipelineEvent>& events);

// The idle fraction of a step, averaged over the stages, when every stage runs its events in
// order, a stage's forward costs `forward_cost` and its backward `backward_cost` (a chunk's 1/V
// of them), F(c, i) of the model's chunk c waits for F(c - 1, i), B(c, i) for B(c + 1, i) and the
// last chunk's B(i) for its F(i); transfers are free. (p - 1) / (m + p - 1) for GPipe and 1F1B;
// interleaved: (p - 1) / (V·m + p - 1) (Megatron's bubble-to-ideal ratio (p - 1) / (V·m)).
double pipeline_bubble(PipelineSchedule schedule, int stages, int micro_batches,
                       double forward_cost = 1, double backward_cost = 2, int chunks = 1);

}  // namespace ax::train
