// ax-store-bench: rank 0's TCP store serving thousands of ranks at once (issue 27, "The store at
// scale"; docs/reliability.md records a run). This process hosts the store as rank 0 does; the
// other ranks are threads of a few client processes (this program again), one TCP connection
// each, so that the server sees what a job's start-up makes it see:
//
//   1. join: connect, the challenge-response handshake (HMAC-SHA256 both ways), the RANK request;
//   2. rendezvous: hosts/<rank>, then for each group of the mesh with more than one rank (world,
//      data, fsdp, replica, fsdp-prefetch; fsdp over a node's GPUs, data across nodes, as the
//      plugin's auto mesh) the instance counter and the NCCL id: group rank 0 sets it, the
//      others wait for it (the same calls as nccl_communicator.cc, through comm_internal.h);
//   3. the resume round: one store_all_gather, as ax-train's resume() makes at every start (rank
//      0's proposal, empty strings from the others, unless --gather-bytes);
//   4. a barrier: Store::sync().
//
// All ranks start together (the worst case for the accept queue); every phase is timed to the
// moment the last rank finished it. The server's memory is this process's RSS before the
// store and after the barrier, and its peak in between.
//
//   ax-store-bench [--ranks 4096] [--procs 16] [--gpus-per-node 8] [--gather-bytes 0]
//                  [--timeout 300]
#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ax/common/cli.h"
#include "ax/common/status.h"
#include "ax/common/strings.h"
#include "ax/trainer/comm/communicator.h"
#include "ax/trainer/comm/store.h"
#include "comm_internal.h"

extern char** environ;

