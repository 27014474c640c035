#include "ax/trainer/metrics/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_files.h"

namespace ax::train {
namespace {

StepMetrics example() {
  StepMetrics m;
  m.step = 120;
  m.max_steps = 2000;
  m.loss = 4.1234;
  m.lr = 5.99e-4;
  m.grad_norm = 0.8123;
  m.step_time_s = 0.412;
  m.tokens_per_s = 9900;
  m.mfu = 0.412;
  m.peak_flops = 989e12;
  m.eta_s = 770;
  return m;
}

TEST(FormatProgress, TheDocumentedLine) {
  EXPECT_EQ(format_progress(example()),
            "step  120/2000 | loss 4.1234 | lr 5.99e-04 | gnorm 0.812 | 412 ms | 9.9k tok/s | "
            "MFU 41.2% of 989 TFLOP/s | ETA 12m50s");
}

TEST(FormatProgress, UnknownPeakLargeRatesSlowSteps) {
  StepMetrics m = example();
  m.peak_flops = 0;
  m.mfu = 0;
  m.tokens_per_s = 1.5e6;
  m.step_time_s = 1.78;
  m.eta_s = 3725;
  m.step = 7;
  std::string line = format_progress(m);
  EXPECT_NE(line.find("step    7/2000 |"), std::string::npos) << line;
  EXPECT_NE(line.find("| MFU n/a |"), std::string::npos) << line;
  EXPECT_NE(line.find("| 1.50M tok/s |"), std::string::npos) << line;
  EXPECT_NE(line.find("| 1.78 s |"), std::string::npos) << line;
  EXPECT_NE(line.find("| ETA 1h02m"), std::string::npos) << line;

  m.tokens_per_s = 950;
  m.peak_flops = 425e9;  // a CPU peak
  m.mfu = 0.05;
  line = format_progress(m);
  EXPECT_NE(line.find("| 950 tok/s |"), std::string::npos) << line;
  EXPECT_NE(line.find("MFU 5.0% of 425 GFLOP/s"), std::string::npos) << line;
}

std::vector<nlohmann::json> read_jsonl(const std::string& path, int* torn) {
  std::ifstream in(path);
  std::vector<nlohmann::json> records;
  std::string line;
  *torn = 0;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
      ++*torn;
    } else {
      records.push_back(j);
    }
  }
  return records;
}

TEST(MetricsLogger, WritesJsonlThatParsesBackAndAppendsOnResume) {
  const std::string dir = ax::testing::temp_dir("metrics");
  ASSERT_FALSE(dir.empty());
  std::string run = dir + "/run";
  {
    auto logger = MetricsLogger::open(run);
    ASSERT_TRUE(logger.ok()) << logger.status().to_string();
    for (int step = 10; step <= 30; step += 10) {
      StepMetrics m = example();
      m.step = step;
      m.loss = 5.0 - step / 10.0;
      ASSERT_TRUE((*logger)->log_train(m).ok());
    }
    ASSERT_TRUE((*logger)->log_eval(30, 2.0).ok());
    ASSERT_TRUE((*logger)->flush().ok());
  }
  int torn = 0;
  std::vector<nlohmann::json> records = read_jsonl(run + "/metrics.jsonl", &torn);
  ASSERT_EQ(records.size(), 4u);
  EXPECT_EQ(torn, 0);
  const nlohmann::json& first = records[0];
  for (const char* key :
       {"step", "loss", "lr", "grad_norm", "step_time_s", "tokens_per_s", "mfu"}) {
    EXPECT_TRUE(first.contains(key)) << key << " in " << first.dump();
  }
  EXPECT_EQ(first["step"].get<int64_t>(), 10);
  EXPECT_DOUBLE_EQ(first["loss"].get<double>(), 4.0);
  EXPECT_DOUBLE_EQ(first["lr"].get<double>(), 5.99e-4);
  EXPECT_DOUBLE_EQ(first["tokens_per_s"].get<double>(), 9900);
  EXPECT_DOUBLE_EQ(first["mfu"].get<double>(), 0.412);
  EXPECT_EQ(records[2]["step"].get<int64_t>(), 30);
  const nlohmann::json& eval = records[3];
  EXPECT_EQ(eval["step"].get<int64_t>(), 30);
  EXPECT_DOUBLE_EQ(eval["val_loss"].get<double>(), 2.0);
  EXPECT_NEAR(eval["val_ppl"].get<double>(), std::exp(2.0), 1e-9);

  // A crash mid-line, then a resumed run: only the torn line is lost.
  {
    std::ofstream out(run + "/metrics.jsonl", std::ios::app);
    out << "{\"step\": 40, \"lo";
  }
  {
    auto logger = MetricsLogger::open(run);
    ASSERT_TRUE(logger.ok()) << logger.status().to_string();
    StepMetrics m = example();
    m.step = 40;
    ASSERT_TRUE((*logger)->log_train(m).ok());
    ASSERT_TRUE((*logger)->flush().ok());
  }
  records = read_jsonl(run + "/metrics.jsonl", &torn);
  EXPECT_EQ(torn, 1);
  ASSERT_EQ(records.size(), 5u);
  EXPECT_EQ(records[4]["step"].get<int64_t>(), 40);
}

TEST(MetricsLogger, ReportsAnUnwritableRunDirectory) {
  const std::string dir = ax::testing::temp_dir("metrics");
  std::string file = dir + "/not_a_dir";
  std::ofstream(file) << "x";
  auto logger = MetricsLogger::open(file + "/run");
  EXPECT_FALSE(logger.ok());
}

}  // namespace
}  // namespace ax::train
