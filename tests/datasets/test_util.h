// Helpers shared by the datasets tests.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "test_files.h"

namespace ax::data::testing {

using ax::testing::read_file;
using ax::testing::temp_dir;
using ax::testing::write_file;
// Deterministic random documents of token ids in [3, vocab), lengths in [min_len, max_len], each
// ending with eos.
std::vector<std::vector<uint32_t>> random_documents(uint64_t seed, size_t n, uint32_t vocab,
                                                    size_t min_len, size_t max_len,
                                                    uint32_t eos = 1);
// A few KB of English sentences written for the tests (no corpus package needed), repeated
// `copies` times with numbered variations.
std::string sample_english(int copies);
// Runs fn in a child process and returns how far its resident memory rose above what it was at
// the start (VmHWM minus VmRSS, bytes), or -1 when fn returned false or the child died.
int64_t child_memory_growth(const std::function<bool()>& fn);

}  // namespace ax::data::testing
