// The TensorBoard files ax writes, read back by the independent decoder (tfevents_decoder.h).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "ax/trainer/metrics/metrics.h"
#include "crc32c.h"  // the writer's, private to the library
#include "test_files.h"
#include "tfevents_decoder.h"

namespace ax::train {
namespace {

using ax_test::tensorboard::Event;

// RFC 3720 appendix B.4 and the customary check value.
struct CrcVector {
  std::vector<uint8_t> data;
  uint32_t crc;
};

std::vector<CrcVector> crc_vectors() {
  std::vector<CrcVector> v;
  v.push_back({std::vector<uint8_t>{'1', '2', '3', '4', '5', '6', '7', '8', '9'}, 0xE3069283u});
  v.push_back({std::vector<uint8_t>(32, 0x00), 0x8A9136AAu});
  v.push_back({std::vector<uint8_t>(32, 0xFF), 0x62A8AB43u});
  std::vector<uint8_t> ascending(32), descending(32);
  for (int i = 0; i < 32; ++i) {
    ascending[i] = static_cast<uint8_t>(i);
    descending[i] = static_cast<uint8_t>(31 - i);
  }
  v.push_back({ascending, 0x46DD794Eu});
  v.push_back({descending, 0x113FDB5Cu});
  v.push_back({{}, 0u});
  return v;
}

TEST(TensorBoardCrc32c, KnownVectors) {
  for (const CrcVector& v : crc_vectors()) {
    EXPECT_EQ(crc32c(v.data.data(), v.data.size()), v.crc);
    EXPECT_EQ(ax_test::crc32c_bitwise(v.data.data(), v.data.size()), v.crc);
  }
}

std::vector<Event> decode(const std::string& path) {
  std::vector<Event> events;
  std::string error;
  EXPECT_TRUE(ax_test::read_events(path, &events, &error)) << path << ": " << error;
  return events;
}

std::vector<std::string> event_files(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

void expect_header(const Event& e, double before) {
  EXPECT_EQ(e.what_case(), Event::kFileVersion);
  EXPECT_EQ(e.file_version(), "brain.Event:2");
  EXPECT_GE(e.wall_time(), before - 1);
  EXPECT_LE(e.wall_time(), static_cast<double>(std::time(nullptr)) + 1);
}

void expect_scalar(const Event& e, const std::string& tag, int64_t step, float value) {
  ASSERT_EQ(e.what_case(), Event::kSummary);
  ASSERT_EQ(e.summary().value_size(), 1);
  EXPECT_EQ(e.summary().value(0).tag(), tag);
  EXPECT_EQ(e.summary().value(0).simple_value(), value) << tag;
  EXPECT_EQ(e.step(), step) << tag;
  EXPECT_GT(e.wall_time(), 1.6e9);
}

TEST(TensorBoardWriter, ScalarsDecodeWithTheGeneratedClasses) {
  const std::string dir = ax::testing::temp_dir("metrics");
  std::string tb = dir + "/nested/tensorboard";  // created by open()
  double before = static_cast<double>(std::time(nullptr));
  auto writer = TensorBoardWriter::open(tb);
  ASSERT_TRUE(writer.ok()) << writer.status().to_string();

  char host[HOST_NAME_MAX + 1] = {};
  ASSERT_EQ(gethostname(host, sizeof host - 1), 0);
  std::string name = std::filesystem::path((*writer)->path()).filename().string();
  const std::string prefix = "events.out.tfevents.";
  const std::string suffix = std::string(".") + host;
  ASSERT_GT(name.size(), prefix.size() + suffix.size()) << name;
  EXPECT_EQ(name.substr(0, prefix.size()), prefix);
  EXPECT_EQ(name.substr(name.size() - suffix.size()), suffix);
  std::string seconds = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  EXPECT_EQ(seconds.size(), 10u) << name;
  EXPECT_EQ(seconds.find_first_not_of("0123456789"), std::string::npos) << name;

  struct Scalar {
    std::string tag;
    int64_t step;
    double value;
  };
  const std::vector<Scalar> scalars = {
      {"train/loss", 0, 10.5},
      {"train/loss", 1, 9.25},
      {"train/lr", 1, 6e-4},
      {"eval/ppl", 1'000'000'000'000, 1e30},
      {"train/negative step", -3, -0.125},
      {std::string(300, 't'), 128, 3.0},  // a tag longer than one varint byte
  };
  for (const Scalar& s : scalars) ASSERT_TRUE((*writer)->add_scalar(s.tag, s.step, s.value).ok());
  ASSERT_TRUE((*writer)->flush().ok());

  std::vector<Event> events = decode((*writer)->path());
  ASSERT_EQ(events.size(), scalars.size() + 1);
  expect_header(events[0], before);
  for (size_t i = 0; i < scalars.size(); ++i) {
    expect_scalar(events[i + 1], scalars[i].tag, scalars[i].step,
                  static_cast<float>(scalars[i].value));
  }
}

// A resumed run's SessionLog START, which TensorBoard reads as "drop what earlier files hold for
// this step and later ones".
TEST(TensorBoardWriter, SessionStartDecodesAsTensorBoardReadsIt) {
  const std::string dir = ax::testing::temp_dir("metrics");
  auto writer = TensorBoardWriter::open(dir);
  ASSERT_TRUE(writer.ok()) << writer.status().to_string();
  ASSERT_TRUE((*writer)->add_session_start(301).ok());
  ASSERT_TRUE((*writer)->add_scalar("train/loss", 301, 2.5).ok());
  ASSERT_TRUE((*writer)->flush().ok());
  std::vector<Event> events = decode((*writer)->path());
  ASSERT_EQ(events.size(), 3u);
  ASSERT_TRUE(events[1].has_session_log());
  EXPECT_EQ(events[1].step(), 301);
  EXPECT_EQ(events[1].session_log().status(), ax_test::tensorboard::SessionLog::START);
  expect_scalar(events[2], "train/loss", 301, 2.5f);
}

TEST(TensorBoardWriter, DecoderNoticesCorruption) {
  const std::string dir = ax::testing::temp_dir("metrics");
  auto writer = TensorBoardWriter::open(dir);
  ASSERT_TRUE(writer.ok()) << writer.status().to_string();
  ASSERT_TRUE((*writer)->add_scalar("train/loss", 5, 1.0).ok());
  std::string path = (*writer)->path();
  writer->reset();

  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  for (size_t flip : {size_t{0}, size_t{9}, size_t{20}, bytes.size() - 1}) {
    std::string corrupt = bytes;
    corrupt[flip] = static_cast<char>(corrupt[flip] ^ 0x40);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << corrupt;
    std::vector<Event> events;
    std::string error;
    EXPECT_FALSE(ax_test::read_events(path, &events, &error)) << "flipped byte " << flip;
    EXPECT_NE(error.find("mismatch"), std::string::npos) << error;
  }
}

TEST(TensorBoardWriter, TwoWritersInOneSecondUseTwoFiles) {
  const std::string dir = ax::testing::temp_dir("metrics");
  auto a = TensorBoardWriter::open(dir);
  auto b = TensorBoardWriter::open(dir);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE((*a)->path(), (*b)->path());
  ASSERT_TRUE((*a)->add_scalar("a", 1, 1).ok());
  ASSERT_TRUE((*b)->add_scalar("b", 1, 2).ok());
  EXPECT_EQ(decode((*a)->path()).size(), 2u);
  EXPECT_EQ(decode((*b)->path()).size(), 2u);
}

TEST(MetricsLogger, TensorBoardHasTheTrainAndEvalScalars) {
  const std::string dir = ax::testing::temp_dir("metrics");
  double before = static_cast<double>(std::time(nullptr));
  {
    auto logger = MetricsLogger::open(dir);
    ASSERT_TRUE(logger.ok()) << logger.status().to_string();
    StepMetrics m;
    m.step = 50;
    m.max_steps = 100;
    m.loss = 3.5;
    m.lr = 1e-3;
    m.grad_norm = 0.75;
    m.step_time_s = 0.25;
    m.tokens_per_s = 4096;
    m.mfu = 0.5;
    m.peak_flops = 1e12;
    ASSERT_TRUE((*logger)->log_train(m).ok());
    ASSERT_TRUE((*logger)->log_eval(50, 2.5).ok());
    ASSERT_TRUE((*logger)->flush().ok());
  }
  std::vector<std::string> files = event_files(dir + "/tensorboard");
  ASSERT_EQ(files.size(), 1u);
  std::vector<Event> events = decode(files[0]);
  ASSERT_EQ(events.size(), 9u);
  expect_header(events[0], before);
  expect_scalar(events[1], "train/loss", 50, 3.5f);
  expect_scalar(events[2], "train/lr", 50, 1e-3f);
  expect_scalar(events[3], "train/grad_norm", 50, 0.75f);
  expect_scalar(events[4], "train/step_time_s", 50, 0.25f);
  expect_scalar(events[5], "train/tokens_per_s", 50, 4096.0f);
  expect_scalar(events[6], "train/mfu", 50, 0.5f);
  expect_scalar(events[7], "eval/loss", 50, 2.5f);
  expect_scalar(events[8], "eval/ppl", 50, static_cast<float>(std::exp(2.5)));
}

// A task evaluation: one metrics.jsonl record {"step", "task", scores...} with whole numbers as
// integers, and eval/<task>/<name> scalars.
TEST(MetricsLogger, TaskRecordAndScalars) {
  const std::string dir = ax::testing::temp_dir("metrics");
  {
    auto logger = MetricsLogger::open(dir);
    ASSERT_TRUE(logger.ok()) << logger.status().to_string();
    ASSERT_TRUE((*logger)
                    ->log_task(70, "mnli", {{"accuracy", 62.5}, {"correct", 5}, {"examples", 8}})
                    .ok());
    ASSERT_TRUE((*logger)->flush().ok());
  }
  std::ifstream in(dir + "/metrics.jsonl");
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  EXPECT_EQ(line, R"({"step":70,"task":"mnli","accuracy":62.5,"correct":5,"examples":8})");
  std::vector<std::string> files = event_files(dir + "/tensorboard");
  ASSERT_EQ(files.size(), 1u);
  std::vector<Event> events = decode(files[0]);
  ASSERT_EQ(events.size(), 4u);
  expect_scalar(events[1], "eval/mnli/accuracy", 70, 62.5f);
  expect_scalar(events[2], "eval/mnli/correct", 70, 5.0f);
  expect_scalar(events[3], "eval/mnli/examples", 70, 8.0f);
}

}  // namespace
}  // namespace ax::train
