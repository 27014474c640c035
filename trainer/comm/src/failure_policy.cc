// comm::collective_or_die and its linger (communicator.h).
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "ax/trainer/comm/communicator.h"

namespace ax::train::comm {
namespace {

std::atomic<int> g_failure_linger_ms{0};

}  // namespace

void set_failure_linger(int milliseconds) { g_failure_linger_ms.store(milliseconds); }

void collective_or_die(const Status& status, const char* what) {
  if (status.ok()) return;
  std::fprintf(stderr, "ax-train: %s failed: %s\n", what, status.to_string().c_str());
  std::fflush(nullptr);
  const int linger = g_failure_linger_ms.load();
  if (linger > 0) std::this_thread::sleep_for(std::chrono::milliseconds(linger));
  std::_Exit(kExitCollectiveFailed);
}

}  // namespace ax::train::comm