namespace ax::bench {
namespace comm = ax::train::comm;
namespace {

using Clock = std::chrono::steady_clock;
using comm::Millis;

constexpr const char* kClientFlag = "--client-process";
constexpr int kPhases = 4;
constexpr const char* kPhaseNames[kPhases] = {
    "join: connect, HMAC handshake, RANK",
    "rendezvous: hosts, group counters, NCCL ids",
    "resume round: one all-gather",
    "barrier: Store::sync",
};

struct Args {
  int ranks = 4096;
  int procs = 16;
  int gpus_per_node = 8;
  int gather_bytes = 0;
  int timeout_s = 300;
};

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

// hosts/<rank> and, for every group of more than one rank, its instance counter and NCCL id
// (nccl_communicator.cc's store calls; a group of one makes none).
Status rendezvous(comm::Store& store, int rank, const Args& a, Millis timeout) {
  const int fsdp = std::min(a.gpus_per_node, a.ranks);
  const comm::MeshCoords c = comm::MeshCoords::of(rank, a.ranks / fsdp, fsdp, 1);
  AX_RETURN_IF_ERROR(store.set(str_cat("hosts/", rank), str_cat("node", rank / fsdp)));
  const std::vector<int> world = [&] {
    std::vector<int> w(static_cast<size_t>(a.ranks));
    for (int r = 0; r < a.ranks; ++r) w[static_cast<size_t>(r)] = r;
    return w;
  }();
  const std::pair<std::string, std::vector<int>> groups[] = {
      {"world", world},
      {str_cat("data[f=", c.f, ",t=", c.t, "]"), c.data_group()},
      {str_cat("fsdp[d=", c.d, ",t=", c.t, "]"), c.fsdp_group()},
      {str_cat("tensor[d=", c.d, ",f=", c.f, "]"), c.tensor_group()},
      {str_cat("replica[t=", c.t, "]"), c.replica_group()},
      {str_cat("fsdp-prefetch[d=", c.d, ",t=", c.t, "]"), c.fsdp_group()},
  };
  for (const auto& [tag, ranks] : groups) {
    if (ranks.size() < 2) continue;
    const int size = static_cast<int>(ranks.size());
    const int group_rank =
        static_cast<int>(std::find(ranks.begin(), ranks.end(), rank) - ranks.begin());
    AX_ASSIGN_OR_RETURN(int64_t instance, comm::internal::group_instance(store, tag, size));
    const std::string prefix = str_cat(tag, "/", instance);
    auto make_id = []() -> StatusOr<std::string> { return std::string(128, 'i'); };
    AX_RETURN_IF_ERROR(comm::internal::exchange_unique_id(store, prefix, tag, ranks[0], group_rank,
                                                          make_id, timeout)
                           .status());
  }
  return Status::Ok();
}

// What one rank does, phase by phase; `ends` gets the steady-clock time (ns) at which each phase
// finished. Rank 0's store exists before the others start, so its join is already done.
Status run_rank(const std::shared_ptr<comm::TcpStore>& given, const std::string& address,
                const std::string& secret, int rank, const Args& a, int64_t ends[kPhases]) {
  const Millis timeout(int64_t{a.timeout_s} * 1000);
  std::shared_ptr<comm::TcpStore> store = given;
  if (!store) {
    comm::TcpStoreOptions o;
    o.host_port = address;
    o.rank = rank;
    o.world = a.ranks;
    o.connect_timeout = timeout;
    o.secret = secret;
    StatusOr<std::shared_ptr<comm::TcpStore>> joined = comm::make_tcp_store(o);
    if (!joined.ok()) return joined.status().with_context("phase 0");
    store = *joined;
  }
  ends[0] = now_ns();

  if (Status st = rendezvous(*store, rank, a, timeout); !st.ok()) {
    return st.with_context("phase 1");
  }
  ends[1] = now_ns();

  std::string value = a.gather_bytes > 0 ? std::string(static_cast<size_t>(a.gather_bytes), 'v')
                      : rank == 0        ? std::string("{\"moved\":[]}")
                                         : std::string();
  StatusOr<std::vector<std::string>> values =
      comm::store_all_gather(*store, "resume/0", rank, a.ranks, value, timeout);
  if (!values.ok()) return values.status().with_context("phase 2");
  if (values->size() != static_cast<size_t>(a.ranks) || (*values)[0].empty()) {
    return Internal("phase 2: the all-gather returned ", values->size(), " values");
  }
  ends[2] = now_ns();

  if (Status st = store->sync(timeout); !st.ok()) return st.with_context("phase 3");
  ends[3] = now_ns();
  return Status::Ok();
}

// --- a client process: ranks [first, first + count) ----------------------------------------

int client_main(int argc, char** argv) {
  if (argc != 9) {
    std::fprintf(stderr, "ax-store-bench: %s ADDRESS FIRST COUNT RANKS GPN GATHER TIMEOUT\n",
                 kClientFlag);
    return 2;
  }
  const std::string address = argv[2];
  const int first = std::atoi(argv[3]);
  const int count = std::atoi(argv[4]);
  Args a;
  a.ranks = std::atoi(argv[5]);
  a.gpus_per_node = std::atoi(argv[6]);
  a.gather_bytes = std::atoi(argv[7]);
  a.timeout_s = std::atoi(argv[8]);
  const char* secret = std::getenv("AX_JOB_SECRET");
  if (secret == nullptr) return 2;

  std::mutex mu;
  std::condition_variable cv;
  bool go = false;
  std::vector<std::array<int64_t, kPhases>> ends(static_cast<size_t>(count));
  std::vector<Status> results(static_cast<size_t>(count));
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) {
    threads.emplace_back([&, i] {
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return go; });
      }
      results[static_cast<size_t>(i)] =
          run_rank(nullptr, address, secret, first + i, a, ends[static_cast<size_t>(i)].data());
    });
  }
  std::printf("ready\n");
  std::fflush(stdout);
  char c = 0;
  if (read(STDIN_FILENO, &c, 1) != 1) return 2;
  {
    std::lock_guard<std::mutex> lock(mu);
    go = true;
  }
  cv.notify_all();
  for (std::thread& t : threads) t.join();
  int rc = 0;
  for (int i = 0; i < count; ++i) {
    const Status& s = results[static_cast<size_t>(i)];
    if (!s.ok()) {
      std::printf("error %d %s\n", first + i, s.to_string().c_str());
      rc = 1;
      continue;
    }
    const auto& e = ends[static_cast<size_t>(i)];
    std::printf("rank %d %lld %lld %lld %lld\n", first + i, static_cast<long long>(e[0]),
                static_cast<long long>(e[1]), static_cast<long long>(e[2]),
                static_cast<long long>(e[3]));
  }
  std::fflush(stdout);
  return rc;
}

