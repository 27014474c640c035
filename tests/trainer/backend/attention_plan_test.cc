// The CUDA attention backward pass's plan for the gradient of a bias shared by the batch
// (trainer/src/backend_cuda/attention_plan.h), run on the host: the chunks of batch rows cover the
// batch with none empty, the partials stay within their bound, the dQ grid is filled where the
// batch allows, and the parity suite's cases get the chunkings its comments promise.
#include "attention_plan.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace ax::train::cuda {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

TEST(DbiasPlan, OneBatchRowPerBlockWithoutASharedBiasGradient) {
  for (int64_t B : {1, 2, 7, 64}) {
    const DbiasPlan p = dbias_plan(B, 260, 70, 16, /*shared_dbias=*/false);
    EXPECT_EQ(p.rows_per_chunk, 1);
    EXPECT_EQ(p.chunks, B);
    EXPECT_FALSE(p.partials);
    EXPECT_EQ(attention_backward_scratch_floats(B, 260, 70, 16, false), B * 16 * 260);
  }
}

TEST(DbiasPlan, ChunksCoverTheBatchWithinThePartialBound) {
  for (int64_t B : {1, 2, 3, 6, 17, 64}) {
    for (int64_t Tq : {1, 33, 260, 4096}) {
      for (int64_t Tk : {1, 40, 1024, 4096}) {
        for (int64_t NH : {1, 4, 16, 64}) {
          SCOPED_TRACE(testing::Message()
                       << "B=" << B << " Tq=" << Tq << " Tk=" << Tk << " NH=" << NH);
          const DbiasPlan p = dbias_plan(B, Tq, Tk, NH, /*shared_dbias=*/true);
          ASSERT_GE(p.rows_per_chunk, 1);
          ASSERT_GE(p.chunks, 1);
          EXPECT_GE(p.chunks * p.rows_per_chunk, B) << "every batch row is in a chunk";
          EXPECT_LT((p.chunks - 1) * p.rows_per_chunk, B) << "no chunk is empty";
          EXPECT_EQ(p.partials, p.chunks > 1);
          const int64_t partial_bytes = 4 * NH * Tq * Tk;
          if (p.partials) {
            EXPECT_LE(p.chunks * partial_bytes, kDbiasMaxPartialBytes);
          }
          const int64_t extra =
              attention_backward_scratch_floats(B, Tq, Tk, NH, true) - B * NH * Tq;
          EXPECT_EQ(extra, p.partials ? p.chunks * NH * Tq * Tk : 0);
          // Chunks wanted to fill the GPU; rounding rows up may lose up to half of them.
          const int64_t wanted = std::min(B, ceil_div(kDbiasTargetBlocks, ceil_div(Tq, 32) * NH));
          if (wanted * partial_bytes <= kDbiasMaxPartialBytes) {
            EXPECT_GT(2 * p.chunks, wanted);
          }
        }
      }
    }
  }
}

TEST(DbiasPlan, LargeScoresGetFewerChunks) {
  // 16 MiB per partial: at most 4 chunks, though the grid would want 16.
  const DbiasPlan p = dbias_plan(64, 128, 4096, 8, true);
  EXPECT_EQ(p.chunks, 4);
  EXPECT_EQ(p.rows_per_chunk, 16);
  // 64 MiB per partial: one chunk, added straight into dbias, no partials.
  const DbiasPlan one = dbias_plan(8, 1024, 1024, 16, true);
  EXPECT_EQ(one.chunks, 1);
  EXPECT_EQ(one.rows_per_chunk, 8);
  EXPECT_FALSE(one.partials);
  EXPECT_EQ(attention_backward_scratch_floats(8, 1024, 1024, 16, true), 8 * 16 * 1024);
}

TEST(DbiasPlan, TheParityCasesChunkAsTheySay) {
  // cuda_parity_test.cc GeneralAttention's shared-bias cases.
  const DbiasPlan three_of_one = dbias_plan(3, 45, 33, 2, true);
  EXPECT_EQ(three_of_one.chunks, 3);
  EXPECT_EQ(three_of_one.rows_per_chunk, 1);
  const DbiasPlan three_of_two = dbias_plan(6, 260, 260, 16, true);
  EXPECT_EQ(three_of_two.chunks, 3);
  EXPECT_EQ(three_of_two.rows_per_chunk, 2);
  const DbiasPlan one_chunk = dbias_plan(2, 1024, 40, 16, true);
  EXPECT_EQ(one_chunk.chunks, 1);
  EXPECT_FALSE(one_chunk.partials);
}

}  // namespace
}  // namespace ax::train::cuda
