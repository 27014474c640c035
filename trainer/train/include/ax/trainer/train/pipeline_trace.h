// The pipeline trace of a run (docs/sharding.md "Seeing the bubble"): at step
// train.pipeline_trace_step every rank of a pipelined run writes what its stage did
// (RUN_DIR/pipeline_trace/step_<N>/rank_<R>.txt, pipeline_timeline.h's format), and
// `ax-train timeline RUN_DIR` reads them back and draws the stages.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "ax/common/status.h"
#include "ax/trainer/parallel/pipeline_timeline.h"

namespace ax::train {

// Writes one rank's timeline under run_dir (creating the folders).
Status write_pipeline_trace(const std::string& run_dir, const StageTimeline& timeline);

// The timelines of step `step` (-1: the newest step traced) of every rank, ordered by stage and
// then rank. NotFound when the run has no trace (of that step), naming the key that writes one.
StatusOr<std::vector<StageTimeline>> read_pipeline_traces(const std::string& run_dir,
                                                          int64_t step = -1);

// `ax-train timeline`: the drawing of a run's traced step, as text (`width` columns) on `out`,
// and as SVG into `svg_path` when it is not empty.
struct TimelineOptions {
  std::string run_dir;
  int64_t step = -1;
  int width = 100;
  std::string svg_path;
};
Status draw_pipeline_trace(const TimelineOptions& options, std::ostream& out);

}  // namespace ax::train
