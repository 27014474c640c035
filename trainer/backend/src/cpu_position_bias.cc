// T5's relative position bias: the gather of a (num_buckets, NH) table into the attention bias
// and the scatter-sum of the bias gradient back into the table.
#include <algorithm>
#include <vector>

#include "ax/common/check.h"
#include "cpu_backend.h"

namespace ax::train::cpu {
namespace {

// Every bucket id in [0, num_buckets): one outside is a bug in the model code (backend.h).
void expect_buckets(const Tensor& buckets, int64_t num_buckets, const char* op) {
  const int32_t* ids = buckets.as<int32_t>();
  const int64_t n = buckets.numel();
  auto [lo, hi] = std::minmax_element(ids, ids + n);
  if (*lo >= 0 && *hi < num_buckets) return;
  const int32_t* bad = *lo < 0 ? lo : hi;
  AX_CHECK(false) << op << ": bucket " << *bad << " at element " << (bad - ids) << " of buckets "
                  << buckets.shape_string() << " is outside the table's " << num_buckets;
}

}  // namespace

void CpuBackend::position_bias_forward(Tensor bias, Tensor table, Tensor buckets) {
  // bias (Bb, NH, Tq, Tk), table (num_buckets, NH), buckets (Bb, Tq, Tk) i32.
  constexpr const char* kOp = "position_bias_forward";
  const PositionBiasDims d = check_position_bias_forward(kPlan, bias, table, buckets);
  expect_buckets(buckets, d.num_buckets, kOp);
  const int32_t* ids = buckets.as<int32_t>();
  const float* t = table.as<float>();
  float* out = bias.as<float>();
  // One row (b, h, i) of Tk values per step: a gather from column h of the table.
  pool_.parallel_for(d.Bb * d.NH * d.Tq, std::max<int64_t>(1, (1 << 14) / d.Tk),
                     [&](int64_t r0, int64_t r1) {
                       for (int64_t r = r0; r < r1; ++r) {
                         const int64_t i = r % d.Tq, h = r / d.Tq % d.NH, b = r / d.Tq / d.NH;
                         const int32_t* row_ids = ids + (b * d.Tq + i) * d.Tk;
                         float* y = out + r * d.Tk;
                         for (int64_t j = 0; j < d.Tk; ++j) y[j] = t[row_ids[j] * d.NH + h];
                       }
                     });
}

// One task per head: it alone writes column h of dtable, summing every (b, i, j) in order in
// double, then adds the sum once. The same bits for any thread count; the f64 sums keep the
// table's gradient exact to f32 however many positions share a bucket (T5's far buckets
// collect most of a long sequence's T² pairs).
void CpuBackend::position_bias_backward(Tensor dtable, Tensor dbias, Tensor buckets) {
  // dtable (num_buckets, NH) f32, dbias (Bb, NH, Tq, Tk) f32, buckets (Bb, Tq, Tk) i32.
  constexpr const char* kOp = "position_bias_backward";
  const PositionBiasDims d = check_position_bias_backward(kPlan, dtable, dbias, buckets);
  expect_buckets(buckets, d.num_buckets, kOp);
  const int32_t* ids = buckets.as<int32_t>();
  const float* g = dbias.as<float>();
  float* dt = dtable.as<float>();
  const int64_t plane = d.Tq * d.Tk;
  pool_.run(d.NH, [&](int64_t h, int) {
    std::vector<double> sums(static_cast<size_t>(d.num_buckets), 0.0);
    for (int64_t b = 0; b < d.Bb; ++b) {
      const int32_t* bids = ids + b * plane;
      const float* gb = g + (b * d.NH + h) * plane;
      for (int64_t e = 0; e < plane; ++e) sums[bids[e]] += gb[e];
    }
    for (int64_t k = 0; k < d.num_buckets; ++k) {
      dt[k * d.NH + h] = static_cast<float>(dt[k * d.NH + h] + sums[k]);
    }
  });
}

}  // namespace ax::train::cpu
