#include "ax/datasets/loader/span_corruption.h"

#include <algorithm>
#include <cmath>

#include "ax/common/check.h"
#include "ax/common/rng.h"

namespace ax::data {
namespace {

// Python's round() and tf.round: to the nearest integer, halves to even.
int64_t round_half_even(double x) { return static_cast<int64_t>(std::nearbyint(x)); }

// Lengths of `segments` non-empty segments of `items` items, cut at random: T5's
// _random_segmentation (a shuffled indicator of the items that start a segment).
std::vector<int64_t> random_segmentation(int64_t items, int64_t segments, SplitMix64& rng) {
  std::vector<uint8_t> starts(static_cast<size_t>(items - 1), 0);
  std::fill(starts.begin(), starts.begin() + (segments - 1), 1);
  for (size_t i = starts.size(); i > 1; --i) std::swap(starts[i - 1], starts[rng.below(i)]);
  std::vector<int64_t> lengths;
  lengths.reserve(static_cast<size_t>(segments));
  int64_t length = 1;
  for (uint8_t start : starts) {
    if (start) {
      lengths.push_back(length);
      length = 0;
    }
    ++length;
  }
  lengths.push_back(length);
  return lengths;
}

// Raw length -> (inputs, targets) lengths: one sentinel per span and an EOS on each side. T5's
// helper counts spans without the mask's "at least one" (so for inputs of a few tokens its
// lengths and its masks disagree); these are the counts the mask uses, the same as T5's wherever
// a span rounds to at least one (every real length: 512 -> 85 noise tokens in 28 spans).
std::pair<int64_t, int64_t> corrupted_lengths(int64_t raw, const SpanCorruption& sc) {
  if (raw < 2) return {raw + 1, 1};
  const NoiseCounts c = noise_counts(raw, sc);
  return {raw - c.noise + c.spans + 1, c.noise + c.spans + 1};
}

}  // namespace

StatusOr<SpanLengths> span_lengths(int64_t inputs_length, const SpanCorruption& sc) {
  if (!(sc.noise_density > 0 && sc.noise_density < 1) || !(sc.mean_noise_span_length >= 1)) {
    return InvalidArgument("span corruption needs 0 < noise_density < 1 and a mean span >= 1, got ",
                           sc.noise_density, " and ", sc.mean_noise_span_length);
  }
  int64_t raw = inputs_length - 1;
  while (corrupted_lengths(raw + 1, sc).first <= inputs_length) ++raw;
  auto [inputs, targets] = corrupted_lengths(raw, sc);
  // T5's "minor hack": with density 0.5 the targets should not outgrow the inputs.
  if (sc.noise_density == 0.5 && targets > inputs) {
    --raw;
    --targets;
  }
  const NoiseCounts c = raw >= 2 ? noise_counts(raw, sc) : NoiseCounts{};
  if (raw < 2 || c.spans < 1 || c.noise < 1) {
    return InvalidArgument("an encoder length of ", inputs_length,
                           " tokens is too short for one noise span of span corruption (it leaves ",
                           raw, " raw tokens)");
  }
  return SpanLengths{raw, inputs, targets};
}

NoiseCounts noise_counts(int64_t length, const SpanCorruption& sc) {
  AX_CHECK_GE(length, 2) << "span corruption of fewer than 2 tokens";
  int64_t noise = round_half_even(static_cast<double>(length) * sc.noise_density);
  noise = std::clamp<int64_t>(noise, 1, length - 1);
  const int64_t spans =
      std::max<int64_t>(1, round_half_even(static_cast<double>(noise) / sc.mean_noise_span_length));
  // Never more spans than tokens of either kind (T5 caps them the same way through its
  // segmentation of noise and non-noise tokens).
  return {noise, std::min({spans, noise, length - noise})};
}

std::vector<uint8_t> noise_mask(int64_t length, const SpanCorruption& sc, uint64_t seed) {
  const NoiseCounts c = noise_counts(length, sc);
  SplitMix64 rng(seed);
  const std::vector<int64_t> noise = random_segmentation(c.noise, c.spans, rng);
  const std::vector<int64_t> other = random_segmentation(length - c.noise, c.spans, rng);
  std::vector<uint8_t> mask;
  mask.reserve(static_cast<size_t>(length));
  for (int64_t s = 0; s < c.spans; ++s) {
    mask.insert(mask.end(), static_cast<size_t>(other[static_cast<size_t>(s)]), 0);
    mask.insert(mask.end(), static_cast<size_t>(noise[static_cast<size_t>(s)]), 1);
  }
  return mask;
}

Status span_corrupt(std::span<const uint32_t> tokens, const SpanCorruption& sc, uint64_t seed,
                    uint32_t sentinel_top, uint32_t num_sentinels, uint32_t eos,
                    std::vector<uint32_t>* inputs, std::vector<uint32_t>* targets) {
  const int64_t length = static_cast<int64_t>(tokens.size());
  if (length < 2) return InvalidArgument("span corruption of ", length, " tokens (needs 2)");
  const NoiseCounts c = noise_counts(length, sc);
  if (c.spans > static_cast<int64_t>(num_sentinels) || c.spans > int64_t{sentinel_top} + 1) {
    return InvalidArgument("an example of ", length, " tokens has ", c.spans,
                           " noise spans, more than the vocabulary's ", num_sentinels,
                           " sentinels: shorten the encoder length or add sentinels");
  }
  const std::vector<uint8_t> mask = noise_mask(length, sc, seed);
  inputs->clear();
  targets->clear();
  uint32_t sentinel = sentinel_top;
  for (int64_t i = 0; i < length; ++i) {
    if (!mask[static_cast<size_t>(i)]) {
      inputs->push_back(tokens[static_cast<size_t>(i)]);
      continue;
    }
    if (i == 0 || !mask[static_cast<size_t>(i - 1)]) {  // a noise span starts here
      inputs->push_back(sentinel);
      targets->push_back(sentinel);
      --sentinel;
    }
    targets->push_back(tokens[static_cast<size_t>(i)]);
  }
  inputs->push_back(eos);
  targets->push_back(eos);
  return Status::Ok();
}

}  // namespace ax::data
