// ax-launch-bench: the launch path against the goals of issue 4 ("Performance"). Prints one table;
// docs/benchmarks-launch.md records a run and how to reproduce it.
//   - mesh derivation for 1024 nodes x 8 GPUs (the DGX H100 fixture), goal < 100 ms, and one
//     task's whole plan (plan_node: what spank_ax.so computes per task);
//   - ax-launch --nproc 8 -- /bin/true, start to exit, against its peer: the same 8 /bin/true
//     started with posix_spawn and waited for by this program. Goal: < 1 s added.
//   - a rank joining the job's TCP store (connect + the challenge-response handshake of issue 16)
//     against a bare TCP connect to a socket of this program, one rank and 8 at once. Goal: well
//     under 10 ms per rank.
// The plugin's cost in a step launch needs a Slurm cluster: bench/launch_bench.sh.
//
//   ax-launch-bench [--runs N] [--ax-launch PATH] [--fixtures DIR]
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "ax/common/cli.h"
#include "ax/common/status.h"
#include "ax/common/strings.h"
#include "ax/launcher/rank_plan.h"
#include "ax/topology/mesh.h"
#include "ax/topology/topology.h"
#include "ax/trainer/comm/store.h"

extern char** environ;

namespace ax::launcher {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kNodes = 1024;
constexpr int kChildren = 8;

struct Args {
  int runs = 20;
  std::string ax_launch = AX_LAUNCH_BIN;
  std::string fixtures = AX_TOPOLOGY_FIXTURES;
};

void add_options(CLI::App& app, Args* args) {
  app.add_option("--runs", args->runs,
                 "timed runs per row; the table shows their median (default 20)")
      ->type_name("N")
      ->check(cli::in_range(1, 10000));
  app.add_option("--ax-launch", args->ax_launch,
                 "the ax-launch binary (default: the one built with this program)")
      ->type_name("PATH");
  app.add_option("--fixtures", args->fixtures,
                 "topology fixtures (default: the source tree's topology/fixtures)")
      ->type_name("DIR");
}

struct Timing {
  double median_ms = 0;
  double min_ms = 0;
};

// Runs `body` once untimed (caches, page faults), then `runs` times.
StatusOr<Timing> time_runs(int runs, const std::function<Status()>& body) {
  AX_RETURN_IF_ERROR(body());
  std::vector<double> ms;
  for (int i = 0; i < runs; ++i) {
    Clock::time_point start = Clock::now();
    AX_RETURN_IF_ERROR(body());
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  std::sort(ms.begin(), ms.end());
  size_t n = ms.size();
  double median = n % 2 == 1 ? ms[n / 2] : (ms[n / 2 - 1] + ms[n / 2]) / 2;
  return Timing{median, ms.front()};
}

// Starts `argv` with `env` added to ours, its output to /dev/null.
StatusOr<pid_t> spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  std::vector<std::string> storage;
  for (char** e = environ; *e != nullptr; ++e) storage.emplace_back(*e);
  storage.insert(storage.end(), env.begin(), env.end());
  std::vector<char*> envp, args;
  for (std::string& kv : storage) envp.push_back(kv.data());
  envp.push_back(nullptr);
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return IoError(str_cat("spawn ", argv[0]), rc);
  return pid;
}

Status wait_ok(pid_t pid, const std::string& what) {
  int st = 0;
  if (waitpid(pid, &st, 0) != pid) return IoError(str_cat("wait for ", what), errno);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    return Internal(what, " failed (wait status ", st, ")");
  }
  return Status::Ok();
}

void row(const std::string& what, const Timing& t, const std::string& note) {
  std::printf("%-58s %9.2f %9.2f  %s\n", what.c_str(), t.median_ms, t.min_ms, note.c_str());
}

std::string vs_goal(double ms, double goal_ms) {
  return str_cat(ms < goal_ms ? "meets" : "MISSES", " the goal (< ", goal_ms, " ms)");
}

