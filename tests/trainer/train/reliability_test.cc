// Stragglers and stuck ranks on CPU ranks (docs/reliability.md): real processes (fork), Gloo
// over the TCP store, the real train loop. A rank slowed on purpose (train.debug_slow_*) is named
// on the progress line and in metrics.jsonl; an even run names nobody; a rank held in data
// loading past the collective timeout is named, with its phase and for how long, by the job's
// one failure line, and the job ends within the timeout plus a few seconds.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ax/trainer/train/train_loop.h"
#include "model_test_util.h"
#include "test_files.h"

namespace ax::train {
namespace {

namespace fs = std::filesystem;
using testing::corpus_config;
using SteadyClock = std::chrono::steady_clock;

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

struct WorldRun {
  std::vector<int> exit_codes;     // by rank; -signal when killed, -1000 when it hung
  std::vector<std::string> errs;   // stderr by rank
  std::vector<std::string> lines;  // rank 0's progress output
  double seconds = 0;              // from the fork to the last exit
  double after_mark_s = -1;        // from the mark (mark_rank's after_step of mark_step) to the end
};

// Called by every rank after each step, as TrainOptions::after_step (false asks to stop).
using StepHook = std::function<bool(int rank, const StepResult&)>;

// Trains `config` on `world` forked CPU ranks (mesh fsdp = world, as `auto` gives one node), one
// backend thread each. Ranks still running after `deadline_s` are killed and count as hung.
// `mark_step` > 0: rank mark_rank notes the monotonic clock after that step (the job's end is
// measured from there).
WorldRun run_world(const Config& config, int world, const std::string& run_dir, double deadline_s,
                   int64_t mark_step = 0, int mark_rank = 0, const StepHook& hook = nullptr) {
  const std::string coordinator = "127.0.0.1:" + std::to_string(ax::testing::free_port());
  fs::create_directories(fs::path(run_dir).parent_path());
  const std::string mark_path = run_dir + ".mark";
  fs::remove(mark_path);
  const auto t0 = SteadyClock::now();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world; ++rank) {
    const std::string base = run_dir + ".rank" + std::to_string(rank);
    const pid_t pid = ::fork();
    if (pid == 0) {
      std::freopen((base + ".err").c_str(), "w", stderr);
      std::freopen("/dev/null", "w", stdout);
      std::ofstream out(base + ".out");
      job::JobContext ctx;
      ctx.source = job::ContextSource::kAx;
      ctx.rank = rank;
      ctx.world = world;
      ctx.local_rank = rank;
      ctx.local_world = world;
      ctx.ici_mesh = "1," + std::to_string(world) + ",1";
      ctx.dcn_mesh = "1,1,1";
      ctx.device = "cpu";
      ctx.coordinator = coordinator;
      ctx.secret = "reliability-test-secret-0123456789abcdef";
      TrainOptions options;
      options.device = "cpu";
      options.threads = 1;
      options.out = &out;
      options.context = ctx;
      options.after_step = [&](const StepResult& r) {
        out.flush();
        if (rank == mark_rank && r.step == mark_step) {
          std::ofstream(mark_path)
              << std::chrono::duration<double>(SteadyClock::now().time_since_epoch()).count();
        }
        return !hook || hook(rank, r);
      };
      StatusOr<TrainOutcome> outcome = train(config, run_dir, options);
      if (!outcome.ok()) std::fprintf(stderr, "train: %s\n", outcome.status().to_string().c_str());
      out.flush();
      std::fflush(nullptr);
      ::_exit(outcome.ok() ? 0 : 1);
    }
    pids.push_back(pid);
  }
  WorldRun run;
  run.exit_codes.assign(pids.size(), -1000);
  size_t left = pids.size();
  const auto deadline = t0 + std::chrono::duration<double>(deadline_s);
  while (left > 0 && SteadyClock::now() < deadline) {
    for (size_t r = 0; r < pids.size(); ++r) {
      if (run.exit_codes[r] != -1000) continue;
      int status = 0;
      if (::waitpid(pids[r], &status, WNOHANG) != pids[r]) continue;
      run.exit_codes[r] = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
      --left;
    }
    if (left > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const auto end = SteadyClock::now();
  run.seconds = std::chrono::duration<double>(end - t0).count();
  for (size_t r = 0; r < pids.size(); ++r) {  // hung: end them
    if (run.exit_codes[r] != -1000) continue;
    ::kill(pids[r], SIGKILL);
    ::waitpid(pids[r], nullptr, 0);
  }
  for (int rank = 0; rank < world; ++rank) {
    run.errs.push_back(read_text(run_dir + ".rank" + std::to_string(rank) + ".err"));
  }
  run.lines = lines_of(read_text(run_dir + ".rank0.out"));
  if (fs::exists(mark_path)) {
    const double mark = std::stod(read_text(mark_path));
    run.after_mark_s = std::chrono::duration<double>(end.time_since_epoch()).count() - mark;
  }
  return run;
}

std::vector<std::string> progress_lines(const WorldRun& run) {
  std::vector<std::string> out;
  for (const std::string& line : run.lines) {
    if (line.rfind("step ", 0) == 0) out.push_back(line);
  }
  return out;
}

std::vector<nlohmann::json> metrics_records(const std::string& run_dir) {
  std::vector<nlohmann::json> out;
  for (const std::string& line : lines_of(read_text(run_dir + "/metrics.jsonl"))) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.contains("loss")) out.push_back(j);
  }
  return out;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const std::string& l : lines) s += l + "\n";
  return s;
}

