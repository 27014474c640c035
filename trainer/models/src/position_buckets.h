// T5's relative position buckets (docs/t5.md "Relative position bias"): the bucket of a key at
// relative position rel = key_position - query_position. Bidirectional (the encoder): half the
// buckets for rel > 0 (offset by num_buckets / 2), n = |rel|; causal (the decoder):
// n = max(-rel, 0) over all the buckets. With B buckets in play, n < B / 2 is its own bucket;
// larger n fall into B / 2 + floor(ln(n / (B/2)) / ln(max_distance / (B/2)) · (B - B/2)), capped
// at B - 1. The logarithm is taken in f32 as T5x and Hugging Face take it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace ax::train {

int32_t relative_position_bucket(int64_t rel, bool bidirectional, int num_buckets,
                                 int max_distance);

// Buckets (Tq, Tk) of every (query, key) pair of one row, from their positions (0..T-1 for an
// unpacked row; restarting at 0 in each segment of a packed one).
void relative_position_buckets(std::span<const int32_t> q_positions,
                               std::span<const int32_t> k_positions, bool bidirectional,
                               int num_buckets, int max_distance, int32_t* out);

// Positions restarting at 0 at each change of segment id (T5x's packing); 0..T-1 without ids.
std::vector<int32_t> segment_positions(std::span<const int32_t> segment_ids, int64_t length);

}  // namespace ax::train
