#include "model_test_util.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "ax/datasets/text/tokenize.h"
#include "ax/datasets/text/tokenizer.h"
#include "ax/trainer/train/train_loop.h"
#include "test_util.h"

namespace ax::train::testing {
namespace {

namespace fs = std::filesystem;

std::string train_tokenizer(const std::string& dir, const std::string& input, uint32_t vocab,
                            int extra_ids = 0) {
  data::TrainTokenizerOptions o;
  o.inputs = {input};
  o.output = dir + "/spm-" + std::to_string(vocab) + "-x" + std::to_string(extra_ids) + ".model";
  o.vocab_size = vocab;
  o.extra_ids = extra_ids;
  o.threads = 2;
  Status s = data::train_tokenizer(o);
  if (!s.ok()) ADD_FAILURE() << s.to_string();
  return o.output;
}

std::string tokenize(const std::string& tokenizer, const std::string& input, const std::string& out,
                     bool seq2seq = false) {
  data::TokenizeOptions o;
  o.inputs = {input};
  o.source.seq2seq = seq2seq;
  o.tokenizer_path = tokenizer;
  o.output_dir = out;
  o.threads = 2;
  o.progress_seconds = 0;
  fs::create_directories(out);
  auto index = data::tokenize(o);
  if (!index.ok()) ADD_FAILURE() << index.status().to_string();
  return out;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    out += c;
  }
  return out + "\"";
}

// {"inputs": line, "targets": its first three words} for each line with more than three words.
std::string examples_jsonl(const std::string& text) {
  std::istringstream lines(text);
  std::string line, out;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string w, first;
    int n = 0;
    while (words >> w) {
      if (n < 3) first += (n > 0 ? " " : "") + w;
      ++n;
    }
    if (n <= 3) continue;
    out += "{\"inputs\": " + json_string(line) + ", \"targets\": " + json_string(first) + "}\n";
  }
  return out;
}

}  // namespace

std::string english_text(size_t bytes) {
  const fs::path dir = "/usr/share/games/fortunes";
  std::string text;
  for (const char* name : {"fortunes", "literature", "wisdom", "people", "humorists", "law"}) {
    std::ifstream f(dir / name);
    std::string line;
    while (text.size() < bytes && std::getline(f, line)) {
      if (line == "%") continue;  // fortune separator
      text += line + "\n";
    }
  }
  if (text.size() < bytes / 2) text = data::testing::sample_english(static_cast<int>(bytes / 600));
  return text;
}

const Corpus& corpus() {
  static const Corpus c = [] {
    Corpus c;
    const std::string root = data::testing::temp_dir("model-corpus");
    const std::string text = english_text(120000);
    // Documents are lines; the last tenth is the validation split.
    const size_t cut = text.find('\n', text.size() * 9 / 10) + 1;
    data::testing::write_file(root + "/train.txt", text.substr(0, cut));
    data::testing::write_file(root + "/val.txt", text.substr(cut));
    c.tokenizer = train_tokenizer(root, root + "/train.txt", 500);
    c.other_tokenizer = train_tokenizer(root, root + "/train.txt", 400);
    c.train_dir = tokenize(c.tokenizer, root + "/train.txt", root + "/shards/train");
    c.val_dir = tokenize(c.tokenizer, root + "/val.txt", root + "/shards/val");
    c.t5_tokenizer = train_tokenizer(root, root + "/train.txt", 500, 100);
    c.t5_train_dir = tokenize(c.t5_tokenizer, root + "/train.txt", root + "/t5/shards/train");
    tokenize(c.t5_tokenizer, root + "/val.txt", root + "/t5/shards/val");
    data::testing::write_file(root + "/train.jsonl", examples_jsonl(text.substr(0, cut)));
    data::testing::write_file(root + "/val.jsonl", examples_jsonl(text.substr(cut)));
    c.seq2seq_train_dir =
        tokenize(c.tokenizer, root + "/train.jsonl", root + "/s2s/shards/train", true);
    tokenize(c.tokenizer, root + "/val.jsonl", root + "/s2s/shards/val", true);
    c.t5_seq2seq_train_dir =
        tokenize(c.t5_tokenizer, root + "/train.jsonl", root + "/t5-s2s/shards/train", true);
    tokenize(c.t5_tokenizer, root + "/val.jsonl", root + "/t5-s2s/shards/val", true);
    auto tok = data::Tokenizer::load(c.tokenizer);
    if (tok.ok()) c.vocab = (*tok)->vocab_size();
    return c;
  }();
  return c;
}

namespace {

// `experiment` resolved on a data directory and tokenizer of the corpus (t5 experiments: the ones
// with sentinels), as ax-train resolves its command line.
Config resolve_on(const std::string& experiment, const std::string& data_dir,
                  const std::string& t5_data_dir, const std::vector<std::string>& overrides) {
  RunRequest request;
  request.experiment = experiment;
  const bool t5 = experiment.find("t5") != std::string::npos;
  request.data_dir = t5 ? t5_data_dir : data_dir;
  request.tokenizer = t5 ? corpus().t5_tokenizer : corpus().tokenizer;
  request.overrides = overrides;
  StatusOr<Config> config = resolve_config(request);
  if (!config.ok()) {
    ADD_FAILURE() << config.status().to_string();
    return Config();
  }
  return *config;
}

}  // namespace

Config corpus_config(const std::string& experiment, const std::vector<std::string>& overrides) {
  return resolve_on(experiment, corpus().train_dir, corpus().t5_train_dir, overrides);
}

Config seq2seq_config(const std::string& experiment, const std::vector<std::string>& overrides) {
  return resolve_on(experiment, corpus().seq2seq_train_dir, corpus().t5_seq2seq_train_dir,
                    overrides);
}

std::vector<uint32_t> random_windows(uint64_t seed, int64_t rows, int64_t seq_len, uint32_t vocab) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<uint32_t> dist(0, vocab - 1);
  std::vector<uint32_t> out(static_cast<size_t>(rows * (seq_len + 1)));
  for (uint32_t& t : out) t = dist(rng);
  return out;
}

}  // namespace ax::train::testing
