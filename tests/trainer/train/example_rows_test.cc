// Fine-tuning rows from (inputs, targets) examples: T5's encoder/decoder rows and decoder-only
// prompt+response rows, by hand; greedy packing, truncation, the loss mask; the packer's rows
// the same on every layout, and its state resuming exactly.
#include "ax/trainer/train/example_rows.h"

#include <gtest/gtest.h>

#include <optional>
#include <set>

#include "ax/datasets/shards/shard_writer.h"
#include "test_util.h"

namespace ax::train {
namespace {

using V = std::vector<int32_t>;
constexpr int64_t kEos = 1;

data::Seq2SeqExample example(std::vector<uint32_t> inputs, std::vector<uint32_t> targets) {
  return {0, std::move(inputs), std::move(targets)};
}

// The rows greedy packing makes of `examples`: a row takes examples while they fit.
std::vector<size_t> greedy_ends(const ExampleRows& layout,
                                const std::vector<data::Seq2SeqExample>& examples) {
  std::vector<size_t> ends;
  ExampleRows::Size used;
  for (size_t i = 0; i < examples.size(); ++i) {
    const ExampleRows::Size s = layout.size(examples[i]);
    if (i > 0 && !layout.fits(used, s)) {
      ends.push_back(i);
      used = {};
    }
    used.encoder += s.encoder;
    used.decoder += s.decoder;
  }
  ends.push_back(examples.size());
  return ends;
}

V row(const std::vector<int32_t>& v, int64_t r, int64_t width) {
  return V(v.begin() + r * width, v.begin() + (r + 1) * width);
}

ExampleRows t5_layout(int64_t enc, int64_t dec, bool pack = true) {
  return ExampleRows{.encoder_length = enc, .length = dec, .pack = pack, .pad = 0};
}

ExampleRows lm_layout(int64_t length, bool pack = true) {
  return ExampleRows{.encoder_length = 0, .length = length, .pack = pack, .pad = 0, .eos = kEos};
}

TEST(ExampleRows, T5PacksGreedilyAndShiftsTheTargetsRight) {
  const std::vector<data::Seq2SeqExample> ex = {
      example({11, 12, 1}, {21, 1}),          // 3 inputs, 2 targets
      example({13, 14, 15, 1}, {22, 23, 1}),  // 3 + 4 > ENC_SL 6: a new row
      example({16, 1}, {24, 1}),              // 4 + 2 inputs, 3 + 2 targets: joins the second row
      example({17, 1}, {25, 1}),              // 8 > 6: a third row
  };
  const ExampleRows layout = t5_layout(6, 5);
  const std::vector<size_t> ends = greedy_ends(layout, ex);
  ASSERT_EQ(ends, (std::vector<size_t>{1, 3, 4}));
  const StepRows r = layout.make(ex, ends);
  EXPECT_EQ(r.rows, 3);
  EXPECT_EQ(r.num_targets, 2 + 3 + 2 + 2);
  EXPECT_EQ(r.global_targets, r.num_targets);
  EXPECT_EQ(row(r.encoder_tokens, 0, 6), (V{11, 12, 1, 0, 0, 0}));
  EXPECT_EQ(row(r.encoder_segment_ids, 0, 6), (V{1, 1, 1, 0, 0, 0}));
  EXPECT_EQ(row(r.tokens, 0, 5), (V{0, 21, 0, 0, 0}));
  EXPECT_EQ(row(r.targets, 0, 5), (V{21, 1, -1, -1, -1}));
  EXPECT_EQ(row(r.segment_ids, 0, 5), (V{1, 1, 0, 0, 0}));
  EXPECT_EQ(row(r.encoder_tokens, 1, 6), (V{13, 14, 15, 1, 16, 1}));
  EXPECT_EQ(row(r.encoder_segment_ids, 1, 6), (V{1, 1, 1, 1, 2, 2}));
  EXPECT_EQ(row(r.tokens, 1, 5), (V{0, 22, 23, 0, 24})) << "decoder_start in each example";
  EXPECT_EQ(row(r.targets, 1, 5), (V{22, 23, 1, 24, 1}));
  EXPECT_EQ(row(r.segment_ids, 1, 5), (V{1, 1, 1, 2, 2}));
  EXPECT_EQ(row(r.encoder_tokens, 2, 6), (V{17, 1, 0, 0, 0, 0}));
}

TEST(ExampleRows, T5UnpackedAndTruncated) {
  const std::vector<data::Seq2SeqExample> ex = {example({11, 12, 13, 14, 1}, {21, 22, 23, 1}),
                                                example({15, 1}, {24, 1})};
  const ExampleRows layout = t5_layout(4, 3, /*pack=*/false);
  const ExampleRows::Size s = layout.size(ex[0]);
  EXPECT_EQ(s.encoder, 4);
  EXPECT_EQ(s.decoder, 3);
  EXPECT_EQ(s.targets, 3);
  EXPECT_TRUE(s.truncated);
  EXPECT_FALSE(layout.size(ex[1]).truncated);
  const std::vector<size_t> ends = greedy_ends(layout, ex);
  ASSERT_EQ(ends, (std::vector<size_t>{1, 2})) << "one example per row, though both would fit";
  const StepRows r = layout.make(ex, ends);
  EXPECT_EQ(row(r.encoder_tokens, 0, 4), (V{11, 12, 13, 14})) << "cut, EOS lost (as T5x)";
  EXPECT_EQ(row(r.targets, 0, 3), (V{21, 22, 23}));
  EXPECT_EQ(row(r.tokens, 0, 3), (V{0, 21, 22}));
  EXPECT_EQ(row(r.encoder_segment_ids, 1, 4), (V{1, 1, 0, 0})) << "the padding is masked";
  EXPECT_EQ(r.num_targets, 5);
}

TEST(ExampleRows, DecoderOnlyLossOnTheResponseOnly) {
  const std::vector<data::Seq2SeqExample> ex = {
      example({5, 6, 1}, {7, 1}),  // prompt 5 6 (its EOS dropped), response 7 EOS
      example({8, 1}, {9, 10, 1}), example({2, 1}, {3, 1}),  // 3 + 3 + 2 > 6: a new row
  };
  const ExampleRows layout = lm_layout(6);
  EXPECT_EQ(layout.size(ex[0]).decoder, 3);
  EXPECT_EQ(layout.size(ex[0]).targets, 2);
  EXPECT_EQ(layout.size(ex[1]).targets, 3);
  const std::vector<size_t> ends = greedy_ends(layout, ex);
  ASSERT_EQ(ends, (std::vector<size_t>{2, 3}));
  const StepRows r = layout.make(ex, ends);
  EXPECT_TRUE(r.encoder_tokens.empty());
  EXPECT_EQ(row(r.tokens, 0, 6), (V{5, 6, 7, 8, 9, 10}));
  EXPECT_EQ(row(r.targets, 0, 6), (V{-1, 7, 1, 9, 10, 1}));
  EXPECT_EQ(row(r.segment_ids, 0, 6), (V{1, 1, 1, 2, 2, 2}));
  EXPECT_EQ(row(r.tokens, 1, 6), (V{2, 3, 0, 0, 0, 0}));
  EXPECT_EQ(row(r.targets, 1, 6), (V{3, 1, -1, -1, -1, -1}));
  EXPECT_EQ(row(r.segment_ids, 1, 6), (V{1, 1, 0, 0, 0, 0}));
  EXPECT_EQ(r.num_targets, 2 + 3 + 2);
}

TEST(ExampleRows, DecoderOnlyTruncation) {
  const data::Seq2SeqExample a = example({5, 6, 1}, {7, 8, 1});  // 5 6 7 8 EOS
  const ExampleRows layout = lm_layout(3, /*pack=*/false);
  const ExampleRows::Size s = layout.size(a);
  EXPECT_TRUE(s.truncated);
  EXPECT_EQ(s.decoder, 3);
  EXPECT_EQ(s.targets, 2);
  const std::vector<size_t> one = {1};
  const StepRows r = layout.make(std::span(&a, 1), one);
  EXPECT_EQ(r.tokens, (V{5, 6, 7}));
  EXPECT_EQ(r.targets, (V{-1, 7, 8}));
  EXPECT_TRUE(r.segment_ids.empty()) << "causal attention never reaches the padding";
  // A prompt longer than the row leaves no target.
  const data::Seq2SeqExample b = example({5, 6, 7, 8, 1}, {9, 1});
  EXPECT_EQ(layout.size(b).targets, 0);
  const StepRows rb = layout.make(std::span(&b, 1), one);
  EXPECT_EQ(rb.targets, (V{-1, -1, -1}));
  EXPECT_EQ(rb.num_targets, 0);
  // A prompt and a response that are each a lone EOS take no position: such an example has a
  // row of its own rather than joining (and never filling) every row.
  const ExampleRows packed = lm_layout(3);
  const data::Seq2SeqExample empty = example({1}, {1});
  EXPECT_EQ(packed.size(empty).decoder, 0);
  EXPECT_FALSE(packed.fits({}, packed.size(empty)));
  EXPECT_TRUE(packed.fits({}, packed.size(example({5, 1}, {6, 1}))));
}

// A seq2seq set of random examples (inputs 1..12 tokens, targets 1..6).
std::shared_ptr<const data::ShardSet> example_set(size_t n) {
  const std::string dir = data::testing::temp_dir("example-rows");
  data::ShardSetWriterOptions options;
  options.shard.kind = data::ShardKind::kSeq2Seq;
  options.shard.frame_tokens = 64;
  options.shard_tokens = 400;
  auto writer = data::ShardSetWriter::create(dir, options);
  EXPECT_TRUE(writer.ok()) << writer.status().to_string();
  const auto inputs = data::testing::random_documents(3, n, 100, 1, 12);
  const auto targets = data::testing::random_documents(4, n, 100, 1, 6);
  for (size_t i = 0; i < n; ++i) {
    EXPECT_TRUE((*writer)->add_document(inputs[i]).ok());
    EXPECT_TRUE((*writer)->add_document(targets[i]).ok());
  }
  EXPECT_TRUE((*writer)->finish().ok());
  auto set = data::ShardSet::open(dir);
  EXPECT_TRUE(set.ok()) << set.status().to_string();
  return set.ok() ? *set : nullptr;
}

ExamplePackerOptions packer_options(const ExampleRows& layout, uint64_t replica,
                                    uint64_t replicas) {
  ExamplePackerOptions o;
  o.layout = layout;
  o.seed = 9;
  o.global_rows = 8;
  o.replica = replica;
  o.num_replicas = replicas;
  o.vocab = 100;
  o.row_ids = true;
  return o;
}

// `steps` global batches of `replicas` packers (rows concatenated in replica order), the first
// restored to `from` when given.
std::vector<StepRows> global_rows(std::shared_ptr<const data::ShardSet> set,
                                  const ExampleRows& layout, uint64_t replicas, int steps,
                                  std::optional<data::LoaderState> from = std::nullopt) {
  std::vector<StepRows> out(static_cast<size_t>(steps));
  for (uint64_t r = 0; r < replicas; ++r) {
    auto p = ExamplePacker::create(set, packer_options(layout, r, replicas));
    EXPECT_TRUE(p.ok()) << p.status().to_string();
    if (from) {
      EXPECT_TRUE((*p)->restore(*from).ok());
    }
    for (StepRows& g : out) {
      StepRows mine;
      EXPECT_TRUE((*p)->next(&mine).ok());
      g.rows += mine.rows;
      g.num_targets += mine.num_targets;
      if (r == 0) g.global_targets = mine.global_targets;
      EXPECT_EQ(g.global_targets, mine.global_targets) << "every replica counts the same";
      for (auto [to, from_v] : {std::pair{&g.tokens, &mine.tokens},
                                {&g.targets, &mine.targets},
                                {&g.segment_ids, &mine.segment_ids},
                                {&g.encoder_tokens, &mine.encoder_tokens},
                                {&g.encoder_segment_ids, &mine.encoder_segment_ids}}) {
        to->insert(to->end(), from_v->begin(), from_v->end());
      }
      g.row_ids.insert(g.row_ids.end(), mine.row_ids.begin(), mine.row_ids.end());
    }
  }
  return out;
}

TEST(ExamplePacker, EveryLayoutPacksTheSameRows) {
  auto set = example_set(50);  // several epochs in 6 steps of 8 rows
  ASSERT_NE(set, nullptr);
  for (const ExampleRows& layout : {t5_layout(16, 8), lm_layout(12)}) {
    const std::vector<StepRows> one = global_rows(set, layout, 1, 6);
    for (uint64_t replicas : {2, 4}) {
      const std::vector<StepRows> many = global_rows(set, layout, replicas, 6);
      for (size_t s = 0; s < one.size(); ++s) {
        EXPECT_EQ(many[s].rows, 8);
        EXPECT_EQ(many[s].tokens, one[s].tokens) << replicas << " replicas, step " << s;
        EXPECT_EQ(many[s].targets, one[s].targets) << replicas << " replicas, step " << s;
        EXPECT_EQ(many[s].segment_ids, one[s].segment_ids) << replicas << " replicas, step " << s;
        EXPECT_EQ(many[s].encoder_tokens, one[s].encoder_tokens);
        EXPECT_EQ(many[s].encoder_segment_ids, one[s].encoder_segment_ids);
        EXPECT_EQ(many[s].global_targets, one[s].global_targets);
        EXPECT_EQ(many[s].num_targets, one[s].global_targets) << "the slices add up";
        EXPECT_EQ(many[s].row_ids, one[s].row_ids) << replicas << " replicas, step " << s;
      }
    }
    // A row's id is the global position of its first example: 0 first, then one more than the
    // examples of the rows before it (T5 rows: every example has a segment in the decoder).
    ASSERT_EQ(one[0].row_ids.size(), 8u);
    if (layout.encoder_length == 0) continue;
    EXPECT_EQ(one[0].row_ids[0], 0u);
    for (size_t r = 1; r < 8; ++r) {
      std::set<int32_t> segments;
      for (int64_t t = 0; t < layout.length; ++t) {
        segments.insert(one[0].segment_ids[(r - 1) * static_cast<size_t>(layout.length) + t]);
      }
      segments.erase(0);
      EXPECT_EQ(one[0].row_ids[r], one[0].row_ids[r - 1] + segments.size()) << "row " << r;
    }
    // Packing puts more than one example in some rows.
    int64_t segments = 0;
    for (int32_t id : one[0].segment_ids) segments = std::max<int64_t>(segments, id);
    EXPECT_GE(segments, 2);
  }
}

TEST(ExamplePacker, ResumesExactlyFromItsState) {
  auto set = example_set(50);
  ASSERT_NE(set, nullptr);
  const ExampleRows layout = t5_layout(16, 8);
  auto p = ExamplePacker::create(set, packer_options(layout, 0, 1));
  ASSERT_TRUE(p.ok());
  StepRows rows;
  for (int s = 0; s < 3; ++s) ASSERT_TRUE((*p)->next(&rows).ok());
  const data::LoaderState state = (*p)->state();
  EXPECT_GT(state.epoch * 50 + state.sample_in_epoch, 8u * 3) << "rows held several examples";
  std::vector<StepRows> more(3);
  for (StepRows& m : more) ASSERT_TRUE((*p)->next(&m).ok());
  for (uint64_t replicas : {1, 2}) {
    const std::vector<StepRows> resumed = global_rows(set, layout, replicas, 3, state);
    for (size_t s = 0; s < more.size(); ++s) {
      EXPECT_EQ(resumed[s].encoder_tokens, more[s].encoder_tokens) << replicas << " step " << s;
      EXPECT_EQ(resumed[s].targets, more[s].targets) << replicas << " step " << s;
    }
  }
}

TEST(ExamplePacker, TokenOutsideTheVocabularyIsDataLoss) {
  auto set = example_set(20);
  ASSERT_NE(set, nullptr);
  ExamplePackerOptions o = packer_options(lm_layout(12), 0, 1);
  o.vocab = 50;  // the set's ids go up to 99
  auto p = ExamplePacker::create(set, o);
  ASSERT_TRUE(p.ok());
  StepRows rows;
  const Status s = (*p)->next(&rows);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.to_string();
  EXPECT_NE(s.message().find("outside the tokenizer's vocabulary (50)"), std::string::npos);
}

}  // namespace
}  // namespace ax::train
