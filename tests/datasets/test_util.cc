#include "test_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <stdexcept>

namespace ax::data::testing {

std::vector<std::vector<uint32_t>> random_documents(uint64_t seed, size_t n, uint32_t vocab,
                                                    size_t min_len, size_t max_len, uint32_t eos) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> len(min_len, max_len);
  std::uniform_int_distribution<uint32_t> tok(3, vocab - 1);
  std::vector<std::vector<uint32_t>> docs(n);
  for (auto& d : docs) {
    d.resize(std::max<size_t>(len(rng), 1));
    for (auto& t : d) t = tok(rng);
    d.back() = eos;
  }
  return docs;
}

std::string sample_english(int copies) {
  static const char* kLines[] = {
      "The quick brown fox jumps over the lazy dog near the river bank.",
      "A journey of a thousand miles begins with a single step.",
      "She sold the old house by the sea and moved to the city in the spring.",
      "Every morning the baker opened his shop before the sun had risen.",
      "They walked along the narrow path until the village lights disappeared.",
      "Numbers such as 1234 and 56.78 appear in ledgers, letters and reports.",
      "Rain fell softly on the garden while the children read their books.",
      "The committee agreed that the bridge should be repaired before winter.",
  };
  std::ostringstream os;
  for (int c = 0; c < copies; ++c) {
    for (size_t i = 0; i < sizeof(kLines) / sizeof(kLines[0]); ++i) {
      os << kLines[(i + c) % 8] << " Entry " << c << "." << i << ".\n";
    }
  }
  return os.str();
}

namespace {

// A "VmXXX:  1234 kB" line of /proc/self/status, in bytes.
int64_t proc_status_bytes(const std::string& key) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key + ":", 0) == 0) return std::stoll(line.substr(key.size() + 1)) * 1024;
  }
  return -1;
}

}  // namespace

int64_t child_memory_growth(const std::function<bool()>& fn) {
  int fds[2];
  if (::pipe(fds) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    ::close(fds[0]);
    // The peak starts from here (a child inherits its parent's peak otherwise).
    std::ofstream("/proc/self/clear_refs") << "5";
    const int64_t start = proc_status_bytes("VmRSS");
    const bool ok = fn();
    const int64_t growth = proc_status_bytes("VmHWM") - start;
    const ssize_t n = ::write(fds[1], &growth, sizeof growth);
    ::_exit(ok && n == sizeof growth ? 0 : 1);
  }
  ::close(fds[1]);
  int64_t growth = -1;
  const ssize_t n = ::read(fds[0], &growth, sizeof growth);
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (n != sizeof growth || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return -1;
  return growth;
}

}  // namespace ax::data::testing
