#include "ax/launcher/supervisor.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ax/common/file_io.h"
#include "ax/common/logging.h"
#include "ax/common/strings.h"
#include "ax/topology/numa_binding.h"

extern char** environ;

namespace ax::launcher {

namespace {

using Clock = std::chrono::steady_clock;

// While ranks run, poll() wakes at least this often to reap: a SIGCHLD that another thread of
// the process took (block_supervised_signals) never reaches the signalfd.
constexpr int kReapEveryMs = 1000;

sigset_t supervised_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGCHLD, SIGTERM, SIGINT, SIGUSR1}) sigaddset(&set, sig);
  return set;
}

constexpr int kPreemptedExit = 75;  // EX_TEMPFAIL: the trainer checkpointed on a signal
// ax-train's kExitCollectiveFailed: a collective failed because another rank failed first. Such
// an exit is a consequence: the rank that failed first is named by the ranks' own messages (and,
// when it is on this node, by the launcher's line for it).
constexpr int kCollectiveFailedExit = 3;
constexpr size_t kMaxLine = 64 * 1024;

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? str_cat("SIG", abbrev) : str_cat("signal ", sig);
}

std::string join(const std::vector<int>& values) {
  std::string out;
  for (int v : values) {
    if (!out.empty()) out += ',';
    out += std::to_string(v);
  }
  return out;
}

// The launcher's exit status for a child's wait status (shell convention).
int exit_status(int wait_status) {
  return WIFSIGNALED(wait_status) ? 128 + WTERMSIG(wait_status) : WEXITSTATUS(wait_status);
}

std::string describe(int wait_status) {
  if (WIFSIGNALED(wait_status)) {
    int sig = WTERMSIG(wait_status);
    return str_cat("was killed by signal ", sig, " (", signal_name(sig), ")");
  }
  if (WEXITSTATUS(wait_status) == kCollectiveFailedExit) {
    return str_cat("exited with status ", kCollectiveFailedExit,
                   " (a collective failed: another rank failed first)");
  }
  return str_cat("exited with status ", WEXITSTATUS(wait_status));
}

bool collective_failed(int wait_status) {
  return WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == kCollectiveFailedExit;
}

std::string utc_now() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  tm t{};
  gmtime_r(&ts.tv_sec, &t);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", t.tm_year + 1900,
                t.tm_mon + 1, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec, ts.tv_nsec / 1000000);
  return buf;
}

// Everything fork() needs, built before it so the child only makes system calls.
struct Launchable {
  std::vector<std::string> env_storage;
  std::vector<char*> envp;
  std::vector<char*> argv;
  cpu_set_t cpus{};
  bool bind = false;
  int mem_node = -1;
};

struct Child {
  const RankPlan* plan = nullptr;
  int mem_node = -1;  // the plan's, when this machine has it
  std::string log_path;
  int log_fd = -1;
  pid_t pid = -1;
  int out_fd = -1;  // read end of the child's stdout+stderr pipe
  std::string partial;
  bool running = false;
  int wait_status = 0;
};

class Supervisor {
 public:
  Supervisor(const std::vector<RankPlan>& ranks, const SuperviseOptions& options)
      : options_(options) {
    for (const RankPlan& r : ranks) {
      Child c;
      c.plan = &r;
      c.log_path = join_path(join_path(options.run_dir, "logs"), str_cat("rank_", r.rank, ".log"));
      children_.push_back(std::move(c));
    }
  }
  ~Supervisor() {
    for (Child& c : children_) {
      if (c.out_fd >= 0) close(c.out_fd);
      if (c.log_fd >= 0) close(c.log_fd);
    }
    if (signal_fd_ >= 0) close(signal_fd_);
    if (null_fd_ >= 0) close(null_fd_);
  }

  StatusOr<int> run();

 private:
  Status prepare();
  void resolve_memory_nodes();
  Status start_set(int attempt);
  int supervise_set();  // the set's exit status
  void spawn(Child& c, Launchable& l, int out_w);
  void reap();
  void on_child_exit(Child& c);
  void handle_signals();
  void read_output(Child& c);
  void emit_line(Child& c, std::string_view line);
  void close_output(Child& c);
  void signal_all(int sig);
  void write_error_file(const Child& c);

  const SuperviseOptions& options_;
  std::vector<Child> children_;
  int signal_fd_ = -1;
  int null_fd_ = -1;
  sigset_t handled_{};
  int attempt_ = 0;
  // Per set:
  int running_ = 0;
  const Child* first_failure_ = nullptr;
  bool got_signal_ = false;  // a forwarded SIGTERM/SIGINT/SIGUSR1: exits with 75 are expected
  bool tearing_down_ = false;
  bool killed_ = false;
  Clock::time_point kill_deadline_;
};

