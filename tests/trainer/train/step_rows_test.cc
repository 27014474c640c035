// The rows of a step: next-token rows, and T5's span corruption as the loader's windows become
// encoder and decoder rows (lengths, shift right, EOS, sentinels, packing, padding, determinism).
#include "ax/trainer/train/step_rows.h"

#include <gtest/gtest.h>

#include <numeric>

#include "ax/trainer/config/config.h"

namespace ax::train {
namespace {

constexpr uint32_t kVocab = 1000, kSentinels = 100, kEos = 1;

SpanCorruptionRows pile_rows(int64_t enc, int64_t dec, int64_t pack = 1) {
  SpanCorruptionRows sc;
  sc.encoder_length = enc;
  sc.decoder_length = dec;
  sc.pack = pack;
  sc.seed = 7;
  sc.sentinel_top = kVocab - 1;
  sc.num_sentinels = kSentinels;
  sc.eos = kEos;
  sc.pad = 0;
  return sc;
}

// Ordinary tokens (below the sentinels, above EOS), distinct so that the targets can be traced.
std::vector<uint32_t> windows(int64_t rows, int64_t raw) {
  std::vector<uint32_t> w(static_cast<size_t>(rows * raw));
  for (size_t i = 0; i < w.size(); ++i) w[i] = 2 + static_cast<uint32_t>(i % 800);
  return w;
}

// The CPU benchmark's T5s (bench-t5-a/b, ENC_SL 256, DEC_SL 64): their span-corrupted rows fit
// DEC_SL with 100 sentinels, so ax-train-bench's worker and ax-train can make them.
TEST(StepRows, BenchT5ConfigsFit) {
  for (const char* name : {"bench-t5-a", "bench-t5-b"}) {
    StatusOr<Config> c = make_experiment(name);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    SpanCorruptionRows sc = pile_rows(c->train.encoder_seq_len, c->train.seq_len);
    StatusOr<data::SpanLengths> one = sc.lengths();
    ASSERT_TRUE(one.ok()) << name << ": " << one.status().to_string();
    EXPECT_EQ(one->raw, 284) << name;
    EXPECT_EQ(one->targets, 58) << name;
    EXPECT_LE(data::noise_counts(one->raw, sc.corruption).spans, kSentinels) << name;
  }
}

TEST(StepRows, LmRowsShiftByOne) {
  const std::vector<uint32_t> w = {5, 6, 7, 8, 9, 10};  // two windows of 3
  StepRows r = lm_rows(w, 2, 2);
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{5, 6, 8, 9}));
  EXPECT_EQ(r.targets, (std::vector<int32_t>{6, 7, 9, 10}));
  EXPECT_EQ(r.num_targets, 4);
  Batch b = r.micro_batch(1, 1);
  EXPECT_EQ(std::vector<int32_t>(b.tokens.begin(), b.tokens.end()), (std::vector<int32_t>{8, 9}));
  EXPECT_TRUE(b.encoder_tokens.empty());
}

TEST(StepRows, PileLengths) {
  // T5x's Pile recipe: ENC_SL 512 from 568 raw tokens, 114 targets, in DEC_SL 128.
  SpanCorruptionRows sc = pile_rows(512, 128);
  ASSERT_TRUE(sc.lengths().ok());
  EXPECT_EQ(sc.raw_length(), 568);
  StatusOr<StepRows> r = sc.make(windows(2, 568), std::vector<uint64_t>{3, 4});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->num_targets, 2 * 114);
  EXPECT_EQ(r->encoder_tokens.size(), 2u * 512);
  for (int64_t row = 0; row < 2; ++row) {
    const int32_t* enc = r->encoder_tokens.data() + row * 512;
    const int32_t* tgt = r->targets.data() + row * 128;
    const int32_t* dec = r->tokens.data() + row * 128;
    const int32_t* seg = r->segment_ids.data() + row * 128;
    EXPECT_EQ(enc[511], static_cast<int32_t>(kEos));
    EXPECT_EQ(tgt[113], static_cast<int32_t>(kEos));
    EXPECT_EQ(tgt[0], static_cast<int32_t>(kVocab - 1)) << "targets start with <extra_id_0>";
    EXPECT_EQ(dec[0], 0) << "decoder_start_token_id";
    for (int t = 1; t < 114; ++t) EXPECT_EQ(dec[t], tgt[t - 1]) << t;
    for (int t = 114; t < 128; ++t) {
      EXPECT_EQ(tgt[t], -1) << "padding is ignored";
      EXPECT_EQ(seg[t], 0);
      EXPECT_EQ(dec[t], 0);
    }
    EXPECT_EQ(seg[0], 1);
    EXPECT_EQ(seg[113], 1);
  }
}

