#include "test_util.h"

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

}  // namespace ax::data::testing
