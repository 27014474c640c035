// Ranks as real processes for the communicator tests: each rank is a fork of the (single-
// threaded) test process, rank 0 hosts the TCP store, every rank writes a report the parent
// collects, and a rank that does not report within the deadline counts as hung.
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "ax/common/check.h"
#include "ax/trainer/comm/communicator.h"
#include "ax/trainer/comm/store.h"

namespace ax::train::comm {

using Clock = std::chrono::steady_clock;

// Group ranks 0..n-1.
inline std::vector<int> iota(int n) {
  std::vector<int> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i;
  return v;
}

// Options of a Gloo communicator in these tests (the coordinator is never dialled: the store is
// given).
inline CommOptions cpu_options(Millis timeout = Millis(30000)) {
  CommOptions o;
  o.timeout = timeout;
  o.coordinator = "127.0.0.1:1";
  return o;
}

inline double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct RankOutcome {
  std::string report;  // what the rank wrote; "OK" when every check passed
  bool exited = false;
};

using RankBody = std::function<std::string(int rank, std::shared_ptr<Store> store)>;

inline void write_all(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t n = write(fd, s.data() + done, s.size() - done);
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

// Runs `body` on `world` forked ranks and returns each rank's report. Ranks in `victims` are
// expected to die or stop; the others must report within `deadline`, else the run counts as a
// hang and every rank is killed. Rank 0 (the store host) stays alive until the others are done.
inline std::vector<RankOutcome> run_ranks(int world, const RankBody& body, double deadline_s,
                                          const std::set<int>& victims = {}) {
  std::vector<pid_t> pids(static_cast<size_t>(world), -1);
  std::vector<int> out_fds(static_cast<size_t>(world), -1);
  int addr_pipe[2], release_pipe[2];
  AX_CHECK(pipe(addr_pipe) == 0 && pipe(release_pipe) == 0);
  std::string address;
  for (int r = 0; r < world; ++r) {
    int out[2];
    AX_CHECK(pipe(out) == 0);
    pid_t pid = fork();
    AX_CHECK(pid >= 0);
    if (pid == 0) {
      close(out[0]);
      close(addr_pipe[0]);
      close(release_pipe[1]);
      std::string report;
      StatusOr<std::shared_ptr<TcpStore>> store =
          make_tcp_store({r == 0 ? std::string("127.0.0.1:0") : address, r == 0, r, world,
                          Millis(20000), "rank-processes-test-secret-0123456789"});
      if (!store.ok()) {
        report = "store: " + store.status().to_string();
      } else {
        if (r == 0) write_all(addr_pipe[1], (*store)->bound_address() + "\n");
        report = body(r, *store);
      }
      write_all(out[1], report);
      close(out[1]);
      if (r == 0) {  // keep serving the store until the parent has everyone's report
        char c;
        while (read(release_pipe[0], &c, 1) > 0) {
        }
      }
      _exit(0);
    }
    close(out[1]);
    out_fds[static_cast<size_t>(r)] = out[0];
    pids[static_cast<size_t>(r)] = pid;
    if (r == 0) {
      char c;
      while (read(addr_pipe[0], &c, 1) == 1 && c != '\n') address += c;
    }
  }
  close(addr_pipe[0]);
  close(addr_pipe[1]);
  close(release_pipe[0]);

  std::vector<RankOutcome> outcomes(static_cast<size_t>(world));
  std::vector<bool> open(static_cast<size_t>(world), true);
  const auto start = Clock::now();
  auto waiting = [&] {
    for (int r = 0; r < world; ++r) {
      if (open[static_cast<size_t>(r)] && !victims.count(r)) return true;
    }
    return false;
  };
  while (waiting() && since(start) < deadline_s) {
    std::vector<pollfd> fds;
    std::vector<int> who;
    for (int r = 0; r < world; ++r) {
      if (!open[static_cast<size_t>(r)]) continue;
      fds.push_back({out_fds[static_cast<size_t>(r)], POLLIN, 0});
      who.push_back(r);
    }
    if (poll(fds.data(), fds.size(), 100) <= 0) continue;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP))) continue;
      char buf[4096];
      ssize_t n = read(fds[i].fd, buf, sizeof(buf));
      RankOutcome& o = outcomes[static_cast<size_t>(who[i])];
      if (n > 0) {
        o.report.append(buf, static_cast<size_t>(n));
      } else {
        open[static_cast<size_t>(who[i])] = false;
        o.exited = true;
      }
    }
  }
  close(release_pipe[1]);
  const bool hung = waiting();
  for (int r = 0; r < world; ++r) {
    pid_t pid = pids[static_cast<size_t>(r)];
    if (hung || victims.count(r)) kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    close(out_fds[static_cast<size_t>(r)]);
    if (hung && open[static_cast<size_t>(r)] && !victims.count(r)) {
      outcomes[static_cast<size_t>(r)].report += " [HUNG: no report within deadline]";
    }
  }
  return outcomes;
}

}  // namespace ax::train::comm