// --- the parent: rank 0 and its store --------------------------------------------------------

// "VmRSS" / "VmHWM" of this process in bytes.
int64_t status_bytes(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0) return std::atoll(line.c_str() + std::strlen(field) + 1) * 1024;
  }
  return -1;
}

double mb(int64_t bytes) { return static_cast<double>(bytes) / 1e6; }

// CPU seconds (user + system) of this process's threads other than the calling one: once rank
// 0's thread has ended, the store server's thread.
double other_threads_cpu_s() {
  const long tick = sysconf(_SC_CLK_TCK);
  const std::string self = std::to_string(gettid());
  double total = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    if (task.path().filename() == self) continue;
    std::ifstream in(task.path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // Fields after the command name's closing parenthesis: utime and stime are the 12th and 13th.
    std::istringstream rest(stat.substr(stat.rfind(')') + 2));
    std::string field;
    double ticks = 0;
    for (int i = 1; i <= 13 && rest >> field; ++i) {
      if (i >= 12) ticks += std::atof(field.c_str());
    }
    total += ticks / static_cast<double>(tick);
  }
  return total;
}

struct Child {
  pid_t pid = -1;
  int to = -1;           // its stdin
  FILE* from = nullptr;  // its stdout
  int first = 0, count = 0;
};

StatusOr<Child> spawn_client(const std::string& address, const std::string& secret, int first,
                             int count, const Args& a) {
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) return IoError("pipe", errno);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
  std::vector<std::string> args = {"ax-store-bench",
                                   kClientFlag,
                                   address,
                                   std::to_string(first),
                                   std::to_string(count),
                                   std::to_string(a.ranks),
                                   std::to_string(a.gpus_per_node),
                                   std::to_string(a.gather_bytes),
                                   std::to_string(a.timeout_s)};
  std::vector<char*> argv;
  for (std::string& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  // The secret reaches the child through its environment, as a launcher hands it to ranks.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "AX_JOB_SECRET=", 14) != 0) env_strings.emplace_back(*e);
  }
  env_strings.push_back("AX_JOB_SECRET=" + secret);
  std::vector<char*> envp;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  Child c;
  const int rc = posix_spawn(&c.pid, "/proc/self/exe", &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  close(in[0]);
  close(out[1]);
  if (rc != 0) {
    close(in[1]);
    close(out[0]);
    return IoError("posix_spawn /proc/self/exe", rc);
  }
  c.to = in[1];
  c.from = fdopen(out[0], "r");
  c.first = first;
  c.count = count;
  return c;
}

// CPU seconds of the waited-for client processes.
double children_cpu_s() {
  rusage ru{};
  getrusage(RUSAGE_CHILDREN, &ru);
  auto sec = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return sec(ru.ru_utime) + sec(ru.ru_stime);
}

std::string descriptor_limit() {
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  auto text = [](rlim_t v) {
    return v == RLIM_INFINITY ? std::string("unlimited") : std::to_string(v);
  };
  return str_cat(text(rl.rlim_cur), " (hard ", text(rl.rlim_max), ")");
}

