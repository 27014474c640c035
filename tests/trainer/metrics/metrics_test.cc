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

// ---- Stragglers (docs/reliability.md) ----------------------------------------------------------

std::vector<RankTimes> even_ranks(int n) {
  std::vector<RankTimes> v;
  for (int r = 0; r < n; ++r) v.push_back({0.002 + 0.0001 * r, 0.100 + 0.001 * r, 0.010});
  return v;
}

TEST(RankSpread, MediansMaximaAndNoStragglerOnAnEvenRun) {
  const RankSpread s = rank_spread(even_ranks(4), 0.2, 0.02);
  EXPECT_NEAR(s.compute.median_s, 0.1015, 1e-12);  // the mean of the middle two
  EXPECT_NEAR(s.compute.max_s, 0.103, 1e-12);
  EXPECT_EQ(s.compute.max_rank, 3);
  EXPECT_NEAR(s.data.median_s, 0.00215, 1e-12);
  EXPECT_EQ(s.comm.max_rank, 0);  // the lowest rank among equals
  EXPECT_EQ(s.straggler, -1);
  EXPECT_EQ(describe_straggler(s), "");
  const RankSpread three = rank_spread(even_ranks(3), 0.2, 0.02);
  EXPECT_NEAR(three.compute.median_s, 0.101, 1e-12);
}

TEST(RankSpread, ASlowRankIsNamedWithItsPhaseAndExcessOnItsSecondLine) {
  std::vector<RankTimes> ranks = even_ranks(4);
  ranks[2].compute_s += 0.050;  // slowed by 50 ms: the others wait for it in collectives
  for (int r : {0, 1, 3}) ranks[static_cast<size_t>(r)].comm_s += 0.050;
  // The first line past the margin makes it the candidate; the next one names it.
  RankSpread s = rank_spread(ranks, 0.2, 0.02);
  EXPECT_EQ(s.candidate, 2);
  EXPECT_EQ(s.straggler, -1);
  s = rank_spread(ranks, 0.2, 0.02, /*previous_candidate=*/2);
  EXPECT_EQ(s.straggler, 2);
  EXPECT_EQ(s.candidate_phase, "compute");
  EXPECT_NEAR(s.candidate_s, 0.152, 1e-12);
  EXPECT_NEAR(s.candidate_median_s, 0.102, 1e-12);
  EXPECT_EQ(s.other_candidates, 0);  // the waits in collectives never name a rank
  EXPECT_EQ(describe_straggler(s), "compute 152 ms/step, +49% over the median 102 ms");
  // Another rank was the previous line's candidate: a hiccup, nobody named yet.
  EXPECT_EQ(rank_spread(ranks, 0.2, 0.02, 1).straggler, -1);

  // Below either bound: nobody. 20 ms over a median of 102 ms is under 20 %; 25 ms over a
  // median of 2 ms is over 20 % but under the 30 ms floor.
  std::vector<RankTimes> small = even_ranks(4);
  small[1].compute_s += 0.020;
  small[3].data_s += 0.025;
  EXPECT_EQ(rank_spread(small, 0.2, 0.03, 1).candidate, -1);
  EXPECT_EQ(rank_spread(small, 0.2, 0.03, 3).candidate, -1);
  // margin 0 switches the alarm off; the figures stay.
  s = rank_spread(ranks, 0, 0.02, 2);
  EXPECT_EQ(s.candidate, -1);
  EXPECT_EQ(s.straggler, -1);
  EXPECT_NEAR(s.compute.max_s, 0.152, 1e-12);

  // Data: a rank held in loading. The larger excess wins; the rest are counted.
  ranks[1].data_s += 0.200;
  s = rank_spread(ranks, 0.2, 0.02, 1);
  EXPECT_EQ(s.straggler, 1);
  EXPECT_EQ(s.candidate_phase, "data");
  EXPECT_EQ(s.other_candidates, 1);
  EXPECT_EQ(describe_straggler(s).substr(0, 15), "data 202 ms/ste");
  EXPECT_NE(describe_straggler(s).find("(+1 more)"), std::string::npos) << describe_straggler(s);
  // Two ranks: the median is their mean, so a slow one exceeds it by half its excess.
  s = rank_spread({{0, 0.100, 0}, {0, 0.200, 0}}, 0.2, 0.02, 1);
  EXPECT_EQ(s.straggler, 1);
  EXPECT_NEAR(s.candidate_median_s, 0.150, 1e-12);
}

