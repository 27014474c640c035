// The CUDA attention backward pass's plan for the gradient of a bias shared by the batch
// (trainer/backend_cuda/src/attention_plan.h), run on the host: the chunks of batch rows cover the
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

// Plans worked out by hand from the rule: the grid's wish (512 blocks over tiles · heads), then the
// 64 MiB bound on the partials, then whole rows per chunk.
struct Expected {
  int64_t B, Tq, Tk, NH;
  int64_t chunks, rows_per_chunk;
  const char* why;
};

constexpr Expected kExpected[] = {
    {64, 128, 4096, 8, 4, 16, "16 MiB partials: 4 chunks, though the grid wants 16"},
    {8, 1024, 1024, 16, 1, 8, "64 MiB partials: one chunk, straight into dbias"},
    // the op table's shared-bias attention cases (op_table_attention.cc), as its comments say.
    {3, 45, 33, 2, 3, 1, "parity: 3 chunks of 1 row"},
    {6, 260, 260, 16, 3, 2, "parity: the grid wants 4 chunks; 2 rows each make 3"},
    {2, 1024, 40, 16, 1, 2, "parity: 512 blocks already, one chunk"},
};

TEST(DbiasPlan, HandWorkedPlans) {
  for (const Expected& e : kExpected) {
    SCOPED_TRACE(e.why);
    const DbiasPlan p = dbias_plan(e.B, e.Tq, e.Tk, e.NH, true);
    EXPECT_EQ(p.chunks, e.chunks);
    EXPECT_EQ(p.rows_per_chunk, e.rows_per_chunk);
    EXPECT_EQ(p.partials, e.chunks > 1);
    EXPECT_EQ(attention_backward_scratch_floats(e.B, e.Tq, e.Tk, e.NH, true),
              e.B * e.NH * e.Tq + (e.chunks > 1 ? e.chunks * e.NH * e.Tq * e.Tk : 0));
  }
}

}  // namespace
}  // namespace ax::train::cuda