Status Supervisor::prepare() {
  std::error_code ec;
  std::string logs = join_path(options_.run_dir, "logs");
  std::filesystem::create_directories(logs, ec);
  if (ec) return IoError(str_cat("create ", logs), ec.value());
  for (Child& c : children_) {
    c.log_fd = open(c.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    if (c.log_fd < 0) return IoError(str_cat("open ", c.log_path), errno);
  }
  null_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd_ < 0) return IoError("open /dev/null", errno);
  handled_ = supervised_signals();
  if (sigprocmask(SIG_BLOCK, &handled_, nullptr) != 0) return IoError("sigprocmask", errno);
  signal_fd_ = signalfd(-1, &handled_, SFD_CLOEXEC | SFD_NONBLOCK);
  if (signal_fd_ < 0) return IoError("signalfd", errno);
  signal(SIGPIPE, SIG_IGN);  // a closed console must not kill the supervisor
  resolve_memory_nodes();
  return Status::Ok();
}

void Supervisor::resolve_memory_nodes() {
  std::vector<int> allowed = topo::allowed_memory_nodes();
  std::map<int, std::vector<int>> absent;  // node -> ranks
  for (Child& c : children_) {
    int node = c.plan->mem_node;
    if (node < 0) continue;
    if (std::find(allowed.begin(), allowed.end(), node) != allowed.end()) {
      c.mem_node = node;
    } else {
      absent[node].push_back(c.plan->rank);
    }
  }
  for (const auto& [node, ranks] : absent) {
    AX_LOG(kWarn, "launch") << "NUMA node " << node << " of the GPUs of ranks " << join(ranks)
                            << " is not one this launcher may allocate on (allowed: "
                            << (allowed.empty() ? "none" : join(allowed))
                            << "); their memory is not bound";
  }
}

void Supervisor::spawn(Child& c, Launchable& l, int out_w) {
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    dup2(null_fd_, STDIN_FILENO);
    dup2(out_w, STDOUT_FILENO);
    dup2(out_w, STDERR_FILENO);
    if (l.bind) sched_setaffinity(0, sizeof l.cpus, &l.cpus);
    if (l.mem_node >= 0 && topo::prefer_memory_node(l.mem_node) != 0) {
      const char* what = "ax-launch: warning: set_mempolicy failed; memory not bound\n";
      (void)!write(STDERR_FILENO, what, strlen(what));
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(SIGPIPE, SIG_DFL);
    execvpe(l.argv[0], l.argv.data(), l.envp.data());
    int err = errno;
    const char* what = "ax-launch: cannot run ";
    (void)!write(STDERR_FILENO, what, strlen(what));
    (void)!write(STDERR_FILENO, l.argv[0], strlen(l.argv[0]));
    (void)!write(STDERR_FILENO, ": ", 2);
    (void)!write(STDERR_FILENO, strerrordesc_np(err), strlen(strerrordesc_np(err)));
    (void)!write(STDERR_FILENO, "\n", 1);
    _exit(127);
  }
  c.pid = pid;
  if (pid > 0) setpgid(pid, pid);  // also here, so signals sent right away reach the group
}

Status Supervisor::start_set(int attempt) {
  running_ = 0;
  first_failure_ = nullptr;
  got_signal_ = tearing_down_ = killed_ = false;
  std::vector<std::string> base;
  for (char** e = environ; *e != nullptr; ++e) base.emplace_back(*e);
  for (Child& c : children_) {
    Launchable l;
    for (const std::string& kv : base) {
      std::string name = kv.substr(0, kv.find('='));
      bool replaced = false;
      for (const auto& [k, v] : c.plan->env) replaced = replaced || k == name;
      if (!replaced) l.env_storage.push_back(kv);
    }
    for (const auto& [k, v] : c.plan->env) l.env_storage.push_back(k + "=" + v);
    for (std::string& kv : l.env_storage) l.envp.push_back(kv.data());
    l.envp.push_back(nullptr);
    for (const std::string& a : options_.command) l.argv.push_back(const_cast<char*>(a.c_str()));
    l.argv.push_back(nullptr);
    l.mem_node = c.mem_node;
    CPU_ZERO(&l.cpus);
    for (int cpu : c.plan->cpus) {
      if (cpu >= 0 && cpu < CPU_SETSIZE) {
        CPU_SET(cpu, &l.cpus);
        l.bind = true;
      }
    }
    if (attempt > 0) {
      std::string note = str_cat("==== ax-launch: restart ", attempt, "/", options_.max_restarts,
                                 " at ", utc_now(), " ====\n");
      write_all(c.log_fd, note.data(), note.size(), c.log_path).ignore();
    }
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return IoError("pipe", errno);
    spawn(c, l, fds[1]);
    int fork_errno = errno;
    close(fds[1]);
    if (c.pid < 0) {
      close(fds[0]);
      return IoError(str_cat("fork for rank ", c.plan->rank), fork_errno);
    }
    c.out_fd = fds[0];
    c.partial.clear();
    c.wait_status = 0;
    c.running = true;
    ++running_;
  }
  return Status::Ok();
}

