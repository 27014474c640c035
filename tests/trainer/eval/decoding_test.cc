// Decoding with the key/value cache gives the tokens, and within a tight tolerance the logits, of
// decoding without it (the whole model run again for every new token), for a GPT (learned
// positions, tied head), a Llama (RoPE, GQA, untied head) and a T5 (encoder once, cross-attention
// keys and values cached, the decoder's relative position bias), with several rows of different
// lengths decoded together, and a Llama with Llama 3.1's RoPE scaling (the cache's keys rotated at
// their slots by the scaled frequencies). Measured worst relative logit difference: 1.3e-5
// (tiny-llama, whose weights are scaled up so that its logits are large), 9e-6 (gpt), 1.5e-6
// (t5).
#include "ax/trainer/eval/decoding.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "ax/trainer/config/config.h"
#include "ax/trainer/models/cached_decoder.h"

namespace ax::train {
namespace {

constexpr int64_t kVocab = 200;

// Llama 3.1's scaling with an original context of 32 positions: of tiny-llama's 8 frequency
// pairs (head dim 16, theta 1e4; wavelengths 6.3, 20, 63, ... positions) the first keeps its
// frequency, the second blends and the rest turn 8 times slower.
void scale_rope_llama3(ModelConfig* m) {
  m->rope_scaling = RopeScalingKind::kLlama3;
  m->rope_scaling_factor = 8;
  m->rope_low_freq_factor = 1;
  m->rope_high_freq_factor = 4;
  m->rope_original_max_positions = 32;
}

std::unique_ptr<Model> tiny_model(const std::string& experiment, Backend* be,
                                  bool llama3_rope = false) {
  StatusOr<Config> c = make_experiment(experiment);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  if (!c.ok()) return nullptr;
  if (llama3_rope) scale_rope_llama3(&c->model);
  EXPECT_TRUE(validate(*c).ok()) << validate(*c).to_string();
  // Weights larger than the initial ones give peaked logits, like a trained model's: a greedy
  // choice is then never a near-tie that rounding could flip.
  c->model.init_std = 0.3;
  auto model = Model::create(c->model, kVocab, 1, 8, be, {}, {.encoder_seq_len = 8});
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  if (!model.ok()) return nullptr;
  (*model)->init(7);
  return std::move(*model);
}

std::vector<std::vector<int32_t>> random_rows(std::initializer_list<int> lengths, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> rows;
  for (int n : lengths) {
    std::vector<int32_t>& row = rows.emplace_back();
    for (int i = 0; i < n; ++i) row.push_back(static_cast<int32_t>(rng() % kVocab));
  }
  return rows;
}

// Largest |a - b| / (1 + |b|) over every logit of every new token of every row.
double worst_logit_difference(const Decoded& a, const Decoded& b) {
  double worst = 0;
  for (size_t r = 0; r < a.logits.size(); ++r) {
    for (size_t t = 0; t < std::min(a.logits[r].size(), b.logits[r].size()); ++t) {
      const std::vector<float>&x = a.logits[r][t], &y = b.logits[r][t];
      EXPECT_EQ(x.size(), y.size());
      EXPECT_GT(x.size(), static_cast<size_t>(kVocab));  // every row of the table, padding too
      for (size_t v = 0; v < std::min(x.size(), y.size()); ++v) {
        worst = std::max(worst, std::abs(double{x[v]} - y[v]) / (1 + std::abs(double{y[v]})));
      }
    }
  }
  return worst;
}

struct Family {
  const char* experiment;
  bool llama3_rope = false;
};

class CachedDecoding : public ::testing::TestWithParam<Family> {};

TEST_P(CachedDecoding, SameTokensAndLogitsAsTheWholeModel) {
  auto be = make_cpu_backend(2);
  auto model = tiny_model(GetParam().experiment, be.get(), GetParam().llama3_rope);
  ASSERT_TRUE(model);
  // Rows of different lengths: the shortest is fed in one pass, the others catch up one slot at a
  // time, and a one-token row decodes from its first slot.
  const auto rows = random_rows({5, 1, 9, 3}, 11);
  DecodeOptions o{.max_new_tokens = 12, .keep_logits = true};
  StatusOr<Decoded> cached = decode(*model, rows, o);
  ASSERT_TRUE(cached.ok()) << cached.status().to_string();
  o.use_cache = false;
  StatusOr<Decoded> whole = decode(*model, rows, o);
  ASSERT_TRUE(whole.ok()) << whole.status().to_string();
  ASSERT_EQ(cached->tokens.size(), rows.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    EXPECT_EQ(cached->tokens[r].size(), 12u) << "row " << r;
    EXPECT_EQ(cached->tokens[r], whole->tokens[r]) << "row " << r;
    EXPECT_EQ(cached->logits[r].size(), whole->logits[r].size()) << "row " << r;
  }
  EXPECT_LT(worst_logit_difference(*cached, *whole), 1e-4);
  // The greedy tokens are not one token repeated: the rows really depend on their inputs.
  EXPECT_NE(cached->tokens[0], cached->tokens[2]);
}

// Sampling draws each row's tokens from its own stream: the same with and without the cache,
// and a row's tokens do not depend on the rows decoded beside it.
TEST_P(CachedDecoding, SamplingIsTheSameWithAndWithoutTheCache) {
  auto be = make_cpu_backend(2);
  auto model = tiny_model(GetParam().experiment, be.get(), GetParam().llama3_rope);
  ASSERT_TRUE(model);
  const auto rows = random_rows({4, 7}, 12);
  DecodeOptions o{.max_new_tokens = 10, .temperature = 1.0, .top_k = 20, .seed = 5};
  StatusOr<Decoded> cached = decode(*model, rows, o);
  ASSERT_TRUE(cached.ok()) << cached.status().to_string();
  StatusOr<Decoded> first_alone = decode(*model, {rows[0]}, o);
  ASSERT_TRUE(first_alone.ok());
  o.use_cache = false;
  StatusOr<Decoded> whole = decode(*model, rows, o);
  ASSERT_TRUE(whole.ok()) << whole.status().to_string();
  EXPECT_EQ(cached->tokens, whole->tokens);
  EXPECT_EQ(first_alone->tokens[0], cached->tokens[0]);
}

INSTANTIATE_TEST_SUITE_P(Families, CachedDecoding,
                         ::testing::Values(Family{"tiny-gpt"}, Family{"tiny-llama"},
                                           Family{"tiny-llama", /*llama3_rope=*/true},
                                           Family{"tiny-t5"}),
                         [](const auto& info) {
                           std::string name = info.param.experiment;
                           std::erase(name, '-');
                           return info.param.llama3_rope ? name + "_llama3rope" : name;
                         });

// The scaled model is another model: the same weights give other logits (so the case above
// decodes with the scaling, not around it).
TEST(CachedDecoding, Llama3RopeScalingChangesTheLogits) {
  auto be = make_cpu_backend(2);
  auto plain = tiny_model("tiny-llama", be.get());
  auto scaled = tiny_model("tiny-llama", be.get(), /*llama3_rope=*/true);
  ASSERT_TRUE(plain && scaled);
  const auto rows = random_rows({5, 9}, 11);
  DecodeOptions o{.max_new_tokens = 6, .keep_logits = true};
  StatusOr<Decoded> a = decode(*plain, rows, o), b = decode(*scaled, rows, o);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_GT(worst_logit_difference(*a, *b), 1e-2);
}

// Issue 28: the softmax covers the table's padded rows (200 ids in 512 rows), which decode to
// no text; pick_below keeps the choice among the tokenizer's ids, the argmax of their logits.
TEST(CachedDecoding, PickBelowChoosesAmongTheTokenizersIds) {
  auto be = make_cpu_backend(2);
  auto model = tiny_model("tiny-gpt", be.get());
  ASSERT_TRUE(model);
  ASSERT_EQ(model->vocab(), 512);
  const auto rows = random_rows({4, 7, 3}, 17);
  StatusOr<Decoded> any = decode(*model, rows, {.max_new_tokens = 16});
  ASSERT_TRUE(any.ok());
  bool padded = false;
  for (const auto& row : any->tokens) {
    for (int32_t id : row) padded |= id >= kVocab;
  }
  EXPECT_TRUE(padded) << "random weights should pick a padded row somewhere without pick_below";
  StatusOr<Decoded> real =
      decode(*model, rows, {.max_new_tokens = 16, .keep_logits = true, .pick_below = kVocab});
  ASSERT_TRUE(real.ok());
  for (size_t r = 0; r < rows.size(); ++r) {
    for (size_t i = 0; i < real->tokens[r].size(); ++i) {
      const std::vector<float>& logits = real->logits[r][i];
      ASSERT_EQ(std::ssize(logits), kVocab);
      EXPECT_EQ(real->tokens[r][i],
                std::max_element(logits.begin(), logits.end()) - logits.begin());
    }
  }
}

// A stop token ends its row (and is not kept); the other rows go on.
TEST(CachedDecoding, StopTokenEndsOnlyItsRow) {
  auto be = make_cpu_backend(2);
  auto model = tiny_model("tiny-llama", be.get());
  ASSERT_TRUE(model);
  const auto rows = random_rows({3, 6}, 13);
  StatusOr<Decoded> free_run = decode(*model, rows, {.max_new_tokens = 8});
  ASSERT_TRUE(free_run.ok());
  const int32_t stop = free_run->tokens[0][3];
  const auto first = std::find(free_run->tokens[0].begin(), free_run->tokens[0].end(), stop);
  StatusOr<Decoded> stopped = decode(*model, rows, {.max_new_tokens = 8, .stop_token = stop});
  ASSERT_TRUE(stopped.ok());
  EXPECT_EQ(stopped->tokens[0], std::vector<int32_t>(free_run->tokens[0].begin(), first));
  const auto& other = free_run->tokens[1];
  EXPECT_EQ(stopped->tokens[1],
            std::vector<int32_t>(other.begin(), std::find(other.begin(), other.end(), stop)));
}

// reset() forgets every slot: a decoder used before gives a fresh one's logits, bit for bit (the
// stale slots are masked, their weights exactly 0).
TEST(CachedDecoding, ResetForgetsEarlierRows) {
  auto be = make_cpu_backend(2);
  auto model = tiny_model("tiny-llama", be.get());
  ASSERT_TRUE(model);
  const CacheShape shape{.batch = 1, .capacity = 10, .prefill = 9};
  auto used = CachedDecoder::create(*model, shape);
  auto fresh = CachedDecoder::create(*model, shape);
  ASSERT_TRUE(used.ok() && fresh.ok());
  const auto rows = random_rows({9, 3}, 14);
  (*used)->feed(rows[0], 9);
  (*used)->reset();
  EXPECT_EQ((*used)->next_slot(), 0);
  EXPECT_EQ((*used)->feed(std::span(rows[1]).first(2), 2),
            (*fresh)->feed(std::span(rows[1]).first(2), 2));
  EXPECT_EQ((*used)->feed(std::span(rows[1]).subspan(2), 1),
            (*fresh)->feed(std::span(rows[1]).subspan(2), 1));
}

// Learned positions end at model.max_seq_len: a longer decode is refused before any work, and
// so are empty rows.
TEST(CachedDecoding, RefusesWhatItCannotRun) {
  auto be = make_cpu_backend(1);
  auto model = tiny_model("tiny-gpt", be.get());  // max_seq_len 64
  ASSERT_TRUE(model);
  StatusOr<Decoded> too_long = decode(*model, random_rows({40}, 1), {.max_new_tokens = 30});
  EXPECT_EQ(too_long.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_long.status().message().find("max_seq_len=64"), std::string::npos)
      << too_long.status().to_string();
  EXPECT_TRUE(decode(*model, random_rows({40}, 1), {.max_new_tokens = 25}).ok());
  EXPECT_EQ(decode(*model, {{1, 2}, {}}, {}).status().code(), StatusCode::kInvalidArgument);
  // A token outside the vocabulary, with and without the cache (the CUDA embedding kernel
  // would read past the table).
  for (bool cache : {true, false}) {
    for (int32_t bad : {static_cast<int32_t>(model->vocab()), -1}) {
      StatusOr<Decoded> out = decode(*model, {{1, 2}, {3, bad}}, {.use_cache = cache});
      EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument) << bad;
      EXPECT_NE(out.status().message().find("outside the"), std::string::npos)
          << out.status().message();
    }
  }
}

}  // namespace
}  // namespace ax::train
