// T5 span corruption: lengths as T5's random_spans_helper computes them (hand-checked), the noise
// mask's structure, sentinel numbering and EOS on a hand-made case, and a property test over 10k
// random lengths that the corrupted example always decodes back to the raw tokens.
#include "ax/datasets/loader/span_corruption.h"

#include <gtest/gtest.h>

#include <numeric>

#include "ax/common/rng.h"

namespace ax::data {
namespace {

TEST(SpanLengths, AsT5ComputesThem) {
  // T5's random_spans_helper(512) = (568, 114): 568 raw tokens -> round(85.2) = 85 noise tokens
  // in round(85 / 3) = 28 spans; inputs 483 + 28 + 1 = 512, targets 85 + 28 + 1 = 114.
  auto a = span_lengths(512);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->raw, 568);
  EXPECT_EQ(a->inputs, 512);
  EXPECT_EQ(a->targets, 114);
  auto b = span_lengths(1024);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->raw, 1137);
  EXPECT_EQ(b->targets, 229);
  // 8 tokens of input: raw 8 has round(1.2) = 1 noise token in 1 span: 7 + 1 + 1 = 9 > 8, so raw
  // is 7: 1 noise, 1 span, inputs 6 + 1 + 1 = 8, targets 1 + 1 + 1 = 3.
  auto c = span_lengths(8);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->raw, 7);
  EXPECT_EQ(c->inputs, 8);
  EXPECT_EQ(c->targets, 3);
  EXPECT_EQ(span_lengths(2).status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(span_lengths(2).status().message().find("too short for one noise span"),
            std::string::npos);
}

TEST(NoiseMask, AlternatesSpansStartingWithNonNoise) {
  for (uint64_t seed = 0; seed < 50; ++seed) {
    const std::vector<uint8_t> mask = noise_mask(568, {}, seed);
    ASSERT_EQ(mask.size(), 568u);
    EXPECT_EQ(mask[0], 0) << "a noise span at position 0, seed " << seed;
    EXPECT_EQ(std::accumulate(mask.begin(), mask.end(), 0), 85);
    int spans = 0;
    for (size_t i = 0; i < mask.size(); ++i) spans += mask[i] && (i == 0 || !mask[i - 1]) ? 1 : 0;
    EXPECT_EQ(spans, 28);
    EXPECT_EQ(mask.back(), 1) << "the last span is noise (spans alternate, non-noise first)";
  }
  EXPECT_EQ(noise_mask(568, {}, 7), noise_mask(568, {}, 7));
  EXPECT_NE(noise_mask(568, {}, 7), noise_mask(568, {}, 8));
}

TEST(SpanCorrupt, SentinelsCountDownFromTheTopAndBothSidesEndInEos) {
  // 20 tokens: round(3.0) = 3 noise tokens in round(3 / 3) = 1 span.
  std::vector<uint32_t> tokens(20);
  std::iota(tokens.begin(), tokens.end(), 100u);
  const std::vector<uint8_t> mask = noise_mask(20, {}, 3);
  std::vector<uint32_t> inputs, targets;
  ASSERT_TRUE(span_corrupt(tokens, {}, 3, 32099, 100, 1, &inputs, &targets).ok());
  std::vector<uint32_t> want_in, want_tg;
  for (size_t i = 0; i < 20; ++i) {
    if (!mask[i]) {
      want_in.push_back(tokens[i]);
    } else {
      if (!mask[i - 1]) {
        want_in.push_back(32099);
        want_tg.push_back(32099);
      }
      want_tg.push_back(tokens[i]);
    }
  }
  want_in.push_back(1);
  want_tg.push_back(1);
  EXPECT_EQ(inputs, want_in);
  EXPECT_EQ(targets, want_tg);
  EXPECT_EQ(inputs.size(), 20u - 3 + 1 + 1);
  EXPECT_EQ(targets.size(), 3u + 1 + 1);

  // 568 tokens, 28 spans: <extra_id_0> .. <extra_id_27> in order in both.
  tokens.resize(568);
  std::iota(tokens.begin(), tokens.end(), 0u);
  ASSERT_TRUE(span_corrupt(tokens, {}, 11, 32099, 100, 1, &inputs, &targets).ok());
  EXPECT_EQ(inputs.size(), 512u);
  EXPECT_EQ(targets.size(), 114u);
  uint32_t expect = 32099;
  for (uint32_t t : targets) {
    if (t >= 32000) {
      EXPECT_EQ(t, expect--);
    }
  }
  EXPECT_EQ(expect, 32099u - 28);
  EXPECT_EQ(targets[0], 32099u) << "targets start with <extra_id_0>";

  // More spans than sentinels is an error, not ids below the sentinel range.
  Status s = span_corrupt(tokens, {}, 11, 32099, 10, 1, &inputs, &targets);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("more than the vocabulary's 10 sentinels"), std::string::npos);
}

// Decodes inputs/targets back into the raw tokens: sentinel k in the inputs stands for the
// tokens after sentinel k in the targets.
std::vector<uint32_t> uncorrupt(const std::vector<uint32_t>& inputs,
                                const std::vector<uint32_t>& targets, uint32_t first_sentinel) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i + 1 < inputs.size(); ++i) {
    if (inputs[i] < first_sentinel) {
      out.push_back(inputs[i]);
      continue;
    }
    size_t j = 0;
    while (j < targets.size() && targets[j] != inputs[i]) ++j;
    for (++j; j + 1 < targets.size() && targets[j] < first_sentinel; ++j) out.push_back(targets[j]);
  }
  return out;
}

TEST(SpanCorrupt, TenThousandRandomLengthsDecodeBackToTheRawTokens) {
  SplitMix64 rng(2024);
  std::vector<uint32_t> inputs, targets;
  for (int trial = 0; trial < 10000; ++trial) {
    const int64_t inputs_length = 4 + static_cast<int64_t>(rng.below(600));
    auto lengths = span_lengths(inputs_length);
    ASSERT_TRUE(lengths.ok()) << inputs_length;
    std::vector<uint32_t> tokens(static_cast<size_t>(lengths->raw));
    for (uint32_t& t : tokens) t = 2 + static_cast<uint32_t>(rng.below(1000));
    const uint64_t seed = rng.next();
    ASSERT_TRUE(span_corrupt(tokens, {}, seed, 1199, 100, 1, &inputs, &targets).ok());
    ASSERT_EQ(static_cast<int64_t>(inputs.size()), lengths->inputs) << inputs_length;
    ASSERT_EQ(static_cast<int64_t>(targets.size()), lengths->targets) << inputs_length;
    ASSERT_EQ(inputs.back(), 1u);
    ASSERT_EQ(targets.back(), 1u);
    ASSERT_LT(inputs[0], 1100u) << "the example starts with a noise span";
    ASSERT_EQ(uncorrupt(inputs, targets, 1100), tokens) << inputs_length << " seed " << seed;
  }
}

}  // namespace
}  // namespace ax::data
