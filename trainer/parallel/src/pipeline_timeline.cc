#include "ax/trainer/parallel/pipeline_timeline.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <sstream>

#include "ax/common/strings.h"

namespace ax::train {
namespace {

using Kind = PipelineSpan::Kind;

char kind_letter(Kind kind) {
  switch (kind) {
    case Kind::kForward:
      return 'F';
    case Kind::kBackward:
      return 'B';
    case Kind::kWait:
      return 'W';
  }
  return '?';
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  return buf;
}

// "key=value" of the header, as a number.
std::optional<double> header_value(const std::vector<std::string>& words, std::string_view key) {
  for (const std::string& w : words) {
    if (starts_with(w, key) && w.size() > key.size() && w[key.size()] == '=') {
      return parse_double(std::string_view(w).substr(key.size() + 1));
    }
  }
  return std::nullopt;
}

}  // namespace

void PipelineRecorder::begin(double now) {
  start_ = now;
  end_ = now;
  spans_.clear();
}

void PipelineRecorder::end(double now) { end_ = std::max(start_, now); }

void PipelineRecorder::add(Kind kind, int micro_batch, int chunk, double start, double end) {
  spans_.push_back({kind, kind == Kind::kWait ? -1 : micro_batch, chunk, start - start_,
                    std::max(start, end) - start_});
}

StageTimeline PipelineRecorder::timeline(int64_t step, int rank, int stage, int stages) const {
  StageTimeline t;
  t.step = step;
  t.rank = rank;
  t.stage = stage;
  t.stages = stages;
  t.seconds = end_ - start_;
  t.spans = spans_;
  return t;
}

double busy_seconds(const StageTimeline& timeline) {
  double busy = 0;
  for (const PipelineSpan& s : timeline.spans) {
    if (s.kind != Kind::kWait) busy += s.end - s.start;
  }
  return busy;
}

double waiting_fraction(const StageTimeline& timeline, double span) {
  if (span <= 0) span = timeline.seconds;
  if (span <= 0) return 0;
  return std::clamp(1.0 - busy_seconds(timeline) / span, 0.0, 1.0);
}

std::string format_stage_timeline(const StageTimeline& t) {
  std::string out =
      str_cat("ax-pipeline-trace 1 step=", t.step, " rank=", t.rank, " stage=", t.stage,
              " stages=", t.stages, " seconds=", fixed(t.seconds, 9), "\n");
  for (const PipelineSpan& s : t.spans) {
    out += str_cat(kind_letter(s.kind), " ", s.micro_batch, " ", s.chunk, " ", fixed(s.start, 9),
                   " ", fixed(s.end, 9), "\n");
  }
  return out;
}

StatusOr<StageTimeline> parse_stage_timeline(std::string_view text) {
  std::vector<std::string> lines = str_split(text, '\n');
  while (!lines.empty() && str_trim(lines.back()).empty()) lines.pop_back();
  if (lines.empty()) return InvalidArgument("an empty pipeline trace");
  std::vector<std::string> head;
  for (const std::string& w : str_split(lines[0], ' ')) {
    if (!w.empty()) head.push_back(w);
  }
  if (head.size() < 2 || head[0] != "ax-pipeline-trace" || head[1] != "1") {
    return InvalidArgument(
        "not a pipeline trace (its first line is not 'ax-pipeline-trace 1 ...')");
  }
  StageTimeline t;
  const auto step = header_value(head, "step");
  const auto rank = header_value(head, "rank");
  const auto stage = header_value(head, "stage");
  const auto stages = header_value(head, "stages");
  const auto seconds = header_value(head, "seconds");
  if (!step || !rank || !stage || !stages || !seconds || *stages < 1 || *stage < 0 ||
      *stage >= *stages || *seconds < 0) {
    return InvalidArgument("pipeline trace header '", lines[0],
                           "' lacks step=, rank=, stage=, stages= or seconds=, or they disagree");
  }
  t.step = static_cast<int64_t>(*step);
  t.rank = static_cast<int>(*rank);
  t.stage = static_cast<int>(*stage);
  t.stages = static_cast<int>(*stages);
  t.seconds = *seconds;
  for (size_t i = 1; i < lines.size(); ++i) {
    std::istringstream in(lines[i]);
    std::string kind;
    PipelineSpan s;
    if (!(in >> kind >> s.micro_batch >> s.chunk >> s.start >> s.end) || kind.size() != 1 ||
        (kind[0] != 'F' && kind[0] != 'B' && kind[0] != 'W') || s.end < s.start) {
      return InvalidArgument("pipeline trace line ", i + 1, " '", lines[i],
                             "' is not 'F|B|W <micro-batch> <chunk> <start> <end>'");
    }
    s.kind = kind[0] == 'F' ? Kind::kForward : kind[0] == 'B' ? Kind::kBackward : Kind::kWait;
    t.spans.push_back(s);
  }
  return t;
}

std::string draw_timeline_text(const std::vector<StageTimeline>& stages, int width) {
  width = std::max(width, 10);
  double longest = 0;
  for (const StageTimeline& t : stages) longest = std::max(longest, t.seconds);
  std::string out;
  if (!stages.empty()) {
    out += str_cat("step ", stages.front().step, ", ", stages.size(), " stage(s), ",
                   fixed(longest * 1e3, 1), " ms across; a column is ",
                   fixed(longest * 1e3 / width, 2),
                   " ms: digit = forward of that micro-batch, letter = its backward (a = 0), "
                   ". = waiting on a neighbour\n");
  }
  double mean_wait = 0;
  for (const StageTimeline& t : stages) {
    std::string row(static_cast<size_t>(width), ' ');
    for (int c = 0; c < width && longest > 0; ++c) {
      const double lo = longest * c / width, hi = longest * (c + 1) / width;
      // What filled most of this column's time.
      double best = 0;
      char pick = ' ';
      for (const PipelineSpan& s : t.spans) {
        const double overlap = std::min(hi, s.end) - std::max(lo, s.start);
        if (overlap <= best) continue;
        best = overlap;
        const int mb = std::max(0, s.micro_batch);
        pick = s.kind == Kind::kForward    ? static_cast<char>('0' + mb % 10)
               : s.kind == Kind::kBackward ? static_cast<char>('a' + mb % 26)
                                           : '.';
      }
      row[static_cast<size_t>(c)] = pick;
    }
    const double wait = waiting_fraction(t, longest);
    mean_wait += wait;
    out += str_cat("stage ", t.stage, " (rank ", t.rank, ") |", row, "| waiting ",
                   fixed(100 * wait, 1), " %\n");
  }
  if (!stages.empty()) {
    out += str_cat("mean waiting: ", fixed(100 * mean_wait / static_cast<double>(stages.size()), 1),
                   " % of the step\n");
  }
  return out;
}

std::string draw_timeline_svg(const std::vector<StageTimeline>& stages) {
  constexpr double kWidth = 1000, kRow = 28, kLeft = 120, kTop = 24;
  double longest = 0;
  for (const StageTimeline& t : stages) longest = std::max(longest, t.seconds);
  const double scale = longest > 0 ? kWidth / longest : 0;
  const double height = kTop + kRow * static_cast<double>(stages.size()) + 8;
  std::string out =
      str_cat("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", fixed(kLeft + kWidth + 10, 0),
              "\" height=\"", fixed(height, 0), "\" font-family=\"monospace\" font-size=\"11\">\n");
  if (!stages.empty()) {
    out +=
        str_cat("<text x=\"4\" y=\"14\">step ", stages.front().step, ": ", fixed(longest * 1e3, 1),
                " ms; forward blue, backward orange, waiting grey</text>\n");
  }
  for (size_t row = 0; row < stages.size(); ++row) {
    const StageTimeline& t = stages[row];
    const double y = kTop + kRow * static_cast<double>(row);
    out += str_cat("<text x=\"4\" y=\"", fixed(y + 17, 1), "\">stage ", t.stage, " ",
                   fixed(100 * waiting_fraction(t, longest), 1), "%</text>\n");
    for (const PipelineSpan& s : t.spans) {
      const double x = kLeft + s.start * scale, w = std::max(0.5, (s.end - s.start) * scale);
      const char* fill = s.kind == Kind::kForward    ? "#4e79a7"
                         : s.kind == Kind::kBackward ? "#f28e2b"
                                                     : "#bab0ac";
      out += str_cat("<rect x=\"", fixed(x, 2), "\" y=\"", fixed(y, 1), "\" width=\"", fixed(w, 2),
                     "\" height=\"", fixed(kRow - 6, 1), "\" fill=\"", fill, "\"/>\n");
      if (s.kind != Kind::kWait && w >= 10) {
        out += str_cat("<text x=\"", fixed(x + 2, 2), "\" y=\"", fixed(y + 15, 1),
                       "\" fill=\"white\">", s.micro_batch, "</text>\n");
      }
    }
  }
  out += "</svg>\n";
  return out;
}

}  // namespace ax::train
