// Where a run of a (tensor-parallel) parameter's elements lies in its logical tensor, as boxes a
// checkpoint can store and read back on any other mesh (docs/checkpoint-format.md "slices").
#pragma once

#include <cstdint>
#include <vector>

#include "ax/trainer/parallel/param_store.h"

namespace ax::train {

// The logical elements [offset, offset + shape) of a parameter, whose values are the `length`
// elements at `data_offset` of the run (row-major in the box, so contiguous).
struct LogicalBox {
  std::vector<int64_t> offset;
  std::vector<int64_t> shape;
  int64_t data_offset = 0;
  int64_t length = 0;
};

// Splits the elements [local_begin, local_begin + length) of spec's tensor (row-major) into
// boxes of the logical tensor: a partial first row, whole rows, a partial last row, each further
// split where the tensor-parallel pieces along split_dim end. Parameters have one or two
// dimensions; a column split (split_dim 1) has a single piece.
std::vector<LogicalBox> logical_boxes(const ParamSpec& spec, int64_t local_begin, int64_t length);

}  // namespace ax::train
