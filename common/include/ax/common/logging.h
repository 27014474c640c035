// One logger for every part. Each line reads
//   "host:pid rank 3 I data] message"
// (level letter D/I/W/E, then the subsystem). The level comes from AX_LOG_LEVEL; the rank is set
// once by the job context (set_log_rank) and is "-" before that.
#pragma once

#include <sstream>
#include <string_view>

#include "ax/common/check.h"  // Voidify

namespace ax {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

void set_log_rank(int rank);
void set_log_level(LogLevel level);
// For programs whose output is a table (the benchmarks): `level` unless AX_LOG_LEVEL says
// otherwise.
void set_default_log_level(LogLevel level);
// Whether AX_LOG_LEVEL is set (a program that starts others decides what they inherit).
bool log_level_is_set();
LogLevel log_level();
bool log_enabled(LogLevel level);
// "host:pid rank 3" (or "host:pid rank -").
std::string log_prefix();

namespace internal {
class LogMessage {
 public:
  LogMessage(LogLevel level, std::string_view subsystem);
  ~LogMessage();  // writes the line to stderr in one write()
  std::ostream& stream() { return os_; }

 private:
  std::ostringstream os_;
};
}  // namespace internal

}  // namespace ax

// AX_LOG(kInfo, "data") << "wrote " << n << " shards";
#define AX_LOG(level, subsystem)            \
  !::ax::log_enabled(::ax::LogLevel::level) \
      ? (void)0                             \
      : ::ax::internal::Voidify() &         \
            ::ax::internal::LogMessage(::ax::LogLevel::level, subsystem).stream()