Status run(const Args& a) {
  if (a.ranks < 2 || a.procs < 1 || a.procs >= a.ranks || a.gpus_per_node < 1 ||
      a.ranks % std::min(a.gpus_per_node, a.ranks) != 0) {
    return InvalidArgument(
        "--ranks must be at least 2, above --procs, and a multiple of "
        "--gpus-per-node");
  }
  const std::string secret(64, 'b');
  const std::string limit_before = descriptor_limit();
  std::ofstream("/proc/self/clear_refs") << "5";  // VmHWM from here on
  const int64_t rss_before = status_bytes("VmRSS:");

  // Rank 0: the server and its own client, as make_tcp_store does for a job's rank 0.
  comm::TcpStoreOptions o;
  o.host_port = "127.0.0.1:0";
  o.is_server = true;
  o.rank = 0;
  o.world = a.ranks;
  o.connect_timeout = Millis(int64_t{a.timeout_s} * 1000);
  o.secret = secret;
  StatusOr<std::shared_ptr<comm::TcpStore>> made = comm::make_tcp_store(o);
  if (!made.ok()) return made.status();  // the store's own message (the descriptor limit)
  std::shared_ptr<comm::TcpStore> rank0 = *made;
  const std::string address = rank0->bound_address();

  // The other ranks, spread over the client processes.
  std::vector<Child> children;
  const int others = a.ranks - 1;
  for (int p = 0, next = 1; p < a.procs; ++p) {
    const int count = others / a.procs + (p < others % a.procs ? 1 : 0);
    AX_ASSIGN_OR_RETURN(Child c, spawn_client(address, secret, next, count, a));
    children.push_back(c);
    next += count;
  }
  char line[4096];
  for (Child& c : children) {
    if (std::fgets(line, sizeof line, c.from) == nullptr || std::string(line) != "ready\n") {
      return Internal("client process ", c.pid, " did not start");
    }
  }

  std::vector<std::array<int64_t, kPhases>> ends(static_cast<size_t>(a.ranks));
  const int64_t start = now_ns();
  for (Child& c : children) {
    if (write(c.to, "g", 1) != 1) return IoError("write to a client process", errno);
  }
  Status rank0_result;
  std::thread rank0_thread(
      [&] { rank0_result = run_rank(rank0, address, secret, 0, a, ends[0].data()); });

  std::vector<std::string> errors;
  int failed[kPhases + 1] = {};  // failed ranks by phase (the last: not said)
  std::string first_failure[kPhases + 1];
  for (Child& c : children) {
    while (std::fgets(line, sizeof line, c.from) != nullptr) {
      int rank = 0;
      long long e[kPhases];
      if (std::sscanf(line, "rank %d %lld %lld %lld %lld", &rank, &e[0], &e[1], &e[2], &e[3]) ==
              5 &&
          rank > 0 && rank < a.ranks) {
        for (int i = 0; i < kPhases; ++i) ends[static_cast<size_t>(rank)][i] = e[i];
        continue;
      }
      int phase = kPhases;
      for (int i = 0; i < kPhases; ++i) {
        if (std::strstr(line, str_cat("phase ", i, ":").c_str()) != nullptr) phase = i;
      }
      if (failed[phase]++ == 0) first_failure[phase] = std::string(line).substr(0, 300);
    }
    fclose(c.from);
    close(c.to);
    int status = 0;
    waitpid(c.pid, &status, 0);
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0) && errors.empty()) {
      errors.push_back(str_cat("client process ", c.pid, " ended with status ", status));
    }
  }
  rank0_thread.join();
  if (!rank0_result.ok()) errors.push_back("rank 0: " + rank0_result.to_string().substr(0, 300));
  for (int i = 0; i <= kPhases; ++i) {
    if (failed[i] == 0) continue;
    errors.push_back(str_cat(failed[i], " rank(s) failed in ",
                             i < kPhases ? kPhaseNames[i] : "an unknown phase",
                             "; the first: ", first_failure[i]));
  }
  const double server_cpu = other_threads_cpu_s();
  const int64_t rss_after = status_bytes("VmRSS:");
  const int64_t rss_peak = status_bytes("VmHWM:");
  if (!errors.empty()) {
    std::string all;
    for (const std::string& e : errors) all += "\n  " + e;
    return Internal("the run failed:", all);
  }

  std::printf(
      "ax-store-bench: %d ranks (rank 0 here, %d client processes of about %d ranks "
      "each, one connection per rank), mesh data=%d fsdp=%d\n",
      a.ranks, a.procs, others / a.procs, a.ranks / std::min(a.gpus_per_node, a.ranks),
      std::min(a.gpus_per_node, a.ranks));
  std::printf("%-48s %10s %10s %12s\n", "phase", "last (s)", "median (s)", "phase (s)");
  double previous_last = 0;
  for (int i = 0; i < kPhases; ++i) {
    std::vector<double> t;
    for (const auto& e : ends) t.push_back(static_cast<double>(e[i] - start) / 1e9);
    std::sort(t.begin(), t.end());
    const double last = t.back(), median = t[t.size() / 2];
    std::printf("%-48s %10.3f %10.3f %12.3f\n", kPhaseNames[i], last, median, last - previous_last);
    previous_last = last;
  }
  std::printf("all ranks through the barrier after %.3f s\n", previous_last);
  std::printf(
      "rank 0's process (the store server): RSS %.1f MB before the store, %.1f MB after "
      "the barrier (%+.1f MB), peak %.1f MB (%+.1f MB)\n",
      mb(rss_before), mb(rss_after), mb(rss_after - rss_before), mb(rss_peak),
      mb(rss_peak - rss_before));
  std::printf("the store server's thread used %.2f s of CPU; the client processes used %.2f s\n",
              server_cpu, children_cpu_s());
  std::printf("descriptor limit (RLIMIT_NOFILE): %s before the store, %s after\n",
              limit_before.c_str(), descriptor_limit().c_str());
  rank0.reset();
  return Status::Ok();
}

}  // namespace
}  // namespace ax::bench

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], ax::bench::kClientFlag) == 0) {
    return ax::bench::client_main(argc, argv);
  }
  CLI::App app{
      "Rank 0's TCP store serving many ranks at once: join (handshake), rendezvous keys, the\n"
      "resume round's all-gather and a barrier, timed, with the server's memory;\n"
      "docs/reliability.md \"The store at scale\".",
      "ax-store-bench"};
  ax::cli::configure(app);
  ax::bench::Args args;
  app.add_option("--ranks", args.ranks, "ranks of the simulated job (default 4096)")
      ->type_name("N")
      ->check(ax::cli::in_range(2, 1 << 20));
  app.add_option("--procs", args.procs,
                 "client processes the ranks other than 0 are spread over, one thread and one\n"
                 "connection per rank (default 16)")
      ->type_name("P")
      ->check(ax::cli::in_range(1, 4096));
  app.add_option("--gpus-per-node", args.gpus_per_node, "ranks per node: the fsdp axis (default 8)")
      ->type_name("G")
      ->check(ax::cli::in_range(1, 1024));
  app.add_option("--gather-bytes", args.gather_bytes,
                 "bytes every rank puts into the all-gather (default 0: rank 0's resume\n"
                 "proposal, empty strings from the others, as at a start)")
      ->type_name("B")
      ->check(ax::cli::in_range(0, 1 << 20));
  app.add_option("--timeout", args.timeout_s, "seconds every store call may wait (default 300)")
      ->type_name("S")
      ->check(ax::cli::in_range(1, 3600));
  if (std::optional<int> exit = ax::cli::parse_or_exit(app, argc, argv)) return *exit;
  ax::Status s = ax::bench::run(args);
  if (!s.ok()) {
    std::fprintf(stderr, "ax-store-bench: %s\n", s.message().c_str());
    return 1;
  }
  return 0;
}
