#include "rank_runner.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "ax/trainer/train/train_loop.h"
#include "test_files.h"

namespace ax::train::testing {

namespace fs = std::filesystem;

std::string Layout::name() const {
  return (pipeline > 1 ? "pipeline" + std::to_string(pipeline) + "_" : std::string()) + "data" +
         std::to_string(data) + "_fsdp" + std::to_string(fsdp) +
         (seq > 1 ? "_seq" + std::to_string(seq) : std::string()) + "_tensor" +
         std::to_string(tensor);
}

std::string Layout::ici() const {
  const std::string dft =
      std::to_string(data) + "," + std::to_string(fsdp) + "," + std::to_string(tensor);
  if (pipeline == 1 && seq == 1) return dft;
  return std::to_string(pipeline) + "," + std::to_string(data) + "," + std::to_string(fsdp) + "," +
         std::to_string(seq) + "," + std::to_string(tensor);
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

RunResult run_ranks(const Config& config, const Layout& layout, const std::string& run_dir,
                    const Fault& fault, const std::string& device) {
  const std::string coordinator = "127.0.0.1:" + std::to_string(ax::testing::free_port());
  const std::string losses_path = run_dir + ".losses";
  fs::create_directories(fs::path(run_dir).parent_path());
  fs::remove(losses_path);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < layout.world(); ++rank) {
    const std::string err_path = run_dir + ".rank" + std::to_string(rank) + ".err";
    pid_t pid = ::fork();
    if (pid == 0) {
      std::freopen(err_path.c_str(), "w", stderr);
      std::freopen("/dev/null", "w", stdout);
      job::JobContext ctx;
      ctx.source = job::ContextSource::kAx;
      ctx.rank = rank;
      ctx.world = layout.world();
      ctx.local_rank = rank;
      ctx.local_world = layout.world();
      ctx.ici_mesh = layout.ici();
      ctx.dcn_mesh = "1,1,1";
      ctx.device = "cpu";
      ctx.coordinator = coordinator;
      ctx.secret = "rank-runner-test-secret-0123456789";
      std::ostringstream out;
      TrainOptions options;
      options.device = device;
      options.threads = 1;
      options.out = &out;
      options.context = ctx;
      options.after_step = [&](const StepResult& r) {
        if (rank == 0) {
          std::FILE* f = std::fopen(losses_path.c_str(), "a");
          std::fprintf(f, "%lld %.17g %.17g\n", static_cast<long long>(r.step), r.loss,
                       r.grad_norm);
          std::fclose(f);
        }
        if (rank == fault.rank && r.step == fault.after_step) ::raise(fault.signal);
        return r.step != fault.stop_after;
      };
      StatusOr<TrainOutcome> outcome = train(config, run_dir, options);
      if (!outcome.ok()) std::fprintf(stderr, "train: %s\n", outcome.status().to_string().c_str());
      std::ofstream(run_dir + ".rank" + std::to_string(rank) + ".out") << out.str();
      std::fflush(nullptr);
      ::_exit(outcome.ok() ? 0 : 1);
    }
    pids.push_back(pid);
  }
  std::optional<comm::testing::Stranger> stranger;
  if (fault.stranger)
    stranger.emplace(std::stoi(coordinator.substr(coordinator.rfind(':') + 1)), 2);
  RunResult result;
  result.exit_codes.assign(pids.size(), 0);
  for (size_t r = 0; r < pids.size(); ++r) {
    if (fault.signal == SIGSTOP && static_cast<int>(r) == fault.rank) continue;
    int status = 0;
    ::waitpid(pids[r], &status, 0);
    result.exit_codes[r] = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (stranger) result.stranger = stranger->stop();
  if (fault.signal == SIGSTOP && fault.rank >= 0) {  // the stopped rank: end it
    ::kill(pids[static_cast<size_t>(fault.rank)], SIGKILL);
    int status = 0;
    ::waitpid(pids[static_cast<size_t>(fault.rank)], &status, 0);
    result.exit_codes[static_cast<size_t>(fault.rank)] = -SIGSTOP;
  }
  for (int rank = 0; rank < layout.world(); ++rank) {
    result.errs.push_back(slurp(run_dir + ".rank" + std::to_string(rank) + ".err"));
    result.outs.push_back(slurp(run_dir + ".rank" + std::to_string(rank) + ".out"));
  }
  std::ifstream f(losses_path);
  long long step = 0;
  double loss = 0, grad_norm = 0;
  while (f >> step >> loss >> grad_norm) {
    result.losses.push_back(loss);
    result.grad_norms.push_back(grad_norm);
  }
  return result;
}

}  // namespace ax::train::testing
