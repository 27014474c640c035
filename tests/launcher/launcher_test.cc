// Drives the real ax-launch over fake_rank (see fake_rank.cc for its actions).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "ax/launcher/launch_options.h"
#include "ax/launcher/rank_plan.h"
#include "ax/launcher/supervisor.h"
#include "ax/topology/numa_binding.h"
#include "ax/topology/topology.h"
#include "test_files.h"

extern char** environ;

namespace ax::launcher {
namespace {

using Clock = std::chrono::steady_clock;

const std::string kFixtures = AX_TOPOLOGY_FIXTURES;

struct Launch {
  pid_t pid = -1;
  std::string out_path;
  Clock::time_point start;
};

struct Result {
  int status = -1;  // exit status, or 128+signal
  std::string out;  // stdout+stderr of ax-launch
  double seconds = 0;
};

// Starts ax-launch with `args`; the environment is ours without the variables that would change
// the plan, plus `env` ("K=V"). The topology defaults to the fixture without GPUs.
Launch start(const std::string& dir, const std::vector<std::string>& args,
             std::vector<std::string> env = {}) {
  std::vector<std::string> storage;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    std::string name = kv.substr(0, kv.find('='));
    if (name == "CUDA_VISIBLE_DEVICES" || name == "NCCL_IB_HCA" || name.rfind("AX_", 0) == 0) {
      continue;
    }
    storage.push_back(kv);
  }
  bool has_topology = false;
  for (const std::string& kv : env) has_topology |= kv.rfind("AX_TOPOLOGY_FILE=", 0) == 0;
  if (!has_topology) storage.push_back("AX_TOPOLOGY_FILE=" + kFixtures + "/no-gpu.json");
  storage.insert(storage.end(), env.begin(), env.end());
  std::vector<std::string> full{AX_LAUNCH_BIN};
  full.insert(full.end(), args.begin(), args.end());
  std::vector<char*> argv, envp;
  for (std::string& a : full) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (std::string& kv : storage) envp.push_back(kv.data());
  envp.push_back(nullptr);
  Launch l;
  l.out_path = dir + "/launcher.out";
  l.start = Clock::now();
  l.pid = fork();
  if (l.pid == 0) {
    int fd = open(l.out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    execve(argv[0], argv.data(), envp.data());
    _exit(126);
  }
  return l;
}

Result finish(const Launch& l) {
  int st = 0;
  waitpid(l.pid, &st, 0);
  Result r;
  r.seconds = std::chrono::duration<double>(Clock::now() - l.start).count();
  r.status = WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
  r.out = ax::testing::read_file(l.out_path);
  return r;
}

Result launch(const std::string& dir, const std::vector<std::string>& args,
              std::vector<std::string> env = {}) {
  return finish(start(dir, args, std::move(env)));
}

std::string rank_log(const std::string& dir, int rank) {
  return ax::testing::read_file(dir + "/logs/rank_" + std::to_string(rank) + ".log");
}

bool contains(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

std::string host() {
  char buf[256] = {};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

TEST(LaunchTest, CpuRanksGetTheEnvironmentContract) {
  std::string dir = ax::testing::temp_dir("launch_cpu");
  Result r = launch(dir, {"--nproc", "4", "--run-dir", dir, "--", AX_FAKE_RANK_BIN});
  ASSERT_EQ(r.status, 0) << r.out;
  for (int rank = 0; rank < 4; ++rank) {
    std::string log = rank_log(dir, rank);
    std::string n = std::to_string(rank);
    EXPECT_TRUE(contains(log, "AX_RANK=" + n + "\n")) << log;
    EXPECT_TRUE(contains(log, "AX_LOCAL_RANK=" + n + "\n")) << log;
    EXPECT_TRUE(contains(log, "AX_WORLD_SIZE=4\n")) << log;
    EXPECT_TRUE(contains(log, "AX_LOCAL_WORLD_SIZE=4\n")) << log;
    EXPECT_TRUE(contains(log, "AX_NODE_RANK=0\nAX_NNODES=1\n")) << log;
    EXPECT_TRUE(contains(log, "AX_ICI_MESH=1,4,1\nAX_DCN_MESH=1,1,1\n")) << log;
    // The spec itself: an `auto` one leaves the split to ax-train's plan (docs/plan.md).
    EXPECT_TRUE(contains(log, "AX_MESH_SPEC=auto\n")) << log;
    EXPECT_TRUE(contains(log, "AX_DEVICE=cpu\n")) << log;
    EXPECT_TRUE(contains(log, "AX_COORDINATOR=127.0.0.1:")) << log;
    EXPECT_TRUE(contains(log, "NCCL_IB_HCA=<unset>\n")) << log;
    EXPECT_TRUE(contains(log, "stderr line\n")) << log;
    EXPECT_TRUE(contains(log, "mempolicy=default\n")) << log;  // CPU ranks are not bound
    EXPECT_TRUE(contains(r.out, "[r" + n + "] AX_RANK=" + n + "\n")) << r.out;
    EXPECT_TRUE(contains(r.out, "[r" + n + "] stderr line\n")) << r.out;
  }
}

// Issues 25/26: on one node a pipeline's stages are inside it; every rank gets the five-number
// form, and the launch line names the five axes.
TEST(LaunchTest, PipelineAxisReachesTheRanks) {
  std::string dir = ax::testing::temp_dir("launch_pipeline");
  Result r = launch(
      dir,
      {"--nproc", "auto", "--mesh", "auto:pp=2,tp=2", "--run-dir", dir, "--", AX_FAKE_RANK_BIN},
      {"AX_TOPOLOGY_FILE=" + kFixtures + "/dgx-h100.json"});
  ASSERT_EQ(r.status, 0) << r.out;
  for (int rank = 0; rank < 8; ++rank) {
    std::string log = rank_log(dir, rank);
    EXPECT_TRUE(contains(log, "AX_ICI_MESH=2,1,2,1,2\nAX_DCN_MESH=1,1,1\n")) << log;
    EXPECT_TRUE(contains(log, "AX_MESH_SPEC=auto:pp=2,tp=2\n")) << log;
  }
  EXPECT_TRUE(contains(r.out, "ici 2,1,2,1,2 dcn 1,1,1,1,1 (pipeline,data,fsdp,seq,tensor)"))
      << r.out;
}

TEST(LaunchTest, DgxH100AutoGivesOneRankPerGpuWithItsNic) {
  std::string dir = ax::testing::temp_dir("launch_dgx");
  Result r = launch(dir, {"--nproc", "auto", "--run-dir", dir, "--", AX_FAKE_RANK_BIN},
                    {"AX_TOPOLOGY_FILE=" + kFixtures + "/dgx-h100.json"});
  ASSERT_EQ(r.status, 0) << r.out;
  for (int rank = 0; rank < 8; ++rank) {
    std::string log = rank_log(dir, rank);
    std::string n = std::to_string(rank);
    EXPECT_TRUE(contains(log, "AX_WORLD_SIZE=8\n")) << log;
    EXPECT_TRUE(contains(log, "AX_ICI_MESH=1,8,1\n")) << log;
    EXPECT_TRUE(contains(log, "AX_DEVICE=" + n + "\n")) << log;
    EXPECT_TRUE(contains(log, "NCCL_IB_HCA=mlx5_" + n + "\n")) << log;
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/logs/rank_8.log"));
}

TEST(LaunchTest, CudaVisibleDevicesDecidesOrdinals) {
  std::string dir = ax::testing::temp_dir("launch_cvd");
  Result r =
      launch(dir, {"--run-dir", dir, "--", AX_FAKE_RANK_BIN},
             {"AX_TOPOLOGY_FILE=" + kFixtures + "/dgx-h100.json", "CUDA_VISIBLE_DEVICES=6,2"});
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_FALSE(std::filesystem::exists(dir + "/logs/rank_2.log"));
  std::string r0 = rank_log(dir, 0), r1 = rank_log(dir, 1);
  EXPECT_TRUE(contains(r0, "AX_WORLD_SIZE=2\n")) << r0;
  EXPECT_TRUE(contains(r0, "AX_DEVICE=0\n")) << r0;
  EXPECT_TRUE(contains(r0, "NCCL_IB_HCA=mlx5_6\n")) << r0;  // ordinal 0 is GPU 6
  EXPECT_TRUE(contains(r1, "AX_DEVICE=1\n")) << r1;
  EXPECT_TRUE(contains(r1, "NCCL_IB_HCA=mlx5_2\n")) << r1;
}

// pcie-4gpu: GPUs 0 and 1 on NUMA node 0, GPUs 2 and 3 on node 1. A node this machine has
// becomes the child's preferred node; one it lacks (node 1 on a 1-node CI machine) leaves the
// child's policy alone, with one warning, and the set still runs.
TEST(LaunchTest, MemoryIsPreferredOnTheGpusNumaNode) {
  StatusOr<topo::Topology> node = topo::load_topology(kFixtures + "/pcie-4gpu.json");
  ASSERT_TRUE(node.ok()) << node.status().to_string();
  std::vector<int> allowed = topo::allowed_memory_nodes();
  ASSERT_FALSE(allowed.empty()) << "this kernel has no NUMA memory policy";
  auto here = [&](int n) { return std::find(allowed.begin(), allowed.end(), n) != allowed.end(); };
  std::string dir = ax::testing::temp_dir("launch_numa");
  Result r = launch(dir, {"--run-dir", dir, "--", AX_FAKE_RANK_BIN},
                    {"AX_TOPOLOGY_FILE=" + kFixtures + "/pcie-4gpu.json"});
  ASSERT_EQ(r.status, 0) << r.out;
  int bound = 0, unbound = 0;
  for (int rank = 0; rank < 4; ++rank) {
    std::string log = rank_log(dir, rank);
    size_t at = log.find("AX_DEVICE=");
    ASSERT_NE(at, std::string::npos) << log;
    int gpu = std::stoi(log.substr(at + 10));
    int numa = node->gpus.at(static_cast<size_t>(gpu)).numa_node;
    if (here(numa)) {
      EXPECT_TRUE(contains(log, "mempolicy=prefer nodes=" + std::to_string(numa) + "\n")) << log;
      ++bound;
    } else {
      EXPECT_TRUE(contains(log, "mempolicy=default\n")) << log;
      EXPECT_TRUE(contains(r.out, "NUMA node " + std::to_string(numa) + " of the GPUs of ranks"))
          << r.out;
      ++unbound;
    }
  }
  EXPECT_EQ(bound, here(0) ? 2 : 0);
  EXPECT_EQ(unbound, 4 - bound - (here(1) ? 2 : 0));
  EXPECT_EQ(contains(r.out, "their memory is not bound"), unbound > 0) << r.out;
}

TEST(LaunchTest, NodeRankAndCoordinatorFromTheEnvironment) {
  std::string dir = ax::testing::temp_dir("launch_nodes");
  Result r = launch(dir, {"--nproc", "2", "--run-dir", dir, "--", AX_FAKE_RANK_BIN},
                    {"AX_NNODES=3", "AX_NODE_RANK=1", "AX_COORDINATOR=n0:29500",
                     "AX_JOB_SECRET=" + std::string(64, 'a')});
  ASSERT_EQ(r.status, 0) << r.out;
  std::string log = rank_log(dir, 3);
  EXPECT_TRUE(contains(log, "AX_RANK=3\nAX_WORLD_SIZE=6\nAX_LOCAL_RANK=1\n")) << log;
  EXPECT_TRUE(contains(log, "AX_NODE_RANK=1\nAX_NNODES=3\n")) << log;
  EXPECT_TRUE(contains(log, "AX_DCN_MESH=3,1,1\n")) << log;
  EXPECT_TRUE(contains(log, "AX_COORDINATOR=n0:29500\n")) << log;
}

// The fingerprint fake_rank prints for a secret (FNV-1a).
std::string fingerprint(const std::string& secret) {
  uint32_t h = 2166136261u;
  for (char c : secret) h = (h ^ static_cast<unsigned char>(c)) * 16777619u;
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", h);
  return buf;
}

// The AX_JOB_SECRET line of a rank's log.
std::string secret_line(const std::string& log) {
  size_t at = log.find("AX_JOB_SECRET=");
  return at == std::string::npos ? "" : log.substr(at, log.find('\n', at) - at);
}

TEST(LaunchTest, OneNodeMakesAJobSecretEveryRankShares) {
  std::string dir = ax::testing::temp_dir("launch_secret");
  Result r = launch(dir, {"--nproc", "3", "--run-dir", dir, "--", AX_FAKE_RANK_BIN});
  ASSERT_EQ(r.status, 0) << r.out;
  const std::string line = secret_line(rank_log(dir, 0));
  EXPECT_EQ(line.rfind("AX_JOB_SECRET=<64 characters, fingerprint ", 0), 0u) << line;
  for (int rank = 1; rank < 3; ++rank) EXPECT_EQ(secret_line(rank_log(dir, rank)), line);
  // A fresh one per run.
  Result again = launch(dir, {"--nproc", "1", "--run-dir", dir, "--", AX_FAKE_RANK_BIN});
  ASSERT_EQ(again.status, 0) << again.out;
  EXPECT_NE(secret_line(rank_log(dir, 0)), line);
}

TEST(LaunchTest, SecretInTheEnvironmentIsPassedOnUnchanged) {
  std::string dir = ax::testing::temp_dir("launch_secret_env");
  const std::string secret = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
  Result r = launch(dir,
                    {"--nproc", "2", "--nnodes", "2", "--node-rank", "1", "--coordinator",
                     "n0:29500", "--run-dir", dir, "--", AX_FAKE_RANK_BIN},
                    {"AX_JOB_SECRET=" + secret});
  ASSERT_EQ(r.status, 0) << r.out;
  for (int rank : {2, 3}) {
    EXPECT_EQ(secret_line(rank_log(dir, rank)),
              "AX_JOB_SECRET=<64 characters, fingerprint " + fingerprint(secret) + ">");
  }
  EXPECT_FALSE(contains(r.out, secret)) << r.out;
}

TEST(LaunchTest, SeveralNodesWithoutASharedSecretOrAMalformedOneExit2) {
  std::string dir = ax::testing::temp_dir("launch_secret_bad");
  Result r = launch(
      dir, {"--nproc", "1", "--nnodes", "2", "--coordinator", "n0:29500", "--", AX_FAKE_RANK_BIN});
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "--nnodes 2: every node's ax-launch needs the same AX_JOB_SECRET"))
      << r.out;
  r = launch(dir, {"--nproc", "1", "--", AX_FAKE_RANK_BIN}, {"AX_JOB_SECRET=not-hex-and-short"});
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "AX_JOB_SECRET is malformed")) << r.out;
  EXPECT_FALSE(contains(r.out, "not-hex-and-short")) << r.out;
}

TEST(LaunchTest, FailingRankEndsTheSetWithItsStatus) {
  std::string dir = ax::testing::temp_dir("launch_fail");
  Result r = launch(dir, {"--nproc", "4", "--run-dir", dir, "--", AX_FAKE_RANK_BIN, "3=late-exit:7",
                          "*=sleep:60"});
  EXPECT_EQ(r.status, 7) << r.out;
  EXPECT_LT(r.seconds, 5) << r.out;
  EXPECT_TRUE(contains(r.out, "rank 3 on host " + host() + " exited with status 7")) << r.out;
  nlohmann::json error = nlohmann::json::parse(ax::testing::read_file(dir + "/error.json"));
  EXPECT_EQ(error["rank"], 3);
  EXPECT_EQ(error["exit_code"], 7);
  EXPECT_EQ(error["host"], host());
  EXPECT_EQ(error["log_file"], dir + "/logs/rank_3.log");
  EXPECT_TRUE(error.contains("time"));
}

TEST(LaunchTest, RankKilledBySignal) {
  std::string dir = ax::testing::temp_dir("launch_kill");
  Result r = launch(
      dir, {"--nproc", "2", "--run-dir", dir, "--", AX_FAKE_RANK_BIN, "1=kill:9", "*=sleep:60"});
  EXPECT_EQ(r.status, 137) << r.out;
  EXPECT_LT(r.seconds, 5) << r.out;
  EXPECT_TRUE(contains(r.out, "rank 1 on host " + host() + " was killed by signal 9 (SIGKILL)"))
      << r.out;
  nlohmann::json error = nlohmann::json::parse(ax::testing::read_file(dir + "/error.json"));
  EXPECT_EQ(error["signal"], 9);
  EXPECT_FALSE(error.contains("exit_code"));
}

TEST(LaunchTest, RankIgnoringSigtermIsKilledAfterTheGracePeriod) {
  std::string dir = ax::testing::temp_dir("launch_grace");
  Result r = launch(dir, {"--nproc", "2", "--grace-seconds", "1", "--run-dir", dir, "--",
                          AX_FAKE_RANK_BIN, "0=late-exit:5", "*=ignore-term"});
  EXPECT_EQ(r.status, 5) << r.out;
  EXPECT_GE(r.seconds, 1.4) << r.out;
  EXPECT_LT(r.seconds, 5) << r.out;
  EXPECT_TRUE(contains(r.out, "sending SIGKILL")) << r.out;
}

TEST(LaunchTest, SigtermIsForwardedAndPreemptedRanksExit75) {
  std::string dir = ax::testing::temp_dir("launch_term");
  Launch l =
      start(dir, {"--nproc", "3", "--run-dir", dir, "--", AX_FAKE_RANK_BIN, "*=wait-term:75"});
  for (int tries = 0; tries < 500; ++tries) {
    int ready = 0;
    for (int rank = 0; rank < 3; ++rank) {
      std::string path = dir + "/logs/rank_" + std::to_string(rank) + ".log";
      ready += std::filesystem::exists(path) && contains(ax::testing::read_file(path), "ready");
    }
    if (ready == 3) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(l.pid, SIGTERM);
  Result r = finish(l);
  EXPECT_EQ(r.status, 75) << r.out;
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_TRUE(contains(rank_log(dir, rank), "got signal")) << rank_log(dir, rank);
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/error.json"));
}

// supervise() in a child process of its own (the test binary's threads and signal mask stay as
// they are); its exit status, or -1 when it had not returned after `seconds` (then killed).
int supervise_in_child(const std::function<int()>& body, double seconds) {
  pid_t pid = fork();
  if (pid == 0) _exit(body());
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  int st = 0;
  while (waitpid(pid, &st, WNOHANG) == 0) {
    if (Clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

std::vector<RankPlan> one_rank() {
  RankPlan r;
  r.device = "cpu";
  r.env = {{"AX_RANK", "0"}};
  return {r};
}

// A thread that does not block SIGCHLD takes a rank's SIGCHLD from the supervisor's signalfd (in
// ax-launch on a GPU machine, likely a thread of hwloc's OpenCL plugin or NVML: on 2026-11-28 a
// world-1 launch there waited for its exited rank until `timeout` ended it; the same binary with
// such a thread preloaded hangs so on the CPU). The rank's exit is seen anyway.
TEST(SuperviseTest, RankExitIsSeenWhenAnotherThreadTakesItsSigchld) {
  std::string dir = ax::testing::temp_dir("supervise_stray_thread");
  const std::vector<RankPlan> ranks = one_rank();
  SuperviseOptions so;
  so.command = {AX_FAKE_RANK_BIN};
  so.run_dir = dir;
  so.host = host();
  // Which thread takes the signal is a race: without the supervisor's periodic reap, 1 round in
  // a few hung on a 2-core machine.
  for (int round = 0; round < 10; ++round) {
    const int status = supervise_in_child(
        [&] {
          std::atomic<bool> stop{false};
          // Running and not blocking SIGCHLD: the kernel hands it the signal the supervisor's
          // thread blocks.
          std::thread stray([&] {
            while (!stop.load()) {
            }
          });
          StatusOr<int> st = supervise(ranks, so);
          stop = true;
          stray.join();
          return st.ok() ? *st : 99;
        },
        20);
    ASSERT_EQ(status, 0) << "round " << round << (status == -1 ? ": supervise() hung" : "");
  }
  EXPECT_TRUE(contains(rank_log(dir, 0), "AX_RANK=0")) << rank_log(dir, 0);
}

// ax-launch blocks the stop signals from its first line: one that comes before the ranks start
// ends the launch without starting them.
TEST(SuperviseTest, StopSignalBeforeTheRanksStartStartsNone) {
  std::string dir = ax::testing::temp_dir("supervise_early_term");
  const std::vector<RankPlan> ranks = one_rank();
  SuperviseOptions so;
  so.command = {AX_FAKE_RANK_BIN};
  so.run_dir = dir;
  so.host = host();
  const int status = supervise_in_child(
      [&] {
        block_supervised_signals();
        kill(getpid(), SIGTERM);
        StatusOr<int> st = supervise(ranks, so);
        return st.ok() ? *st : 99;
      },
      20);
  EXPECT_EQ(status, 128 + SIGTERM);
  EXPECT_EQ(rank_log(dir, 0), "");
}

TEST(LaunchTest, MaxRestartsRestartsTheWholeSet) {
  std::string dir = ax::testing::temp_dir("launch_restart");
  std::string marker = dir + "/failed-once";
  Result r = launch(dir, {"--nproc", "2", "--max-restarts", "1", "--run-dir", dir, "--",
                          AX_FAKE_RANK_BIN, "1=fail-once:" + marker});
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "restart 1/1")) << r.out;
  EXPECT_TRUE(contains(rank_log(dir, 1), "first attempt: failing")) << rank_log(dir, 1);

  std::string dir2 = ax::testing::temp_dir("launch_no_restart");
  Result once = launch(dir2, {"--nproc", "2", "--run-dir", dir2, "--", AX_FAKE_RANK_BIN,
                              "1=fail-once:" + dir2 + "/marker"});
  EXPECT_EQ(once.status, 3) << once.out;
}

TEST(LaunchTest, CommandThatCannotRunExits127) {
  std::string dir = ax::testing::temp_dir("launch_noexec");
  Result r = launch(dir, {"--nproc", "1", "--run-dir", dir, "--", dir + "/does-not-exist"});
  EXPECT_EQ(r.status, 127) << r.out;
  EXPECT_TRUE(contains(r.out, "[r0] ax-launch: cannot run")) << r.out;
}

TEST(LaunchTest, BadCommandLinesExit2WithOneLine) {
  std::string dir = ax::testing::temp_dir("launch_bad");
  const std::vector<std::vector<std::string>> cases = {
      {"--nproc", "2"},
      {"--nproc", "2", "--"},
      {"--nproc", "zero", "--", "/bin/true"},
      {"--nproc", "0", "--", "/bin/true"},
      {"--mesh", "ici=1,2", "--", "/bin/true"},
      {"--max-restarts", "-1", "--", "/bin/true"},
      {"--bogus", "--", "/bin/true"},
      {"--nproc"},
      {"--nnodes", "2", "--", "/bin/true"},
      {"--nproc", "3", "--mesh", "ici=1,2,1;dcn=1,1,1", "--", "/bin/true"},
  };
  for (const auto& args : cases) {
    Result r = launch(dir, args);
    EXPECT_EQ(r.status, 2) << r.out;
    EXPECT_EQ(r.out.rfind("ax-launch: ", 0), 0u) << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  }
}

// A mesh that does not fit this node names the option and says what to use (the exact words per
// node kind: tests/topology/mesh_test.cc), without "node 0" or a source location.
TEST(LaunchTest, MeshThatDoesNotFitNamesTheOption) {
  std::string dir = ax::testing::temp_dir("launch_mesh_fit");
  Result r = launch(dir, {"--nproc", "2", "--mesh", "auto:tp=64", "--", "/bin/true"});
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_EQ(r.out.rfind("ax-launch: --mesh auto:tp=64: ", 0), 0u) << r.out;
  EXPECT_FALSE(contains(r.out, "node 0")) << r.out;
  EXPECT_FALSE(contains(r.out, "(at ")) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
}

TEST(RankPlanTest, VisibleTopologyByUuidAndErrors) {
  StatusOr<topo::Topology> node = topo::load_topology(kFixtures + "/dgx-h100.json");
  ASSERT_TRUE(node.ok()) << node.status().to_string();
  StatusOr<topo::Topology> v = visible_topology(*node, node->gpus[5].uuid.substr(0, 12) + ",1");
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  ASSERT_EQ(v->gpus.size(), 2u);
  EXPECT_EQ(v->gpus[0].pci_bus_id, node->gpus[5].pci_bus_id);
  EXPECT_EQ(v->gpus[1].index, 1);
  EXPECT_EQ(v->nvlinks[0][1], node->nvlinks[5][1]);
  EXPECT_FALSE(visible_topology(*node, "8").ok());
  EXPECT_FALSE(visible_topology(*node, "1,1").ok());
  EXPECT_FALSE(visible_topology(*node, "GPU-nothing").ok());
  StatusOr<topo::Topology> none = visible_topology(*node, "");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->gpus.empty());
}

TEST(RankPlanTest, BindsOnlyWhenTheCoresExist) {
  StatusOr<topo::Topology> node = topo::load_topology(kFixtures + "/dgx-h100.json");
  ASSERT_TRUE(node.ok());
  PlanInput in;
  in.coordinator = "h:1";
  in.available_cpus = {0, 1};
  StatusOr<NodePlan> plan = plan_node(*node, in);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EXPECT_TRUE(plan->ranks[0].cpus.empty());
  for (int c = 0; c < 224; ++c) in.available_cpus.push_back(c);
  plan = plan_node(*node, in);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->ranks[0].cpus, node->gpus[0].cpus);
}

TEST(RankPlanTest, MemoryNodeIsTheGpusNumaNode) {
  StatusOr<topo::Topology> node = topo::load_topology(kFixtures + "/dgx-h100.json");
  ASSERT_TRUE(node.ok());
  PlanInput in;
  in.coordinator = "h:1";
  StatusOr<NodePlan> plan = plan_node(*node, in);  // no cores available: memory still planned
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  for (const RankPlan& r : plan->ranks) {
    EXPECT_EQ(r.mem_node, node->gpus.at(static_cast<size_t>(r.gpu)).numa_node) << r.rank;
  }
  EXPECT_EQ(plan->ranks[0].mem_node, 0);
  EXPECT_EQ(plan->ranks[7].mem_node, 1);
  StatusOr<topo::Topology> cpu_node = topo::load_topology(kFixtures + "/no-gpu.json");
  ASSERT_TRUE(cpu_node.ok());
  in.nproc = 2;
  plan = plan_node(*cpu_node, in);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->ranks[1].mem_node, -1);
}

TEST(MemoryBindingTest, RejectsNodesOutOfRange) {
  EXPECT_EQ(topo::prefer_memory_node(-1), EINVAL);
  EXPECT_EQ(topo::prefer_memory_node(4096), EINVAL);
  std::vector<int> allowed = topo::allowed_memory_nodes();
  EXPECT_TRUE(std::is_sorted(allowed.begin(), allowed.end()));
}

}  // namespace
}  // namespace ax::launcher
