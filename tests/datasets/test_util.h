// Helpers shared by the datasets tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ax::data::testing {

// A fresh empty directory under $TMPDIR (or /tmp), removed with its contents when the test
// binary exits.
std::string temp_dir(const std::string& tag);
void write_file(const std::string& path, const std::string& content);
std::string read_file(const std::string& path);
// Deterministic random documents of token ids in [3, vocab), lengths in [min_len, max_len], each
// ending with eos.
std::vector<std::vector<uint32_t>> random_documents(uint64_t seed, size_t n, uint32_t vocab,
                                                    size_t min_len, size_t max_len,
                                                    uint32_t eos = 1);
// A few KB of English sentences written for the tests (no corpus package needed), repeated
// `copies` times with numbered variations.
std::string sample_english(int copies);

}  // namespace ax::data::testing
