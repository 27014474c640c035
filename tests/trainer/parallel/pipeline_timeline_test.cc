// Pipeline timelines (pipeline_timeline.h): the recorder, the waiting fraction, the trace file and
// the two drawings.
#include "ax/trainer/parallel/pipeline_timeline.h"

#include <gtest/gtest.h>

#include <string>

namespace ax::train {
namespace {

using Kind = PipelineSpan::Kind;

StageTimeline timeline(int stage, std::vector<PipelineSpan> spans, double seconds = 1.0) {
  StageTimeline t;
  t.step = 7;
  t.rank = stage * 2;
  t.stage = stage;
  t.stages = 2;
  t.seconds = seconds;
  t.spans = std::move(spans);
  return t;
}

// Stage 0 of 1F1B over two micro-batches: both forwards, wait for the first gradient, both
// backwards, wait; stage 1: wait for the first activation, then F B F B and the step's end.
std::vector<StageTimeline> two_stages() {
  return {timeline(0, {{Kind::kForward, 0, 0, 0.0, 0.1},
                       {Kind::kForward, 1, 0, 0.1, 0.2},
                       {Kind::kWait, -1, 0, 0.2, 0.4},
                       {Kind::kBackward, 0, 0, 0.4, 0.6},
                       {Kind::kBackward, 1, 0, 0.6, 0.8},
                       {Kind::kWait, -1, 0, 0.8, 1.0}}),
          timeline(1, {{Kind::kWait, -1, 0, 0.0, 0.1},
                       {Kind::kForward, 0, 0, 0.1, 0.2},
                       {Kind::kBackward, 0, 0, 0.2, 0.4},
                       {Kind::kForward, 1, 0, 0.4, 0.5},
                       {Kind::kBackward, 1, 0, 0.5, 0.7},
                       {Kind::kWait, -1, 0, 0.7, 1.0}})};
}

TEST(PipelineTimeline, RecorderTimesSpansFromTheStepStart) {
  PipelineRecorder r;
  r.begin(10.0);
  r.add(Kind::kWait, 3, 0, 10.0, 10.25);  // a wait has no micro-batch
  r.add(Kind::kForward, 0, 1, 10.25, 10.5);
  r.add(Kind::kBackward, 0, 1, 10.5, 10.75);
  r.end(11.0);
  const StageTimeline t = r.timeline(5, 3, 1, 4);
  EXPECT_EQ(t.step, 5);
  EXPECT_EQ(t.rank, 3);
  EXPECT_EQ(t.stage, 1);
  EXPECT_EQ(t.stages, 4);
  EXPECT_DOUBLE_EQ(t.seconds, 1.0);
  ASSERT_EQ(t.spans.size(), 3u);
  EXPECT_EQ(t.spans[0], (PipelineSpan{Kind::kWait, -1, 0, 0.0, 0.25}));
  EXPECT_EQ(t.spans[1], (PipelineSpan{Kind::kForward, 0, 1, 0.25, 0.5}));
  EXPECT_DOUBLE_EQ(busy_seconds(t), 0.5);
  EXPECT_DOUBLE_EQ(waiting_fraction(t), 0.5);  // waiting 0.25 s, done for the last 0.25 s
  EXPECT_DOUBLE_EQ(waiting_fraction(t, 2.0), 0.75);
  // A new step starts empty.
  r.begin(20.0);
  r.end(20.5);
  EXPECT_TRUE(r.timeline(6, 3, 1, 4).spans.empty());
  EXPECT_DOUBLE_EQ(r.timeline(6, 3, 1, 4).seconds, 0.5);
}

TEST(PipelineTimeline, WaitingFraction) {
  const std::vector<StageTimeline> s = two_stages();
  EXPECT_NEAR(waiting_fraction(s[0]), 0.4, 1e-12);
  EXPECT_NEAR(waiting_fraction(s[1]), 0.4, 1e-12);
  EXPECT_EQ(waiting_fraction(timeline(0, {}, 0.0)), 0.0);
}

TEST(PipelineTimeline, TraceFileRoundTrips) {
  for (const StageTimeline& t : two_stages()) {
    const std::string text = format_stage_timeline(t);
    EXPECT_EQ(text.substr(0, text.find('\n')),
              "ax-pipeline-trace 1 step=7 rank=" + std::to_string(t.rank) +
                  " stage=" + std::to_string(t.stage) + " stages=2 seconds=1.000000000");
    StatusOr<StageTimeline> back = parse_stage_timeline(text);
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(*back, t);
  }
}

TEST(PipelineTimeline, BadTracesAreRefusedWithTheirLine) {
  EXPECT_FALSE(parse_stage_timeline("").ok());
  EXPECT_FALSE(parse_stage_timeline("hello\n").ok());
  EXPECT_FALSE(
      parse_stage_timeline("ax-pipeline-trace 1 step=1 rank=0 stage=2 stages=2 seconds=1\n").ok());
  EXPECT_FALSE(parse_stage_timeline("ax-pipeline-trace 1 step=1 rank=0 stage=0 stages=2\n").ok());
  const std::string head = "ax-pipeline-trace 1 step=1 rank=0 stage=0 stages=2 seconds=1\n";
  EXPECT_TRUE(parse_stage_timeline(head).ok());
  StatusOr<StageTimeline> bad = parse_stage_timeline(head + "F 0 0 0.1 0.2\nX 1 0 0.2 0.3\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "pipeline trace line 3 'X 1 0 0.2 0.3' is not 'F|B|W <micro-batch> <chunk> <start> "
            "<end>'");
  EXPECT_FALSE(parse_stage_timeline(head + "B 0 0 0.3 0.2\n").ok());  // ends before it starts
}

TEST(PipelineTimeline, TextDrawsEachStageOnARow) {
  const std::string text = draw_timeline_text(two_stages(), 10);
  EXPECT_NE(text.find("stage 0 (rank 0) |01..aabb..| waiting 40.0 %\n"), std::string::npos) << text;
  EXPECT_NE(text.find("stage 1 (rank 2) |.0aa1bb...| waiting 40.0 %\n"), std::string::npos) << text;
  EXPECT_NE(text.find("mean waiting: 40.0 % of the step\n"), std::string::npos) << text;
  EXPECT_EQ(text.substr(0, text.find(',')), "step 7");
  std::vector<StageTimeline> s = two_stages();
  s[1] = timeline(1, {{Kind::kForward, 12, 0, 0.0, 0.5}}, 0.5);
  // A stage whose step ended earlier leaves the rest of its row blank, and that time counts as
  // waiting: the others were still running.
  EXPECT_NE(draw_timeline_text(s, 10).find("|22222     | waiting 50.0 %"), std::string::npos);
}

TEST(PipelineTimeline, SvgHasABoxPerSpan) {
  const std::string svg = draw_timeline_svg(two_stages());
  EXPECT_EQ(svg.rfind("<svg ", 0), 0u);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  size_t rects = 0;
  for (size_t at = svg.find("<rect"); at != std::string::npos; at = svg.find("<rect", at + 1)) {
    ++rects;
  }
  EXPECT_EQ(rects, 12u);
  EXPECT_NE(svg.find("fill=\"#bab0ac\""), std::string::npos);  // waiting
  EXPECT_NE(svg.find(">stage 1 40.0%<"), std::string::npos);
}

}  // namespace
}  // namespace ax::train