std::vector<std::string> base(int64_t steps, int64_t log_every) {
  return {"train.global_batch=8",
          "train.max_steps=" + std::to_string(steps),
          "train.eval_every=0",
          "train.checkpoint_every=0",
          "train.log_every=" + std::to_string(log_every),
          "train.comm_timeout_s=30"};
}

// A rank slowed by 100 ms of compute per step: past the margin on the first progress line that
// carries the ranks' figures (the second: the first is step 1, a process's warm-up, not
// compared) and named on the next, the third, with host, local rank, cores and phase; named on
// every line after, in metrics.jsonl too.
TEST(Stragglers, ASlowedRankIsNamedWithinThreeProgressLines) {
  std::vector<std::string> o = base(7, 2);
  for (const char* s :
       {"train.debug_slow_rank=2", "train.debug_slow_ms=100", "train.debug_slow_phase=compute"}) {
    o.push_back(s);
  }
  const std::string run_dir = ax::testing::temp_dir("reliability-slow") + "/run";
  const WorldRun run = run_world(corpus_config("tiny-gpt", o), 4, run_dir, 120);
  for (size_t r = 0; r < run.exit_codes.size(); ++r) {
    ASSERT_EQ(run.exit_codes[r], 0) << "rank " << r << ": " << run.errs[r];
  }
  const std::vector<std::string> lines = progress_lines(run);
  ASSERT_EQ(lines.size(), 5u) << joined(run.lines);  // steps 1, 2, 4, 6, 7
  const std::regex named(
      R"( \| straggler: rank 2 \(host [^,]+, local rank 2, cpu cores [0-9,-]+\) compute 1[0-9][0-9] ms/step, \+[0-9]+% over the median [0-9]+ ms$)");
  int first_named = -1;
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(lines[i].find("straggler: rank 0"), std::string::npos) << lines[i];
    if (first_named < 0 && std::regex_search(lines[i], named))
      first_named = static_cast<int>(i + 1);
  }
  EXPECT_EQ(lines[0].find("straggler"), std::string::npos) << lines[0];
  ASSERT_GT(first_named, 0) << joined(lines);
  EXPECT_LE(first_named, 3) << joined(lines);
  std::printf("[ measured ] rank 2 slowed by 100 ms/step named at progress line %d: %s\n",
              first_named, lines[static_cast<size_t>(first_named - 1)].c_str());
  for (size_t i = 2; i < lines.size(); ++i) {
    EXPECT_TRUE(std::regex_search(lines[i], named)) << "line " << i + 1 << ": " << lines[i];
  }

  const std::vector<nlohmann::json> records = metrics_records(run_dir);
  ASSERT_EQ(records.size(), 5u);
  EXPECT_FALSE(records[0].contains("straggler")) << records[0].dump();
  for (size_t i = 1; i < records.size(); ++i) {
    const nlohmann::json& r = records[i];
    ASSERT_TRUE(r.contains("straggler")) << r.dump();
    EXPECT_EQ(r["straggler"]["rank"].get<int>(), i == 1 ? -1 : 2) << r.dump();
    if (i == 1) continue;
    EXPECT_EQ(r["straggler"]["phase"].get<std::string>(), "compute") << r.dump();
    EXPECT_EQ(r["ranks"]["compute_s"]["max_rank"].get<int>(), 2) << r.dump();
    EXPECT_GE(r["ranks"]["compute_s"]["max"].get<double>(), 0.1) << r.dump();
    // The others wait for it in collectives: their waits exceed its own.
    EXPECT_GE(r["ranks"]["comm_s"]["median"].get<double>(), 0.05) << r.dump();
  }
}

