#include "ax/common/logging.h"

#include <unistd.h>

#include <atomic>
#include <string>

#include "ax/common/env.h"

namespace ax {
namespace {

const EnvKnob<std::string> kLogLevel("AX_LOG_LEVEL", "info", "Least severe log level printed",
                                     {"debug", "info", "warn", "error"});

std::atomic<int> g_rank{-1};

LogLevel level_from_env() {
  StatusOr<std::string> v = kLogLevel.get();
  if (!v.ok()) {
    // The logger cannot report its own misconfiguration through itself; say so once and go on
    // at info so the real error that follows is still visible.
    std::string msg = v.status().to_string() + "\n";
    (void)!::write(STDERR_FILENO, msg.data(), msg.size());
    return LogLevel::kInfo;
  }
  if (*v == "debug") return LogLevel::kDebug;
  if (*v == "warn") return LogLevel::kWarn;
  if (*v == "error") return LogLevel::kError;
  return LogLevel::kInfo;
}

std::atomic<int>& level_ref() {
  static std::atomic<int> level{static_cast<int>(level_from_env())};
  return level;
}

const std::string& host_pid() {
  static const std::string s = [] {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    std::string h(host);
    if (size_t dot = h.find('.'); dot != std::string::npos) h.resize(dot);
    return str_cat(h, ":", ::getpid());
  }();
  return s;
}

}  // namespace

void set_log_rank(int rank) { g_rank = rank; }
void set_log_level(LogLevel level) { level_ref() = static_cast<int>(level); }
void set_default_log_level(LogLevel level) {
  if (!kLogLevel.is_set()) set_log_level(level);
}
bool log_level_is_set() { return kLogLevel.is_set(); }
LogLevel log_level() { return static_cast<LogLevel>(level_ref().load()); }
bool log_enabled(LogLevel level) { return static_cast<int>(level) >= level_ref().load(); }

std::string log_prefix() {
  int r = g_rank.load();
  return r < 0 ? str_cat(host_pid(), " rank -") : str_cat(host_pid(), " rank ", r);
}

namespace internal {

LogMessage::LogMessage(LogLevel level, std::string_view subsystem) {
  static const char kLetters[] = {'D', 'I', 'W', 'E'};
  os_ << log_prefix() << " " << kLetters[static_cast<int>(level)] << " " << subsystem << "] ";
}

LogMessage::~LogMessage() {
  os_ << "\n";
  std::string line = os_.str();
  (void)!::write(STDERR_FILENO, line.data(), line.size());
}

}  // namespace internal
}  // namespace ax