void Supervisor::emit_line(Child& c, std::string_view line) {
  std::string console = str_cat("[r", c.plan->rank, "] ", line, "\n");
  write_all(STDOUT_FILENO, console.data(), console.size(), "stdout").ignore();
  std::string raw = str_cat(line, "\n");
  write_all(c.log_fd, raw.data(), raw.size(), c.log_path).ignore();
}

void Supervisor::read_output(Child& c) {
  char buf[65536];
  ssize_t n = read(c.out_fd, buf, sizeof buf);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (n <= 0) {
    close_output(c);
    return;
  }
  c.partial.append(buf, static_cast<size_t>(n));
  size_t start = 0;
  for (size_t nl; (nl = c.partial.find('\n', start)) != std::string::npos; start = nl + 1) {
    emit_line(c, std::string_view(c.partial).substr(start, nl - start));
  }
  c.partial.erase(0, start);
  if (c.partial.size() >= kMaxLine) {
    emit_line(c, c.partial);
    c.partial.clear();
  }
}

void Supervisor::close_output(Child& c) {
  if (!c.partial.empty()) emit_line(c, c.partial);
  c.partial.clear();
  close(c.out_fd);
  c.out_fd = -1;
}

void Supervisor::signal_all(int sig) {
  // Whole process groups, also of children already reaped: their own children may live on.
  for (const Child& c : children_) {
    if (c.pid > 0) kill(-c.pid, sig);
  }
}

void Supervisor::write_error_file(const Child& c) {
  nlohmann::json j;
  j["rank"] = c.plan->rank;
  j["local_rank"] = c.plan->local_rank;
  j["host"] = options_.host;
  j["pid"] = c.pid;
  if (WIFSIGNALED(c.wait_status)) {
    j["signal"] = WTERMSIG(c.wait_status);
    j["signal_name"] = signal_name(WTERMSIG(c.wait_status));
  } else {
    j["exit_code"] = WEXITSTATUS(c.wait_status);
  }
  j["message"] =
      str_cat("rank ", c.plan->rank, " on host ", options_.host, " ", describe(c.wait_status));
  j["time"] = utc_now();
  j["log_file"] = c.log_path;
  j["attempt"] = attempt_;
  j["command"] = options_.command;
  Status s = write_file_atomically(join_path(options_.run_dir, "error.json"), j.dump(2) + "\n");
  if (!s.ok()) AX_LOG(kWarn, "launch") << "cannot write the error file: " << s.message();
}

void Supervisor::on_child_exit(Child& c) {
  c.running = false;
  --running_;
  bool ok =
      WIFEXITED(c.wait_status) && (WEXITSTATUS(c.wait_status) == 0 ||
                                   (got_signal_ && WEXITSTATUS(c.wait_status) == kPreemptedExit));
  if (ok || first_failure_ != nullptr) return;
  first_failure_ = &c;
  const std::string line = str_cat("rank ", c.plan->rank, " on host ", options_.host, " ",
                                   describe(c.wait_status), " (log: ", c.log_path, ")");
  if (collective_failed(c.wait_status)) {
    AX_LOG(kWarn, "launch") << line;
  } else {
    AX_LOG(kError, "launch") << line;
  }
  write_error_file(c);
  if (running_ > 0) {
    AX_LOG(kInfo, "launch") << "stopping the remaining ranks (" << running_
                            << " running): SIGTERM, SIGKILL after " << options_.grace_seconds
                            << " s";
  }
  tearing_down_ = true;
  signal_all(SIGTERM);
  kill_deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(options_.grace_seconds));
}

void Supervisor::reap() {
  for (;;) {
    int st = 0;
    pid_t pid = waitpid(-1, &st, WNOHANG);
    if (pid <= 0) return;
    for (Child& c : children_) {
      if (c.pid == pid && c.running) {
        c.wait_status = st;
        on_child_exit(c);
      }
    }
  }
}

