#include "ax/trainer/train/pipeline_trace.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <ostream>

#include "ax/common/file_io.h"
#include "ax/common/strings.h"

namespace ax::train {
namespace fs = std::filesystem;
namespace {

fs::path trace_root(const std::string& run_dir) { return fs::path(run_dir) / "pipeline_trace"; }

// "step_<N>" → N.
std::optional<int64_t> step_of(const fs::path& dir) {
  const std::string name = dir.filename().string();
  if (!starts_with(name, "step_")) return std::nullopt;
  return parse_int64(std::string_view(name).substr(5));
}

}  // namespace

Status write_pipeline_trace(const std::string& run_dir, const StageTimeline& timeline) {
  const fs::path dir = trace_root(run_dir) / str_cat("step_", timeline.step);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    return Status(StatusCode::kIoError, str_cat("creating ", dir.string(), ": ", ec.message()));
  return write_file_atomically((dir / str_cat("rank_", timeline.rank, ".txt")).string(),
                               format_stage_timeline(timeline), Durability::kFast);
}

StatusOr<std::vector<StageTimeline>> read_pipeline_traces(const std::string& run_dir,
                                                          int64_t step) {
  const fs::path root = trace_root(run_dir);
  std::error_code ec;
  int64_t chosen = step;
  if (chosen < 0) {
    for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
      if (std::optional<int64_t> s = step_of(it->path())) chosen = std::max(chosen, *s);
    }
  }
  const fs::path dir = root / str_cat("step_", chosen);
  std::vector<StageTimeline> out;
  if (chosen >= 0) {
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (!starts_with(name, "rank_") || !ends_with(name, ".txt")) continue;
      AX_ASSIGN_OR_RETURN(std::string text, read_file(it->path().string()));
      StatusOr<StageTimeline> t = parse_stage_timeline(text);
      if (!t.ok()) return InvalidArgument(it->path().string(), ": ", t.status().message());
      out.push_back(std::move(*t));
    }
  }
  if (out.empty()) {
    return NotFound(step < 0 ? str_cat("no pipeline trace in ", root.string())
                             : str_cat("no pipeline trace of step ", step, " in ", root.string()),
                    ": a pipelined run writes one at step train.pipeline_trace_step "
                    "(--set train.pipeline_trace_step=N)");
  }
  std::sort(out.begin(), out.end(), [](const StageTimeline& a, const StageTimeline& b) {
    return a.stage != b.stage ? a.stage < b.stage : a.rank < b.rank;
  });
  return out;
}

Status draw_pipeline_trace(const TimelineOptions& options, std::ostream& out) {
  AX_ASSIGN_OR_RETURN(std::vector<StageTimeline> stages,
                      read_pipeline_traces(options.run_dir, options.step));
  out << draw_timeline_text(stages, options.width);
  if (!options.svg_path.empty()) {
    AX_RETURN_IF_ERROR(
        write_file_atomically(options.svg_path, draw_timeline_svg(stages), Durability::kFast));
    out << "wrote " << options.svg_path << "\n";
  }
  return Status::Ok();
}

}  // namespace ax::train