// An even run of 4 ranks: the ranks' figures on every line (a window of one step each, the
// noisiest), and no alarm. 100 steps here; AX_RELIABILITY_EVEN_STEPS=500 runs the 500 of
// docs/reliability.md.
TEST(Stragglers, NoAlarmOnAnEvenRun) {
  const char* env = std::getenv("AX_RELIABILITY_EVEN_STEPS");
  const int64_t steps = env != nullptr ? std::atoll(env) : 100;
  ASSERT_GE(steps, 2);
  const std::string run_dir = ax::testing::temp_dir("reliability-even") + "/run";
  const WorldRun run = run_world(corpus_config("tiny-gpt", base(steps, 1)), 4, run_dir,
                                 60 + static_cast<double>(steps));
  for (size_t r = 0; r < run.exit_codes.size(); ++r) {
    ASSERT_EQ(run.exit_codes[r], 0) << "rank " << r << ": " << run.errs[r];
  }
  const std::vector<std::string> lines = progress_lines(run);
  ASSERT_EQ(lines.size(), static_cast<size_t>(steps));
  int alarms = 0;
  for (const std::string& line : lines) {
    if (line.find("straggler") != std::string::npos) {
      ++alarms;
      ADD_FAILURE() << line;
    }
  }
  const std::vector<nlohmann::json> records = metrics_records(run_dir);
  ASSERT_EQ(records.size(), static_cast<size_t>(steps));
  // The largest excess over the median of a line, per phase, in ms: the noise the margin and
  // the floor (train.straggler_min_ms) stand above.
  double compute_excess = 0, data_excess = 0, compute_median = 0;
  int hiccups = 0;  // lines past the margin (the default 20 % and 20 ms): one-line candidates
  auto past = [](const nlohmann::json& p) {
    const double median = p["median"].get<double>(), excess = p["max"].get<double>() - median;
    return excess > 0.2 * median && excess > 0.020;
  };
  for (size_t i = 1; i < records.size(); ++i) {
    const nlohmann::json& r = records[i];
    ASSERT_TRUE(r.contains("ranks")) << r.dump();
    EXPECT_EQ(r["straggler"]["rank"].get<int>(), -1) << r.dump();
    const nlohmann::json& c = r["ranks"]["compute_s"];
    const nlohmann::json& d = r["ranks"]["data_s"];
    compute_excess = std::max(compute_excess, c["max"].get<double>() - c["median"].get<double>());
    data_excess = std::max(data_excess, d["max"].get<double>() - d["median"].get<double>());
    compute_median += c["median"].get<double>() / static_cast<double>(records.size() - 1);
    hiccups += past(c) || past(d) ? 1 : 0;
  }
  std::printf(
      "[ measured ] %d alarms over an even 4-rank run of %lld steps (%zu lines, %.1f s); "
      "largest excess over a line's median: compute %.1f ms (mean median %.1f ms), data "
      "%.1f ms; %d line(s) past the margin alone (never twice running)\n",
      alarms, static_cast<long long>(steps), lines.size(), run.seconds, compute_excess * 1e3,
      compute_median * 1e3, data_excess * 1e3, hiccups);
}

