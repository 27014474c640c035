// comm::collective_or_die, exit_collective_failed and the linger of the store host
// (communicator.h).
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "ax/trainer/comm/communicator.h"

namespace ax::train::comm {
namespace {

std::atomic<int> g_failure_linger_ms{0};

// The exit hooks of this process (set_failure_exit_hooks).
struct ExitHooks {
  std::mutex mu;
  std::function<void()> notify;
  std::function<bool()> others_gone;
};

ExitHooks& exit_hooks() {
  static auto* hooks = new ExitHooks();  // never destroyed: used until _Exit
  return *hooks;
}

}  // namespace

void set_failure_linger(int milliseconds) { g_failure_linger_ms.store(milliseconds); }

void set_failure_exit_hooks(std::function<void()> notify, std::function<bool()> others_gone) {
  ExitHooks& h = exit_hooks();
  std::lock_guard<std::mutex> lock(h.mu);
  h.notify = std::move(notify);
  h.others_gone = std::move(others_gone);
}

void exit_collective_failed(const std::string& line) {
  // One line per process: a second thread that gets here (the activity reporter while the
  // training thread lingers) waits for the first one's exit.
  static std::atomic<bool> exiting{false};
  if (exiting.exchange(true)) {
    while (true) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(nullptr);
  std::function<void()> notify;
  std::function<bool()> others_gone;
  {
    ExitHooks& h = exit_hooks();
    std::lock_guard<std::mutex> lock(h.mu);
    notify = h.notify;
    others_gone = h.others_gone;
  }
  if (notify) notify();
  const int linger = g_failure_linger_ms.load();
  if (linger > 0) {
    // The store host stays until the others have learnt the cause through it and gone, or
    // until the linger has passed.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(linger);
    while (std::chrono::steady_clock::now() < deadline) {
      if (others_gone && others_gone()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(others_gone ? 50 : linger));
    }
  }
  std::_Exit(kExitCollectiveFailed);
}

void collective_or_die(const Status& status, const char* what) {
  if (status.ok()) return;
  exit_collective_failed(str_cat("ax-train: ", what, " failed: ", status.to_string()));
}

}  // namespace ax::train::comm
