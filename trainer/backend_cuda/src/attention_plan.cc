#include "attention_plan.h"

#include <algorithm>

namespace ax::train::cuda {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

DbiasPlan dbias_plan(int64_t B, int64_t Tq, int64_t Tk, int64_t NH, bool shared_dbias) {
  if (!shared_dbias || B <= 1) return {1, B, false};
  const int64_t blocks_per_row = std::max<int64_t>(ceil_div(Tq, kAttnQueryTile) * NH, 1);
  const int64_t partial_bytes = std::max<int64_t>(int64_t{sizeof(float)} * NH * Tq * Tk, 1);
  int64_t chunks = std::min(B, ceil_div(kDbiasTargetBlocks, blocks_per_row));
  chunks = std::max<int64_t>(1, std::min(chunks, kDbiasMaxPartialBytes / partial_bytes));
  const int64_t rows = ceil_div(B, chunks);
  chunks = ceil_div(B, rows);
  return {rows, chunks, chunks > 1};
}

int64_t attention_backward_scratch_floats(int64_t B, int64_t Tq, int64_t Tk, int64_t NH,
                                          bool shared_dbias) {
  const DbiasPlan p = dbias_plan(B, Tq, Tk, NH, shared_dbias);
  return B * NH * Tq + (p.partials ? p.chunks * NH * Tq * Tk : 0);
}

}  // namespace ax::train::cuda
