#include "ax/datasets/text/tokenizer.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace ax::data {
namespace {

using testing::sample_english;
using testing::temp_dir;
using testing::write_file;

// Trains (once per process and per variant) a small BPE model on the sample text.
std::string trained_model(uint32_t vocab_size, int extra_ids = 0) {
  std::string dir = temp_dir("tok");
  write_file(dir + "/train.txt", sample_english(40));
  TrainTokenizerOptions o;
  o.inputs = {dir + "/train.txt"};
  o.output = dir + "/spm.model";
  o.vocab_size = vocab_size;
  o.extra_ids = extra_ids;
  o.threads = 2;
  Status st = train_tokenizer(o);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return o.output;
}

const std::string& model_a() {
  static const std::string path = trained_model(400, /*extra_ids=*/4);
  return path;
}

TEST(Tokenizer, TrainsLoadsAndRoundTrips) {
  auto tok = Tokenizer::load(model_a());
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ((*tok)->vocab_size(), 400u);
  EXPECT_EQ((*tok)->pad_id(), 0);
  EXPECT_EQ((*tok)->eos_id(), 1);
  EXPECT_EQ((*tok)->unk_id(), 2);
  EXPECT_EQ((*tok)->bos_id(), -1);
  EXPECT_EQ((*tok)->path(), model_a());

  const std::string text = "The quick brown fox walked to the village before winter.";
  std::vector<uint32_t> ids;
  ASSERT_TRUE((*tok)->encode(text, &ids).ok());
  EXPECT_GT(ids.size(), 3u);
  EXPECT_LT(ids.size(), text.size());
  for (uint32_t id : ids) EXPECT_LT(id, 400u);
  auto back = (*tok)->decode(ids);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(*back, text);

  // Byte fallback keeps characters never seen in training.
  std::vector<uint32_t> rare;
  ASSERT_TRUE((*tok)->encode("Zürich ☃", &rare).ok());
  EXPECT_EQ(*(*tok)->decode(rare), "Zürich ☃");

  // encode appends.
  size_t before = ids.size();
  ASSERT_TRUE((*tok)->encode("more", &ids).ok());
  EXPECT_GT(ids.size(), before);

  EXPECT_EQ((*tok)->decode(std::vector<uint32_t>{400}).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ((*tok)->id_to_piece(1), "</s>");
}

// As T5 lays them out: <extra_id_0> is the highest id, <extra_id_k> = vocab - 1 - k, within the
// requested vocabulary size; in text each is one piece.
TEST(Tokenizer, ExtraIdsAreTheTopIdsAndSinglePieces) {
  auto tok = Tokenizer::load(model_a());
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ((*tok)->vocab_size(), 400u);
  EXPECT_EQ((*tok)->num_sentinels(), 4u);
  for (uint32_t i = 0; i < 4; ++i) {
    std::string sentinel = "<extra_id_" + std::to_string(i) + ">";
    EXPECT_EQ((*tok)->id_to_piece(399 - i), sentinel);
    std::vector<uint32_t> ids;
    ASSERT_TRUE((*tok)->encode("before " + sentinel + " after", &ids).ok());
    int found = 0;
    for (uint32_t id : ids) found += id == 399 - i ? 1 : 0;
    EXPECT_EQ(found, 1) << sentinel;
    auto back = (*tok)->decode(ids);
    ASSERT_TRUE(back.ok());
    EXPECT_NE(back->find(sentinel), std::string::npos) << *back;
  }
  EXPECT_NE((*tok)->id_to_piece(395), "<extra_id_4>");
  auto plain = Tokenizer::load(trained_model(450));
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ((*plain)->num_sentinels(), 0u);
}

TEST(Tokenizer, HashIsStableAndTellsModelsApart) {
  auto a1 = Tokenizer::load(model_a());
  auto a2 = Tokenizer::load(model_a());
  ASSERT_TRUE(a1.ok() && a2.ok());
  EXPECT_EQ((*a1)->hash(), (*a2)->hash());
  EXPECT_NE((*a1)->hash(), 0u);
  auto b = Tokenizer::load(trained_model(450));
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_NE((*a1)->hash(), (*b)->hash());
  EXPECT_EQ((*b)->vocab_size(), 450u);
}

TEST(Tokenizer, MissingAndGarbageModels) {
  std::string dir = temp_dir("tok");
  auto missing = Tokenizer::load(dir + "/none.model");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("none.model"), std::string::npos);

  write_file(dir + "/garbage.model", "this is certainly not a protobuf \x01\x02\xff\xfe");
  auto garbage = Tokenizer::load(dir + "/garbage.model");
  EXPECT_EQ(garbage.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(garbage.status().message().find("not a SentencePiece model"), std::string::npos)
      << garbage.status().message();

  write_file(dir + "/empty.model", "");
  EXPECT_EQ(Tokenizer::load(dir + "/empty.model").status().code(), StatusCode::kDataLoss);
}

TEST(Tokenizer, ConcurrentEncodeMatches) {
  auto tok = Tokenizer::load(model_a());
  ASSERT_TRUE(tok.ok());
  const std::string text = sample_english(30);
  std::vector<uint32_t> expected;
  ASSERT_TRUE((*tok)->encode(text, &expected).ok());
  std::vector<std::vector<uint32_t>> got(2);
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 20; ++rep) {
        std::vector<uint32_t> ids;
        if (!(*tok)->encode(text, &ids).ok() || ids != expected) return;
      }
      got[t] = expected;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(got[0], expected);
  EXPECT_EQ(got[1], expected);
}

TEST(Tokenizer, TrainingRejectsBadOptions) {
  std::string dir = temp_dir("tok");
  write_file(dir + "/t.txt", sample_english(2));
  TrainTokenizerOptions o;
  o.inputs = {dir + "/t.txt"};
  o.output = dir + "/spm.model";
  o.model_type = "wordpiece";
  EXPECT_EQ(train_tokenizer(o).code(), StatusCode::kInvalidArgument);
  o.model_type = "bpe";
  o.output = dir + "/spm.bin";
  EXPECT_EQ(train_tokenizer(o).code(), StatusCode::kInvalidArgument);
  o.output = dir + "/spm.model";
  o.inputs = {dir + "/missing.txt"};
  EXPECT_EQ(train_tokenizer(o).code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace ax::data
