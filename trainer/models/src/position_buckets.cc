#include "position_buckets.h"

#include <algorithm>
#include <cmath>

namespace ax::train {

int32_t relative_position_bucket(int64_t rel, bool bidirectional, int num_buckets,
                                 int max_distance) {
  int32_t bucket = 0;
  int buckets = num_buckets;
  int64_t n = 0;
  if (bidirectional) {
    buckets /= 2;
    if (rel > 0) bucket += buckets;
    n = rel < 0 ? -rel : rel;
  } else {
    n = std::max<int64_t>(-rel, 0);
  }
  const int max_exact = buckets / 2;
  if (n < max_exact) return bucket + static_cast<int32_t>(n);
  // As Hugging Face computes it: the ratio's log in f32, the constant log in double then f32.
  const float log_span = static_cast<float>(
      std::log(static_cast<double>(max_distance) / static_cast<double>(max_exact)));
  const float scaled = std::log(static_cast<float>(n) / static_cast<float>(max_exact)) / log_span *
                       static_cast<float>(buckets - max_exact);
  const int64_t large = std::min<int64_t>(max_exact + static_cast<int64_t>(scaled), buckets - 1);
  return bucket + static_cast<int32_t>(large);
}

void relative_position_buckets(std::span<const int32_t> q_positions,
                               std::span<const int32_t> k_positions, bool bidirectional,
                               int num_buckets, int max_distance, int32_t* out) {
  for (size_t i = 0; i < q_positions.size(); ++i) {
    for (size_t j = 0; j < k_positions.size(); ++j) {
      out[i * k_positions.size() + j] =
          relative_position_bucket(static_cast<int64_t>(k_positions[j]) - q_positions[i],
                                   bidirectional, num_buckets, max_distance);
    }
  }
}

std::vector<int32_t> segment_positions(std::span<const int32_t> segment_ids, int64_t length) {
  std::vector<int32_t> positions(static_cast<size_t>(length));
  int32_t p = 0;
  for (int64_t t = 0; t < length; ++t) {
    if (t > 0 && !segment_ids.empty() && segment_ids[t] != segment_ids[t - 1]) p = 0;
    positions[static_cast<size_t>(t)] = p++;
  }
  return positions;
}

}  // namespace ax::train
