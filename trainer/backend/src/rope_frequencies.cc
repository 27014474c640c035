#include <cmath>
#include <numbers>
#include <vector>

#include "ax/common/check.h"
#include "ax/trainer/backend/backend.h"

namespace ax::train {

std::vector<double> rope_inv_freq(const RopeSpec& spec, int64_t head_dim) {
  AX_CHECK(head_dim > 0 && head_dim % 2 == 0) << "rope: head dim " << head_dim;
  AX_CHECK_GT(spec.theta, 0) << "rope: theta";
  std::vector<double> inv_freq(static_cast<size_t>(head_dim / 2));
  for (size_t j = 0; j < inv_freq.size(); ++j) {
    inv_freq[j] =
        std::pow(spec.theta, -2.0 * static_cast<double>(j) / static_cast<double>(head_dim));
  }
  if (spec.scaling == RopeSpec::Scaling::kNone) return inv_freq;
  AX_CHECK(spec.factor > 0 && spec.low_freq_factor > 0 &&
           spec.high_freq_factor > spec.low_freq_factor && spec.original_max_positions > 0)
      << "rope: llama3 scaling with factor " << spec.factor << ", low_freq_factor "
      << spec.low_freq_factor << ", high_freq_factor " << spec.high_freq_factor
      << ", original_max_positions " << spec.original_max_positions;
  // Wavelengths in positions, compared as Hugging Face's _compute_llama3_parameters does: longer
  // than low_freq_wavelen is slowed by `factor`, shorter than high_freq_wavelen is kept, and the
  // band between (both ends included) blends the two.
  const double low_freq_wavelen = spec.original_max_positions / spec.low_freq_factor;
  const double high_freq_wavelen = spec.original_max_positions / spec.high_freq_factor;
  for (double& f : inv_freq) {
    const double wavelen = 2 * std::numbers::pi / f;
    if (wavelen > low_freq_wavelen) {
      f /= spec.factor;
    } else if (wavelen >= high_freq_wavelen) {
      const double smooth = (spec.original_max_positions / wavelen - spec.low_freq_factor) /
                            (spec.high_freq_factor - spec.low_freq_factor);
      f = (1 - smooth) * f / spec.factor + smooth * f;
    }
  }
  return inv_freq;
}

}  // namespace ax::train