// Rank 1 held in data loading at step 3 for a minute, with a collective timeout of 2 s: the
// others time out waiting for it in the step's first collective; the one failure line names
// rank 1, that it never entered that collective, that it is in data loading and for how long;
// rank 1 learns of the failure and ends too; the job ends within the timeout plus a few seconds.
TEST(StuckRanks, ARankHeldInDataLoadingIsNamedWithItsPhaseAndTime) {
  std::vector<std::string> o = base(6, 1);
  o.back() = "train.comm_timeout_s=2";
  for (const char* s : {"train.debug_slow_rank=1", "train.debug_slow_ms=60000",
                        "train.debug_slow_phase=data", "train.debug_slow_step=3"}) {
    o.push_back(s);
  }
  const std::string run_dir = ax::testing::temp_dir("reliability-stuck") + "/run";
  const WorldRun run = run_world(corpus_config("tiny-gpt", o), 4, run_dir, 60, 2, 1);
  std::string first;
  int claims = 0;
  for (size_t r = 0; r < run.exit_codes.size(); ++r) {
    EXPECT_EQ(run.exit_codes[r], 3) << "rank " << r << ": " << run.errs[r];
    int said = 0;  // every rank ends with exactly one line
    for (const std::string& line : lines_of(run.errs[r])) {
      if (line.rfind("ax-train: ", 0) == 0) ++said;
      if (line.find("stopped answering first") == std::string::npos) continue;
      ++claims;
      first = line;
    }
    EXPECT_EQ(said, 1) << "rank " << r << ": " << run.errs[r];
  }
  ASSERT_EQ(claims, 1) << run.errs[0] << run.errs[1] << run.errs[2] << run.errs[3];
  const std::regex named(
      R"(failed: rank 1 \(host [^)]+\) stopped answering first \(timed out after 2 s\): it never entered (all_gather|all_reduce|reduce_scatter) #([0-9]+) of this group \(its last there was #([0-9]+)\) and has been in data loading for ([0-9.]+) s \(step 3\)$)");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(first, m, named)) << first;
  EXPECT_EQ(std::stoll(m[3]) + 1, std::stoll(m[2])) << first;
  const double held = std::stod(m[4]);
  EXPECT_GE(held, 2.0) << first;
  EXPECT_LE(held, 12.0) << first;
  EXPECT_NE(run.errs[1].find("the job failed while this rank was in data loading ("),
            std::string::npos)
      << run.errs[1];
  EXPECT_NE(run.errs[1].find("reports this rank, rank 1 (host "), std::string::npos) << run.errs[1];
  ASSERT_GT(run.after_mark_s, 0);
  EXPECT_LT(run.after_mark_s, 2 + 8.0) << first;  // the timeout plus a few seconds
  std::printf(
      "[ measured ] the job ended %.1f s after rank 1 entered its stall (timeout 2 s); "
      "the line: %s\n",
      run.after_mark_s, first.c_str());
}

// scancel's SIGTERM reaches a job's ranks one node at a time (each node's slurmstepd; seconds
// apart under load), and the batch script forwards a USR1 after it (sbatch/lib/preemption.sh):
// every rank stops at the same step boundary, and the stop line (rank 0 alone prints it) names
// the signal that reached any rank, not "on request" when it has not reached rank 0 yet
// (tests/slurm/sbatch_cancel.sh reads that line). TERM outranks USR1 in either order, and any
// signal an after_step request; USR1 alone (a preemption) and a request alone are named as such.
TEST(StopRequests, RankZeroNamesTheSignalThatReachedAnyRank) {
  struct Case {
    const char* name;
    std::vector<int> rank0, rank1;  // raised, in this order, on that rank after step 2
    bool request_rank0;             // rank 0's after_step returns false after step 2
    const char* expected;
  };
  const Case cases[] = {
      {"term-on-rank1", {}, {SIGTERM}, false, "stopped after step 2 on signal 15;"},
      {"term-and-request", {}, {SIGTERM}, true, "stopped after step 2 on signal 15;"},
      {"usr1-and-term", {SIGUSR1}, {SIGTERM}, false, "stopped after step 2 on signal 15;"},
      {"term-then-usr1", {SIGTERM, SIGUSR1}, {}, false, "stopped after step 2 on signal 15;"},
      {"usr1-on-rank1", {}, {SIGUSR1}, false, "stopped after step 2 on signal 10;"},
      {"request-only", {}, {}, true, "stopped after step 2 on request;"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string run_dir = ax::testing::temp_dir(std::string("reliability-stop-") + c.name);
    const StepHook hook = [&c](int rank, const StepResult& r) {
      if (r.step != 2) return true;
      install_stop_handlers();  // ax-train's: a signal is noted for the step boundary, not fatal
      for (int sig : rank == 0 ? c.rank0 : c.rank1) ::raise(sig);
      return !(rank == 0 && c.request_rank0);
    };
    const WorldRun run =
        run_world(corpus_config("tiny-gpt", base(6, 1)), 2, run_dir + "/run", 120, 0, 0, hook);
    for (size_t r = 0; r < run.exit_codes.size(); ++r) {
      ASSERT_EQ(run.exit_codes[r], 0) << "rank " << r << ": " << run.errs[r];
    }
    EXPECT_NE(joined(run.lines).find(c.expected), std::string::npos) << joined(run.lines);
    EXPECT_TRUE(fs::is_directory(run_dir + "/run/checkpoints/step_00000002"));
  }
}

}  // namespace
}  // namespace ax::train