TEST(FormatProgress, NamesTheStragglerAtTheEnd) {
  StepMetrics m = example();
  std::vector<RankTimes> ranks = even_ranks(4);
  ranks[2].compute_s += 0.050;
  m.ranks = rank_spread(ranks, 0.2, 0.02);  // a candidate only: the line as before
  EXPECT_EQ(format_progress(m), format_progress(example()));
  m.ranks = rank_spread(ranks, 0.2, 0.02, 2);
  m.straggler_where = "host n1, local rank 2, cpu cores 4-5";
  EXPECT_EQ(format_progress(m),
            "step  120/2000 | loss 4.1234 | lr 5.99e-04 | gnorm 0.812 | 412 ms | 9.9k tok/s | "
            "MFU 41.2% of 989 TFLOP/s | ETA 12m50s | straggler: rank 2 (host n1, local rank 2, "
            "cpu cores 4-5) compute 152 ms/step, +49% over the median 102 ms");
  m.ranks = rank_spread(even_ranks(4), 0.2, 0.02, 2);  // an even run: the line as before
  EXPECT_EQ(format_progress(m), format_progress(example()));
}

TEST(MetricsLogger, WritesTheRanksFiguresAndTheStraggler) {
  const std::string run = ax::testing::temp_dir("metrics-ranks") + "/run";
  {
    auto logger = MetricsLogger::open(run);
    ASSERT_TRUE(logger.ok()) << logger.status().to_string();
    StepMetrics m = example();
    ASSERT_TRUE((*logger)->log_train(m).ok());  // one rank: no figures
    std::vector<RankTimes> ranks = even_ranks(4);
    ranks[2].compute_s += 0.050;
    m.step = 130;
    m.ranks = rank_spread(ranks, 0.2, 0.02, 2);
    ASSERT_TRUE((*logger)->log_train(m).ok());
    m.step = 140;
    m.ranks = rank_spread(even_ranks(4), 0.2, 0.02, 2);
    ASSERT_TRUE((*logger)->log_train(m).ok());
    ASSERT_TRUE((*logger)->flush().ok());
  }
  int torn = 0;
  std::vector<nlohmann::json> records = read_jsonl(run + "/metrics.jsonl", &torn);
  ASSERT_EQ(records.size(), 3u);
  EXPECT_FALSE(records[0].contains("ranks"));
  EXPECT_FALSE(records[0].contains("straggler"));
  const nlohmann::json& slow = records[1];
  EXPECT_NEAR(slow["ranks"]["compute_s"]["max"].get<double>(), 0.152, 1e-12);
  EXPECT_NEAR(slow["ranks"]["compute_s"]["median"].get<double>(), 0.102, 1e-12);
  EXPECT_EQ(slow["ranks"]["compute_s"]["max_rank"].get<int>(), 2);
  EXPECT_TRUE(slow["ranks"].contains("data_s"));
  EXPECT_TRUE(slow["ranks"].contains("comm_s"));
  EXPECT_EQ(slow["straggler"]["rank"].get<int>(), 2);
  EXPECT_EQ(slow["straggler"]["phase"].get<std::string>(), "compute");
  EXPECT_NEAR(slow["straggler"]["s"].get<double>(), 0.152, 1e-12);
  EXPECT_EQ(records[2]["straggler"].dump(), "{\"rank\":-1}");
}

}  // namespace
}  // namespace ax::train
