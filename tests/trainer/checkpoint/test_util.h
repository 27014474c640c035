// Helpers shared by the checkpoint tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ax/trainer/checkpoint/checkpoint.h"
#include "test_files.h"

namespace ax::train::testing {

using ax::testing::read_file;
using ax::testing::temp_dir;
using ax::testing::write_file;
// The names in a directory, sorted.
std::vector<std::string> list_dir(const std::string& dir);
// Deterministic values in [-1, 1) from the seed.
std::vector<float> random_values(uint64_t seed, size_t n);
// A whole tensor of the given shape with random values.
HostTensor make_tensor(const std::string& name, std::vector<int64_t> shape, uint64_t seed);
// Bit-for-bit equality of the data (so NaN payloads and -0 count).
bool same_bits(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace ax::train::testing
