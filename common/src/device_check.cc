#include "ax/common/device_check.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>

#include "ax/common/logging.h"
#include "ax/common/strings.h"

namespace ax {
namespace {

std::mutex& hook_mutex() {
  static std::mutex mu;
  return mu;
}
std::function<void()>& hook() {
  static std::function<void()> h;
  return h;
}
std::atomic<int> g_device{-1};

}  // namespace

void set_device_abort_hook(std::function<void()> h) {
  std::lock_guard<std::mutex> lock(hook_mutex());
  hook() = std::move(h);
}

namespace internal {

void set_error_device(int device) { g_device = device; }

void device_check_failed(const char* library, const char* statement, int code,
                         const char* error_name, const char* error_text, const char* file,
                         int line) {
  std::string msg =
      str_cat(log_prefix(), " E ", library, "] ", file, ":", line, ": ", statement, " failed with ",
              error_name, " (", code, "): ", error_text, " [device ", g_device.load(), "]\n");
  (void)!::write(STDERR_FILENO, msg.data(), msg.size());
  std::function<void()> h;
  {
    std::lock_guard<std::mutex> lock(hook_mutex());
    h = hook();
  }
  if (h) h();
  std::_Exit(EXIT_FAILURE);
}

}  // namespace internal
}  // namespace ax
