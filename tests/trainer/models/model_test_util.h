// Helpers shared by the model-layer tests: tiny configs, real English text, and a tokenizer with
// train/validation shard sets built once per test binary.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "ax/trainer/config/config.h"
#include "ax/trainer/models/model.h"

namespace ax::train {

// Host copies by name (the value, so a failed lookup is a test failure, not a crash).
inline std::vector<float> param(const Model& model, const std::string& name) {
  StatusOr<std::vector<float>> v = model.parameter(name);
  EXPECT_TRUE(v.ok()) << v.status().to_string();
  return v.ok() ? v.value() : std::vector<float>();
}
inline std::vector<float> grad(const Model& model, const std::string& name) {
  StatusOr<std::vector<float>> v = model.gradient(name);
  EXPECT_TRUE(v.ok()) << v.status().to_string();
  return v.ok() ? v.value() : std::vector<float>();
}

namespace testing {

// Real English from Debian's fortunes package (scripts/setup.sh installs it), else the
// datasets tests' sample_english; about `bytes` long.
std::string english_text(size_t bytes);

struct Corpus {
  std::string tokenizer;        // 500-piece BPE trained on the text
  std::string other_tokenizer;  // another model (a different hash)
  std::string train_dir;        // <root>/shards/train
  std::string val_dir;          // <root>/shards/val (found as the sibling `val`)
  uint32_t vocab = 0;
  // T5: 400 pieces and 100 sentinels (--extra-ids 100), and the text tokenized with it.
  std::string t5_tokenizer;
  std::string t5_train_dir;  // <root>/t5/shards/train (and its sibling val)
  // Fine-tuning examples from the same lines: inputs (a prompt) = the line, targets (the
  // response) = its first three words; seq2seq sets with either tokenizer (and sibling val).
  std::string seq2seq_train_dir;     // <root>/s2s/shards/train
  std::string t5_seq2seq_train_dir;  // <root>/t5-s2s/shards/train
};
// Built on first use; removed when the test binary exits.
const Corpus& corpus();

// resolve_config() of an experiment (tiny-gpt, tiny-llama; a t5 one on the T5 tokenizer's
// shards) over corpus() with overrides.
Config corpus_config(const std::string& experiment, const std::vector<std::string>& overrides);
// The same on the corpus's seq2seq examples (fine-tuning).
Config seq2seq_config(const std::string& experiment, const std::vector<std::string>& overrides);

// rows windows of seq_len + 1 random tokens in [0, vocab).
std::vector<uint32_t> random_windows(uint64_t seed, int64_t rows, int64_t seq_len, uint32_t vocab);

}  // namespace testing
}  // namespace ax::train
