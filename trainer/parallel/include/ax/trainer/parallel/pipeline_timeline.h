// What one pipeline stage did during one step (docs/sharding.md "Seeing the bubble"): its forward
// and backward passes and the time it spent in the transfers with its neighbours, which is where
// a stage waits for the others. The pipeline step records it (pipeline_step.cc), the train loop
// logs the waiting fraction as `pipeline_wait` in metrics.jsonl and writes the whole of one step
// per rank (train.pipeline_trace_step), and `ax-train timeline RUN_DIR` draws the stages of that
// step one above the other, as text or SVG.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ax/common/status.h"

namespace ax::train {

struct PipelineSpan {
  enum class Kind : uint8_t {
    kForward,   // a forward pass of micro-batch `micro_batch`
    kBackward,  // its backward pass
    kWait,      // a transfer with a neighbour stage: sending, receiving, or waiting for it
  };
  Kind kind = Kind::kForward;
  int micro_batch = -1;  // -1 for a wait
  int chunk = 0;         // the model chunk (virtual stage) of an interleaved schedule's pass
  double start = 0;      // seconds since the stage's step began
  double end = 0;
  bool operator==(const PipelineSpan&) const = default;
};

struct StageTimeline {
  int64_t step = 0;
  int rank = 0;
  int stage = 0;
  int stages = 1;
  double seconds = 0;  // from the step's start to the end of its last pass or transfer
  std::vector<PipelineSpan> spans;
  bool operator==(const StageTimeline&) const = default;
};

// Records the spans of one step's schedule: begin(), add() for each pass and transfer, end();
// times are the seconds of a steady clock.
class PipelineRecorder {
 public:
  void begin(double now);
  void add(PipelineSpan::Kind kind, int micro_batch, int chunk, double start, double end);
  void end(double now);
  // The recorded schedule as a timeline whose `seconds` run from begin() to end().
  StageTimeline timeline(int64_t step, int rank, int stage, int stages) const;

 private:
  double start_ = 0;
  double end_ = 0;
  std::vector<PipelineSpan> spans_;
};

// The seconds of the stage's forward and backward passes.
double busy_seconds(const StageTimeline& timeline);
// The part of `span` seconds (default: the timeline's own) the stage was not computing: waiting
// on a neighbour in a transfer, or done while another stage still ran (0 for an empty span). Over
// the longest stage's span this is the schedule's bubble as (p - 1) / (m + p - 1) counts it.
double waiting_fraction(const StageTimeline& timeline, double span = 0);

// The trace file of one rank's step (pipeline_trace/step_<N>/rank_<R>.txt): a header line
// "ax-pipeline-trace 1 step=N rank=R stage=S stages=P seconds=T", then one line per span,
// "F|B|W <micro-batch> <chunk> <start> <end>" (seconds, 9 decimals).
std::string format_stage_timeline(const StageTimeline& timeline);
StatusOr<StageTimeline> parse_stage_timeline(std::string_view text);

// The stages one row each, `width` columns for the longest step: a forward pass of micro-batch i
// drawn as the digit i mod 10, its backward pass as the letter 'a' + i mod 26, waiting as '.',
// nothing (the step already over) as ' '; each row ends with the stage's waiting fraction. Then
// the stages' mean waiting fraction, both over the longest stage's span. A column shows what
// filled most of its time.
std::string draw_timeline_text(const std::vector<StageTimeline>& stages, int width = 100);
// The same as an SVG picture: a bar per stage, forward passes blue, backward passes orange,
// waiting grey, each pass labelled with its micro-batch.
std::string draw_timeline_svg(const std::vector<StageTimeline>& stages);

}  // namespace ax::train