void Supervisor::handle_signals() {
  signalfd_siginfo info;
  while (read(signal_fd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
    int sig = static_cast<int>(info.ssi_signo);
    if (sig == SIGCHLD) {
      reap();
      continue;
    }
    AX_LOG(kInfo, "launch") << "forwarding " << signal_name(sig) << " to " << running_ << " ranks";
    got_signal_ = true;
    for (const Child& c : children_) {
      if (c.running) kill(-c.pid, sig);
    }
  }
  reap();  // SIGCHLDs merge; a missed one must not leave a zombie unnoticed
}

int Supervisor::supervise_set() {
  // Output still open after every child exited belongs to their descendants: read what is
  // there, briefly, then stop listening.
  Clock::time_point drain_until{};
  for (;;) {
    bool any_output = false;
    for (const Child& c : children_) any_output = any_output || c.out_fd >= 0;
    if (running_ == 0) {
      if (!any_output) break;
      if (drain_until == Clock::time_point{}) {
        drain_until = Clock::now() + std::chrono::milliseconds(200);
      }
      if (Clock::now() >= drain_until) {
        for (Child& c : children_) {
          if (c.out_fd >= 0) close_output(c);
        }
        break;
      }
    }
    std::vector<pollfd> fds{{signal_fd_, POLLIN, 0}};
    std::vector<Child*> owners{nullptr};
    for (Child& c : children_) {
      if (c.out_fd >= 0) {
        fds.push_back({c.out_fd, POLLIN, 0});
        owners.push_back(&c);
      }
    }
    int timeout_ms = kReapEveryMs;
    auto until = [&](Clock::time_point t) {
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now()).count();
      return static_cast<int>(std::max<int64_t>(0, ms) + 1);
    };
    if (tearing_down_ && !killed_) timeout_ms = std::min(timeout_ms, until(kill_deadline_));
    if (running_ == 0) timeout_ms = until(drain_until);
    int n = poll(fds.data(), fds.size(), timeout_ms);
    if (n < 0 && errno != EINTR) {
      AX_LOG(kError, "launch") << "poll: " << strerror(errno);
      signal_all(SIGKILL);
      killed_ = true;
    }
    for (size_t i = 1; n > 0 && i < fds.size(); ++i) {
      if (fds[i].revents != 0) read_output(*owners[i]);
    }
    if (n > 0 && fds[0].revents != 0) handle_signals();
    if (running_ > 0) reap();  // a child whose SIGCHLD another thread took (kReapEveryMs)
    if (tearing_down_ && !killed_ && Clock::now() >= kill_deadline_ && running_ > 0) {
      AX_LOG(kWarn, "launch") << running_ << " ranks still running after " << options_.grace_seconds
                              << " s; sending SIGKILL";
      signal_all(SIGKILL);
      killed_ = true;
    }
  }
  if (first_failure_ != nullptr) return exit_status(first_failure_->wait_status);
  bool preempted = false;
  for (const Child& c : children_) {
    preempted = preempted || WEXITSTATUS(c.wait_status) == kPreemptedExit;
  }
  return preempted ? kPreemptedExit : 0;
}

StatusOr<int> Supervisor::run() {
  AX_RETURN_IF_ERROR(prepare());
  // A stop signal that came while the signals were blocked and no rank had started
  // (block_supervised_signals): end here, as its default action would have, starting nothing.
  sigset_t pending;
  if (sigpending(&pending) == 0) {
    for (int sig : {SIGTERM, SIGINT, SIGUSR1}) {
      if (sigismember(&pending, sig)) {
        AX_LOG(kWarn, "launch") << signal_name(sig) << " before the ranks started: none started";
        return 128 + sig;
      }
    }
  }
  for (attempt_ = 0;; ++attempt_) {
    if (attempt_ > 0) {
      AX_LOG(kInfo, "launch") << "restart " << attempt_ << "/" << options_.max_restarts;
    }
    Status started = start_set(attempt_);
    if (!started.ok()) {
      signal_all(SIGKILL);
      while (running_ > 0 && waitpid(-1, nullptr, 0) > 0) --running_;
      return started;
    }
    int status = supervise_set();
    if (first_failure_ == nullptr || got_signal_ || attempt_ >= options_.max_restarts) {
      return status;
    }
  }
}

}  // namespace

void block_supervised_signals() {
  const sigset_t set = supervised_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

StatusOr<int> supervise(const std::vector<RankPlan>& ranks, const SuperviseOptions& options) {
  Supervisor supervisor(ranks, options);
  return supervisor.run();
}

}  // namespace ax::launcher