TEST(StepRows, SameSampleSameCorruption) {
  // An example's corruption depends on the seed and its sample id alone: the same window under
  // the same id in another batch (another rank, another batch size) gives the same rows.
  SpanCorruptionRows sc = pile_rows(64, 20);
  const int64_t raw = sc.raw_length();
  std::vector<uint32_t> two = windows(2, raw);
  std::vector<uint32_t> second(two.begin() + raw, two.end());
  StatusOr<StepRows> both = sc.make(two, std::vector<uint64_t>{10, 11});
  StatusOr<StepRows> alone = sc.make(second, std::vector<uint64_t>{11});
  ASSERT_TRUE(both.ok() && alone.ok());
  EXPECT_TRUE(std::equal(alone->encoder_tokens.begin(), alone->encoder_tokens.end(),
                         both->encoder_tokens.begin() + 64));
  EXPECT_TRUE(std::equal(alone->targets.begin(), alone->targets.end(), both->targets.begin() + 20));
  StatusOr<StepRows> other_id = sc.make(second, std::vector<uint64_t>{12});
  ASSERT_TRUE(other_id.ok());
  EXPECT_NE(other_id->encoder_tokens, alone->encoder_tokens) << "another sample id, other spans";
  sc.seed = 8;
  StatusOr<StepRows> other_seed = sc.make(second, std::vector<uint64_t>{11});
  ASSERT_TRUE(other_seed.ok());
  EXPECT_NE(other_seed->encoder_tokens, alone->encoder_tokens) << "another seed, other spans";
}

TEST(StepRows, PackedExamplesGetTheirOwnSegments) {
  SpanCorruptionRows sc = pile_rows(128, 40, 2);  // two examples of 64 inputs each
  StatusOr<data::SpanLengths> one = sc.lengths();
  ASSERT_TRUE(one.ok());
  const int64_t raw = sc.raw_length();
  EXPECT_EQ(raw, 2 * one->raw);
  StatusOr<StepRows> r = sc.make(windows(1, raw), std::vector<uint64_t>{5});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->num_targets, 2 * one->targets);
  for (int64_t t = 0; t < 128; ++t) {
    EXPECT_EQ(r->encoder_segment_ids[static_cast<size_t>(t)], t < 64 ? 1 : 2) << t;
  }
  EXPECT_EQ(r->encoder_tokens[63], static_cast<int32_t>(kEos)) << "each example ends in EOS";
  const int64_t second = one->targets;
  EXPECT_EQ(r->segment_ids[static_cast<size_t>(second)], 2);
  EXPECT_EQ(r->tokens[static_cast<size_t>(second)], 0) << "each example starts its decoder";
  EXPECT_EQ(r->targets[static_cast<size_t>(second)], static_cast<int32_t>(kVocab - 1))
      << "sentinels are numbered per example";
  // The second example's spans are those of its own id, as if it were alone.
  SpanCorruptionRows single = pile_rows(64, 20);
  std::vector<uint32_t> w = windows(1, raw);
  StatusOr<StepRows> alone =
      single.make(std::span<const uint32_t>(w).subspan(static_cast<size_t>(one->raw)),
                  std::vector<uint64_t>{11});
  ASSERT_TRUE(alone.ok());
  EXPECT_TRUE(std::equal(alone->encoder_tokens.begin(), alone->encoder_tokens.end(),
                         r->encoder_tokens.begin() + 64));
}

TEST(StepRows, LengthsThatCannotWorkAreRefused) {
  StatusOr<data::SpanLengths> short_dec = pile_rows(512, 100).lengths();
  ASSERT_FALSE(short_dec.ok());
  EXPECT_NE(short_dec.status().message().find("DEC_SL"), std::string::npos)
      << short_dec.status().message();
  StatusOr<data::SpanLengths> tiny_enc = pile_rows(1, 16).lengths();
  ASSERT_FALSE(tiny_enc.ok());
  EXPECT_NE(tiny_enc.status().message().find("ENC_SL=1"), std::string::npos)
      << tiny_enc.status().message();
  EXPECT_FALSE(pile_rows(100, 40, 3).lengths().ok()) << "pack must divide ENC_SL";
}

}  // namespace
}  // namespace ax::train