// A listening socket on the loopback whose thread accepts and closes every connection: the
// least a rank's connection to rank 0 costs.
class BareListener {
 public:
  BareListener() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 && listen(fd_, 1024) == 0 &&
        getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      addr_ = addr;
    }
    thread_ = std::thread([this] {
      for (int c; (c = accept(fd_, nullptr, nullptr)) >= 0;) close(c);
    });
  }
  ~BareListener() {
    shutdown(fd_, SHUT_RDWR);
    thread_.join();
    close(fd_);
  }
  Status connect_once() const {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int rc = connect(fd, reinterpret_cast<const sockaddr*>(&addr_), sizeof addr_);
    const int err = errno;
    close(fd);
    return rc == 0 ? Status::Ok() : IoError("connect", err);
  }

 private:
  int fd_ = -1;
  sockaddr_in addr_{};
  std::thread thread_;
};

// `ranks` threads each doing `join` once.
Status all_at_once(int ranks, const std::function<Status(int)>& join) {
  std::vector<Status> results(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) threads.emplace_back([&, r] { results[r] = join(r + 1); });
  for (std::thread& t : threads) t.join();
  for (const Status& st : results) AX_RETURN_IF_ERROR(st);
  return Status::Ok();
}

// The TCP store's admission: a rank's make_tcp_store (connect, greeting, HMAC proofs both ways)
// against a bare connect, alone and 8 ranks at once.
Status store_rows(int runs) {
  StatusOr<std::string> secret = job::new_job_secret();
  if (!secret.ok()) return secret.status();
  namespace comm = train::comm;
  StatusOr<std::shared_ptr<comm::TcpStore>> rank0 =
      comm::make_tcp_store({"127.0.0.1:0", true, 0, kChildren + 1, comm::Millis(10000), *secret});
  if (!rank0.ok()) return rank0.status();
  const std::string address = (*rank0)->bound_address();
  auto join = [&](int rank) -> Status {
    return comm::make_tcp_store({address, false, rank, kChildren + 1, comm::Millis(10000), *secret})
        .status();
  };
  BareListener bare;
  StatusOr<Timing> peer = time_runs(runs, [&] { return bare.connect_once(); });
  StatusOr<Timing> one = time_runs(runs, [&] { return join(1); });
  StatusOr<Timing> peer8 = time_runs(
      runs, [&] { return all_at_once(kChildren, [&](int) { return bare.connect_once(); }); });
  StatusOr<Timing> eight = time_runs(runs, [&] { return all_at_once(kChildren, join); });
  for (const StatusOr<Timing>* t : {&peer, &one, &peer8, &eight}) AX_RETURN_IF_ERROR(t->status());
  char note[160];
  row("TCP connect to a listening socket (the peer)", *peer, "");
  std::snprintf(note, sizeof note, "+%.3f ms over the peer; %s", one->median_ms - peer->median_ms,
                vs_goal(one->median_ms, 10).c_str());
  row("a rank joins the store: connect + HMAC handshake", *one, note);
  row("8 threads connect at once (the peer)", *peer8, "");
  const double per_rank = (eight->median_ms - peer8->median_ms) / kChildren;
  std::snprintf(note, sizeof note, "+%.3f ms per rank over the peer; %s", per_rank,
                vs_goal(per_rank, 10).c_str());
  row("8 ranks join the store at once", *eight, note);
  return Status::Ok();
}

