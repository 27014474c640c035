#include "ax/common/check.h"

#include <unistd.h>

#include <cstdlib>
#include <string>

#include "ax/common/logging.h"

namespace ax::internal {

CheckFailure::CheckFailure(const char* file, int line, const char* condition) {
  os_ << log_prefix() << " F check] " << file << ":" << line << ": check failed: " << condition
      << " ";
}

CheckFailure::~CheckFailure() {
  os_ << "\n";
  std::string line = os_.str();
  (void)!::write(STDERR_FILENO, line.data(), line.size());
  std::abort();
}

}  // namespace ax::internal
