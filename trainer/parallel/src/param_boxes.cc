#include "ax/trainer/parallel/param_boxes.h"

#include <algorithm>

#include "ax/common/check.h"

namespace ax::train {
namespace {

// A box of the local tensor: rows [r0, r1), columns [c0, c1) (one dimension: r = 0..1, the
// columns are the elements), and where its data starts in the run.
struct LocalBox {
  int64_t r0, r1, c0, c1, data_offset;
};

// Maps one local box to logical boxes through the pieces along split_dim.
void map_box(const ParamSpec& spec, const LocalBox& b, std::vector<LogicalBox>* out) {
  const bool one_dim = spec.shape.size() == 1;
  auto emit = [&](int64_t lr0, int64_t lr1, int64_t lc0, int64_t lc1, int64_t data_offset) {
    LogicalBox box;
    if (one_dim) {
      box.offset = {lc0};
      box.shape = {lc1 - lc0};
    } else {
      box.offset = {lr0, lc0};
      box.shape = {lr1 - lr0, lc1 - lc0};
    }
    box.data_offset = data_offset;
    box.length = (lr1 - lr0) * (lc1 - lc0);
    out->push_back(std::move(box));
  };
  if (spec.split_dim < 0) {
    emit(b.r0, b.r1, b.c0, b.c1, b.data_offset);
    return;
  }
  // The dimension the pieces run along, in (row, column) terms of the local box.
  const bool along_rows = spec.split_dim == 0 && !one_dim;
  if (!along_rows) {
    // Columns (a 1-D tensor's elements, or a 2-D tensor's columns).
    AX_CHECK(one_dim || spec.pieces.size() == 1) << spec.name << ": a column split has one piece";
    for (const ParamPiece& p : spec.pieces) {
      const int64_t c0 = std::max(b.c0, p.local_begin);
      const int64_t c1 = std::min(b.c1, p.local_begin + p.length);
      if (c0 >= c1) continue;
      const int64_t shift = p.logical_begin - p.local_begin;
      // Within a 1-D run (one row) the data of [c0, c1) starts (c0 - b.c0) later.
      emit(b.r0, b.r1, c0 + shift, c1 + shift, b.data_offset + (c0 - b.c0));
    }
    return;
  }
  const int64_t width = b.c1 - b.c0;
  for (const ParamPiece& p : spec.pieces) {
    const int64_t r0 = std::max(b.r0, p.local_begin);
    const int64_t r1 = std::min(b.r1, p.local_begin + p.length);
    if (r0 >= r1) continue;
    const int64_t shift = p.logical_begin - p.local_begin;
    emit(r0 + shift, r1 + shift, b.c0, b.c1, b.data_offset + (r0 - b.r0) * width);
  }
}

}  // namespace

std::vector<LogicalBox> logical_boxes(const ParamSpec& spec, int64_t local_begin, int64_t length) {
  AX_CHECK(spec.shape.size() == 1 || spec.shape.size() == 2) << spec.name;
  AX_CHECK(local_begin >= 0 && length >= 0 && local_begin + length <= spec.numel) << spec.name;
  std::vector<LogicalBox> out;
  if (length == 0) return out;
  if (spec.shape.size() == 1) {
    map_box(spec, {0, 1, local_begin, local_begin + length, 0}, &out);
    return out;
  }
  const int64_t cols = spec.shape[1];
  int64_t pos = local_begin, end = local_begin + length;
  std::vector<LocalBox> boxes;
  if (pos % cols != 0) {  // partial first row
    const int64_t r = pos / cols, c0 = pos % cols, c1 = std::min(cols, c0 + (end - pos));
    boxes.push_back({r, r + 1, c0, c1, pos - local_begin});
    pos += c1 - c0;
  }
  if (end - pos >= cols) {  // whole rows
    const int64_t r = pos / cols, rows = (end - pos) / cols;
    boxes.push_back({r, r + rows, 0, cols, pos - local_begin});
    pos += rows * cols;
  }
  if (pos < end) {  // partial last row
    const int64_t r = pos / cols;
    boxes.push_back({r, r + 1, 0, end - pos, pos - local_begin});
  }
  for (const LocalBox& b : boxes) map_box(spec, b, &out);
  return out;
}

}  // namespace ax::train