Status run(const Args& args) {
  StatusOr<topo::Topology> dgx = topo::load_topology(args.fixtures + "/dgx-h100.json");
  if (!dgx.ok()) return dgx.status();
  std::printf("ax-launch-bench: median and best of %d runs (ms)\n", args.runs);
  std::printf("%-58s %9s %9s  %s\n", "what", "median", "best", "note");

  // Mesh derivation.
  std::vector<topo::Topology> one{*dgx};
  std::vector<topo::Topology> every(kNodes, *dgx);
  for (const auto& [spec_text, nodes, label] :
       std::vector<std::tuple<std::string, const std::vector<topo::Topology>*, std::string>>{
           {"auto", &one, "derive_mesh auto, 1024 x 8 (one topology)"},
           {"auto:tp=8", &one, "derive_mesh auto:tp=8, 1024 x 8 (one topology)"},
           {"ici=1,-1,1;dcn=-1,1,1", &one, "derive_mesh ici=1,-1,1;dcn=-1,1,1, 1024 x 8"},
           {"auto", &every, "derive_mesh auto, 1024 x 8 (1024 topologies compared)"}}) {
    StatusOr<topo::MeshSpec> spec = topo::parse_mesh_spec(spec_text);
    if (!spec.ok()) return spec.status();
    size_t ranks = 0;
    StatusOr<Timing> t = time_runs(args.runs, [&]() -> Status {
      StatusOr<topo::Mesh> mesh = topo::derive_mesh(*nodes, kNodes, kChildren, *spec);
      if (!mesh.ok()) return mesh.status();
      ranks = mesh->placement.size();
      return Status::Ok();
    });
    if (!t.ok()) return t.status();
    row(label, *t, str_cat(ranks, " ranks; ", vs_goal(t->median_ms, 100)));
  }
  PlanInput in;
  in.nnodes = kNodes;
  in.node_rank = kNodes - 1;
  in.coordinator = "n0:20000";
  StatusOr<Timing> plan =
      time_runs(args.runs, [&]() -> Status { return plan_node(*dgx, in).status(); });
  if (!plan.ok()) return plan.status();
  row("plan_node, node 1023 of 1024 (a plugin task's computation)", *plan,
      "the mesh plus 8 ranks' environment");

  // ax-launch against spawning the same children directly.
  std::string run_dir =
      (std::filesystem::temp_directory_path() / str_cat("ax-launch-bench-", getpid())).string();
  StatusOr<Timing> direct = time_runs(args.runs, [&]() -> Status {
    std::vector<pid_t> pids;
    for (int i = 0; i < kChildren; ++i) {
      StatusOr<pid_t> pid = spawn({"/bin/true"}, {});
      if (!pid.ok()) return pid.status();
      pids.push_back(*pid);
    }
    for (pid_t pid : pids) AX_RETURN_IF_ERROR(wait_ok(pid, "/bin/true"));
    return Status::Ok();
  });
  if (!direct.ok()) return direct.status();
  row("8 x /bin/true by posix_spawn + waitpid (the peer)", *direct, "");
  for (const auto& [label, env] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"ax-launch --nproc 8 -- /bin/true (this machine, discovery)", {}},
           {"ax-launch --nproc 8 -- /bin/true (dgx-h100 fixture)",
            {"AX_TOPOLOGY_FILE=" + args.fixtures + "/dgx-h100.json"}}}) {
    std::vector<std::string> argv{args.ax_launch, "--nproc", "8",        "--run-dir",
                                  run_dir,        "--",      "/bin/true"};
    StatusOr<Timing> t = time_runs(args.runs, [&]() -> Status {
      StatusOr<pid_t> pid = spawn(argv, env);
      if (!pid.ok()) return pid.status();
      return wait_ok(*pid, "ax-launch");
    });
    if (!t.ok()) return t.status();
    double added = t->median_ms - direct->median_ms;
    char note[160];
    std::snprintf(note, sizeof note, "%.1fx the peer, +%.1f ms; %s",
                  t->median_ms / direct->median_ms, added, vs_goal(added, 1000).c_str());
    row(label, *t, note);
  }
  std::error_code ec;
  std::filesystem::remove_all(run_dir, ec);
  return store_rows(args.runs);
}

}  // namespace
}  // namespace ax::launcher

int main(int argc, char** argv) {
  CLI::App app{
      "Times the launch path (mesh derivation, ax-launch, joining the TCP store) against\n"
      "its peers; docs/benchmarks-launch.md.",
      "ax-launch-bench"};
  ax::cli::configure(app);
  ax::launcher::Args args;
  ax::launcher::add_options(app, &args);
  if (std::optional<int> exit = ax::cli::parse_or_exit(app, argc, argv)) return *exit;
  ax::Status s = ax::launcher::run(args);
  if (!s.ok()) {
    std::fprintf(stderr, "ax-launch-bench: %s\n", s.message().c_str());
    return 1;
  }
  return 0;
}
