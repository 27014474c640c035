// T5's span corruption (the pretraining objective of T5 v1.1), as T5's preprocessors define it
// (t5/data/preprocessors.py: random_spans_helper, random_spans_noise_mask, span_corruption):
//   - a raw example of `raw` tokens gets round(raw · noise_density) noise tokens (at least 1,
//     at most raw - 1) in max(1, round(noise / mean_span)) spans; the noise and the non-noise
//     tokens are each cut into that many non-empty spans at random, and the spans alternate,
//     non-noise first (so no noise span starts at position 0);
//   - inputs: the non-noise tokens with each noise span replaced by one sentinel, then EOS;
//   - targets: each noise span preceded by its sentinel, then EOS;
//   - the k-th span's sentinel is `sentinel_top - k` (<extra_id_k>; <extra_id_0> is the highest
//     id of a T5 vocabulary).
// The random cuts come from SplitMix64 seeded by the caller (per example), so an example's
// corruption depends on that seed alone: not on the rank, the batch or the thread. TF's stateless
// shuffle is not reproduced bit for bit; the distribution of span lengths is the same.
// Contract and examples: docs/t5.md "Span corruption".
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ax/common/status.h"

namespace ax::data {

struct SpanCorruption {
  double noise_density = 0.15;
  double mean_noise_span_length = 3.0;
};

// random_spans_helper: the raw example length whose corrupted inputs are exactly
// `inputs_length` tokens (one sentinel per span and an EOS included), and the targets' length.
// 512 -> raw 568, targets 114; 1024 -> 1137, 229. InvalidArgument when inputs_length is too
// short for one noise span.
struct SpanLengths {
  int64_t raw = 0;
  int64_t inputs = 0;
  int64_t targets = 0;
};
StatusOr<SpanLengths> span_lengths(int64_t inputs_length, const SpanCorruption& sc = {});

// The number of noise tokens and of noise spans for `length` raw tokens (length >= 2).
struct NoiseCounts {
  int64_t noise = 0;
  int64_t spans = 0;
};
NoiseCounts noise_counts(int64_t length, const SpanCorruption& sc = {});

// random_spans_noise_mask: 1 at noise tokens. length >= 2.
std::vector<uint8_t> noise_mask(int64_t length, const SpanCorruption& sc, uint64_t seed);

// Corrupts `tokens` (length >= 2) into inputs and targets (both replaced). InvalidArgument when
// the example has more noise spans than `num_sentinels`.
Status span_corrupt(std::span<const uint32_t> tokens, const SpanCorruption& sc, uint64_t seed,
                    uint32_t sentinel_top, uint32_t num_sentinels, uint32_t eos,
                    std::vector<uint32_t>* inputs, std::vector<uint32_t>* targets);

}  // namespace ax::data
