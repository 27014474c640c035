// T5's relative position buckets against the hand-checked values of the reference (32 buckets,
// max distance 128), and positions restarting in each packed segment.
#include "position_buckets.h"

#include <gtest/gtest.h>

namespace ax::train {
namespace {

TEST(RelativePositionBucket, HandCheckedValues) {
  struct Case {
    int64_t rel;
    bool bidirectional;
    int32_t bucket;
  };
  for (const Case& c : {Case{0, true, 0},
                        {-1, true, 1},
                        {1, true, 17},
                        {-8, true, 8},
                        {-128, true, 15},
                        {200, true, 31},
                        {-1, false, 1},
                        {-20, false, 17},
                        {-128, false, 31},
                        {0, false, 0},
                        {5, false, 0},
                        {1000, false, 0}}) {
    EXPECT_EQ(relative_position_bucket(c.rel, c.bidirectional, 32, 128), c.bucket)
        << "rel " << c.rel << (c.bidirectional ? " bidirectional" : " causal");
  }
  // Monotone in |rel| and within range over a long span.
  int32_t last = 0;
  for (int64_t n = 0; n < 5000; ++n) {
    const int32_t b = relative_position_bucket(-n, false, 32, 128);
    EXPECT_GE(b, last);
    EXPECT_LT(b, 32);
    last = b;
  }
}

TEST(RelativePositionBucket, BucketsOfARowAndPackedPositions) {
  const std::vector<int32_t> segments = {1, 1, 1, 2, 2, 0, 0};
  const std::vector<int32_t> positions = segment_positions(segments, 7);
  EXPECT_EQ(positions, (std::vector<int32_t>{0, 1, 2, 0, 1, 0, 1}));
  EXPECT_EQ(segment_positions({}, 4), (std::vector<int32_t>{0, 1, 2, 3}));
  std::vector<int32_t> buckets(49);
  relative_position_buckets(positions, positions, true, 32, 128, buckets.data());
  EXPECT_EQ(buckets[0 * 7 + 2], 18);  // key 2 after query 0: rel +2 -> 16 + 2
  EXPECT_EQ(buckets[2 * 7 + 0], 2);   // rel -2
  EXPECT_EQ(buckets[4 * 7 + 3], 1);   // within segment 2: rel -1
}

}  // namespace
}  // namespace ax::train
