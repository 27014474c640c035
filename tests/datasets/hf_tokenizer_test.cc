// HfTokenizer against the Rust `tokenizers` crate: the fixtures in hf_tokenizer/ hold small
// tokenizer.json files (GPT-2, cl100k_base, Llama 3's pipeline, Qwen3, SentencePiece BPE and
// Unigram in Llama 2's and T5's layouts, and a subword BPE under the other components) and the
// ids and texts the crate gives for them (hf_tokenizer/README.md says how they were made). Every
// id and every decoded byte must be the same.
#include "ax/datasets/text/hf_tokenizer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ax/datasets/shards/shard_reader.h"
#include "ax/datasets/text/tokenize.h"
#include "test_util.h"

namespace ax::data {
namespace {

using nlohmann::json;
using testing::temp_dir;
using testing::write_file;

const char* const kFixtures[] = {
    "gpt2",       "cl100k",        "llama3",    "qwen3",     "spm-bpe-legacy", "spm-bpe-metaspace",
    "t5-unigram", "unigram-bytes", "subword-a", "subword-b", "subword-c"};

std::string fixture_path(const std::string& name) {
  return std::string(AX_HF_FIXTURES) + "/" + name;
}

json read_json(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return json::parse(ss.str());
}

std::unique_ptr<HfTokenizer> load_fixture(const std::string& name) {
  auto tok = HfTokenizer::load(fixture_path(name + ".tokenizer.json"));
  EXPECT_TRUE(tok.ok()) << tok.status().to_string();
  return tok.ok() ? std::move(*tok) : nullptr;
}

std::vector<uint32_t> ids_of(const json& j) { return j.get<std::vector<uint32_t>>(); }

std::string shown(const std::string& s) { return json(s).dump().substr(0, 120); }

class HfFixture : public ::testing::TestWithParam<const char*> {};

TEST_P(HfFixture, EncodesAndDecodesAsTheCrate) {
  const std::string name = GetParam();
  const json expected = read_json(fixture_path(name + ".expected.json"));
  std::unique_ptr<HfTokenizer> tok = load_fixture(name);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->vocab_size(), expected["vocab_size"].get<uint32_t>());
  size_t texts = 0, decodes = 0;
  for (const json& c : expected["encode"]) {
    const std::string text = c["text"].get<std::string>();
    std::vector<uint32_t> ids;
    ASSERT_TRUE(tok->encode(text, &ids).ok()) << name << ": " << shown(text);
    EXPECT_EQ(ids, ids_of(c["ids"])) << name << ": " << shown(text);
    std::vector<uint32_t> with_special;
    ASSERT_TRUE(tok->encode_with_special_tokens(text, &with_special).ok());
    EXPECT_EQ(with_special, ids_of(c["ids_with_special_tokens"])) << name << ": " << shown(text);
    auto decoded = tok->decode(ids_of(c["ids"]));
    ASSERT_TRUE(decoded.ok()) << decoded.status().to_string();
    EXPECT_EQ(*decoded, c["decoded"].get<std::string>()) << name << ": " << shown(text);
    auto skipped = tok->decode(ids_of(c["ids_with_special_tokens"]), /*skip_special_tokens=*/true);
    ASSERT_TRUE(skipped.ok()) << skipped.status().to_string();
    EXPECT_EQ(*skipped, c["decoded_skip_special"].get<std::string>())
        << name << ": " << shown(text);
    ++texts;
  }
  for (const json& c : expected["decode"]) {
    const std::vector<uint32_t> ids = ids_of(c["ids"]);
    auto text = tok->decode(ids);
    ASSERT_TRUE(text.ok()) << text.status().to_string();
    EXPECT_EQ(*text, c["text"].get<std::string>()) << name << ": " << c["ids"].dump();
    auto skipped = tok->decode(ids, /*skip_special_tokens=*/true);
    ASSERT_TRUE(skipped.ok());
    EXPECT_EQ(*skipped, c["text_skip_special"].get<std::string>())
        << name << ": " << c["ids"].dump();
    ++decodes;
  }
  EXPECT_GE(texts, 20u);
  EXPECT_GE(decodes, 20u);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HfFixture, ::testing::ValuesIn(kFixtures),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string n = info.param;
                           for (char& c : n) {
                             if (c == '-') c = '_';
                           }
                           return n;
                         });

TEST(HfTokenizer, ByteLevelModelsRoundTripEveryText) {
  for (const char* name : {"gpt2", "cl100k", "llama3"}) {
    const json expected = read_json(fixture_path(std::string(name) + ".expected.json"));
    std::unique_ptr<HfTokenizer> tok = load_fixture(name);
    ASSERT_NE(tok, nullptr);
    for (const json& c : expected["encode"]) {
      const std::string text = c["text"].get<std::string>();
      std::vector<uint32_t> ids;
      ASSERT_TRUE(tok->encode(text, &ids).ok());
      auto back = tok->decode(ids);
      ASSERT_TRUE(back.ok());
      EXPECT_EQ(*back, text) << name;
    }
  }
}

TEST(HfTokenizer, SpecialIdsSentinelsAndSeamsThroughTheInterface) {
  struct Want {
    const char* name;
    int32_t eos, bos, pad, unk;
    uint32_t sentinels;
  };
  for (const Want& w :
       {Want{"gpt2", -2, -1, -1, -1, 0}, Want{"llama3", -2, -2, -1, -1, 0},
        Want{"t5-unigram", 1, -1, 0, 2, 10}, Want{"spm-bpe-legacy", 2, 1, -1, 0, 0}}) {
    std::unique_ptr<HfTokenizer> hf = load_fixture(w.name);
    ASSERT_NE(hf, nullptr);
    const Tokenizer& tok = *hf;
    // -2: the id of the token named below.
    auto id = [&](const char* token) -> int32_t {
      for (uint32_t i = 0; i < tok.vocab_size(); ++i) {
        if (tok.id_to_piece(i) == token) return static_cast<int32_t>(i);
      }
      return -100;
    };
    const std::string n = w.name;
    const int32_t eos = w.eos != -2 ? w.eos : id(n == "gpt2" ? "<|endoftext|>" : "<|end_of_text|>");
    const int32_t bos = w.bos != -2 ? w.bos : id("<|begin_of_text|>");
    EXPECT_EQ(tok.eos_id(), eos) << n;
    EXPECT_EQ(tok.bos_id(), bos) << n;
    EXPECT_EQ(tok.pad_id(), w.pad) << n;
    EXPECT_EQ(tok.unk_id(), w.unk) << n;
    EXPECT_EQ(tok.num_sentinels(), w.sentinels) << n;
    EXPECT_EQ(tok.path(), fixture_path(n + ".tokenizer.json"));
    EXPECT_NE(tok.hash(), 0u);
  }
  // A space ends up at the start of the next word's token in byte-level BPE: long documents cut
  // at lone spaces keep their ids (docs/tokenization.md "Long documents").
  std::unique_ptr<HfTokenizer> gpt2 = load_fixture("gpt2");
  EXPECT_TRUE(gpt2->seams_exact());
  EXPECT_EQ(gpt2->seam_style(), SeamStyle::kSpaceToNext);
  // Llama 3 puts the BOS of its template first, T5 the EOS last.
  EXPECT_EQ(load_fixture("llama3")->prefix_ids().size(), 1u);
  EXPECT_EQ(load_fixture("t5-unigram")->suffix_ids(), std::vector<uint32_t>{1});
}

TEST(HfTokenizer, ADirectoryWithTokenizerConfigNamesTheSpecialTokens) {
  const std::string dir = temp_dir("hfdir");
  std::ifstream in(fixture_path("qwen3.tokenizer.json"), std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  write_file(dir + "/tokenizer.json", ss.str());
  auto plain = HfTokenizer::load(dir);
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  const auto endoftext = static_cast<int32_t>((*plain)->vocab_size() - 6);  // the first added token
  EXPECT_EQ((*plain)->id_to_piece(endoftext), "<|endoftext|>");
  EXPECT_EQ((*plain)->eos_id(), endoftext);
  write_file(dir + "/tokenizer_config.json",
             R"({"eos_token": "<|im_end|>", "pad_token": {"content": "<|endoftext|>"}})");
  auto configured = HfTokenizer::load(dir);
  ASSERT_TRUE(configured.ok()) << configured.status().to_string();
  EXPECT_EQ((*configured)->id_to_piece((*configured)->eos_id()), "<|im_end|>");
  EXPECT_EQ((*configured)->pad_id(), endoftext);
}

TEST(HfTokenizer, ManyThreadsEncodeTheSame) {
  std::unique_ptr<HfTokenizer> tok = load_fixture("llama3");
  ASSERT_NE(tok, nullptr);
  const json expected = read_json(fixture_path("llama3.expected.json"));
  std::vector<std::thread> threads;
  std::vector<int> bad(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        for (const json& c : expected["encode"]) {
          std::vector<uint32_t> ids;
          if (!tok->encode(c["text"].get<std::string>(), &ids).ok() || ids != ids_of(c["ids"])) {
            ++bad[t];
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad, std::vector<int>(4, 0));
}

// The BPE word cache (one per thread and model) changes no id: texts encoded again and again,
// with more models in turn on one thread than the cache has slots, and models loaded and dropped
// in between (a new model at an old one's address must not see the old one's words).
TEST(HfTokenizer, TheWordCacheChangesNoId) {
  const char* const names[] = {"gpt2", "cl100k", "llama3", "qwen3", "subword-a", "spm-bpe-legacy"};
  std::vector<std::unique_ptr<HfTokenizer>> toks;
  std::vector<json> expected;
  for (const char* name : names) {
    toks.push_back(load_fixture(name));
    ASSERT_NE(toks.back(), nullptr);
    expected.push_back(read_json(fixture_path(std::string(name) + ".expected.json")));
  }
  size_t checked = 0;
  for (int round = 0; round < 3; ++round) {
    for (size_t t = 0; t < toks.size(); ++t) {
      if (round == 1) toks[t] = load_fixture(names[t]);  // a fresh model, maybe at the same address
      for (const json& c : expected[t]["encode"]) {
        std::vector<uint32_t> ids;
        ASSERT_TRUE(toks[t]->encode(c["text"].get<std::string>(), &ids).ok());
        EXPECT_EQ(ids, ids_of(c["ids"]))
            << names[t] << " round " << round << ": " << shown(c["text"].get<std::string>());
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 400u);
}

// A word of 1 MB: the merge loop is a heap (O(n log n)), not a rescan of the word after each
// merge (O(n^2): hours here), and the result is exact. A byte-level BPE whose merges turn a run of
// "a" into "aaaa" tokens, and "ab" runs into "abab" tokens.
TEST(HfTokenizer, AOneMegabyteWordIsMergedInBoundedTime) {
  const std::string dir = temp_dir("hflong");
  const json tokenizer = {
      {"version", "1.0"},
      {"added_tokens", json::array()},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "ByteLevel"},
        {"add_prefix_space", false},
        {"trim_offsets", true},
        {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}}},
      {"model",
       {{"type", "BPE"},
        {"vocab", {{"a", 0}, {"b", 1}, {"aa", 2}, {"ab", 3}, {"aaaa", 4}, {"abab", 5}}},
        {"merges", {"a a", "a b", "aa aa", "ab ab"}}}}};
  write_file(dir + "/tokenizer.json", tokenizer.dump());
  auto tok = HfTokenizer::load(dir);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  for (const auto& [unit, id] : {std::pair<std::string, uint32_t>{"a", 4}, {"ab", 5}}) {
    std::string text;
    while (text.size() < (1u << 20)) text += unit;
    const auto start = std::chrono::steady_clock::now();
    std::vector<uint32_t> ids;
    ASSERT_TRUE((*tok)->encode(text, &ids).ok());
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // About 0.3 s on one core; a quadratic merge loop would take hours.
    EXPECT_LT(seconds, 30.0) << unit;
    EXPECT_EQ(ids, std::vector<uint32_t>(text.size() / 4, id)) << unit;
    auto back = (*tok)->decode(ids);
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, text);
  }
}

// `ax-data tokenize --tokenizer X/tokenizer.json`: Tokenizer::load takes the file or its
// directory, and the shards hold the crate's ids of each document followed by EOS.
TEST(HfTokenizer, TokenizeWritesTheCratesIdsWithEos) {
  const json expected = read_json(fixture_path("gpt2.expected.json"));
  const std::string dir = temp_dir("hftokz");
  std::ifstream in(fixture_path("gpt2.tokenizer.json"), std::ios::binary);
  std::stringstream tokenizer_json;
  tokenizer_json << in.rdbuf();
  std::filesystem::create_directories(dir + "/model");
  write_file(dir + "/model/tokenizer.json", tokenizer_json.str());
  std::string jsonl;
  std::vector<const json*> docs;
  for (const json& c : expected["encode"]) {
    const std::string text = c["text"].get<std::string>();
    if (text.find_first_not_of(" \t\r\n") == std::string::npos) continue;  // skipped as empty
    jsonl += json({{"text", text}}).dump() + "\n";
    docs.push_back(&c);
  }
  write_file(dir + "/in.jsonl", jsonl);
  for (const std::string& path : {dir + "/model", dir + "/model/tokenizer.json"}) {
    auto loaded = Tokenizer::load(path);
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    TokenizeOptions o;
    o.inputs = {dir + "/in.jsonl"};
    o.tokenizer_path = path;
    o.output_dir = dir + "/out";
    o.overwrite = true;
    o.threads = 2;
    o.progress_seconds = 0;
    o.split_bytes = 512;  // the longer texts in pieces, cut at lone spaces
    auto index = tokenize(o);
    ASSERT_TRUE(index.ok()) << index.status().to_string();
    EXPECT_EQ(index->tokenizer.hash, (*loaded)->hash());
    const auto eos = static_cast<uint32_t>((*loaded)->eos_id());
    EXPECT_EQ((*loaded)->id_to_piece(eos), "<|endoftext|>");
    auto set = ShardSet::open(o.output_dir, (*loaded)->hash());
    ASSERT_TRUE(set.ok()) << set.status().to_string();
    ASSERT_EQ((*set)->num_docs(), docs.size());
    for (uint64_t d = 0; d < docs.size(); ++d) {
      auto [begin, end] = (*set)->doc_range(d);
      std::vector<uint32_t> ids(end - begin);
      ASSERT_TRUE((*set)->read(begin, ids).ok());
      std::vector<uint32_t> want = ids_of((*docs[d])["ids"]);
      want.push_back(eos);
      EXPECT_EQ(ids, want) << shown((*docs[d])["text"].get<std::string>());
    }
  }
}

// ---- Bad input: one line each, naming what is wrong ----

std::string gpt2_json() {
  std::ifstream in(fixture_path("gpt2.tokenizer.json"), std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Status load_text(const std::string& text) {
  const std::string dir = temp_dir("hfbad");
  write_file(dir + "/tokenizer.json", text);
  return HfTokenizer::load(dir + "/tokenizer.json").status();
}

Status load_modified(const std::function<void(json*)>& change) {
  json j = json::parse(gpt2_json());
  change(&j);
  return load_text(j.dump());
}

TEST(HfTokenizer, MalformedJsonNamesTheByte) {
  Status st = load_text("{\"version\": \"1.0\", \"model\": {\"type\": \"BPE\",, }}");
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("invalid JSON at byte 43 (line 1, column 44): syntax error"),
            std::string::npos)
      << st.message();
  EXPECT_EQ(st.message().find('\n'), std::string::npos);
}

TEST(HfTokenizer, UnsupportedComponentsAreNamedWithWhatIsSupported) {
  struct Case {
    const char* field;
    json value;
    const char* named;
  };
  const Case cases[] = {
      {"normalizer", {{"type", "Lowercase"}}, "normalizer \"Lowercase\" is not supported"},
      {"pre_tokenizer",
       {{"type", "Sequence"}, {"pretokenizers", json::array({{{"type", "BertPreTokenizer"}}})}},
       "pre_tokenizer.pretokenizers[0]: pre-tokenizer \"BertPreTokenizer\""},
      {"decoder", {{"type", "WordPiece"}, {"prefix", "##"}}, "decoder \"WordPiece\""},
      {"post_processor",
       {{"type", "RobertaProcessing"}, {"sep", {"</s>", 2}}, {"cls", {"<s>", 0}}},
       "post-processor \"RobertaProcessing\""},
      {"model", {{"type", "WordPiece"}, {"vocab", json::object()}}, "model \"WordPiece\""},
  };
  for (const Case& c : cases) {
    Status st = load_modified([&](json* j) { (*j)[c.field] = c.value; });
    EXPECT_EQ(st.code(), StatusCode::kUnimplemented) << c.field;
    EXPECT_NE(st.message().find(c.named), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("(supported: "), std::string::npos) << st.message();
  }
  Status dropout = load_modified([](json* j) { (*j)["model"]["dropout"] = 0.1; });
  EXPECT_EQ(dropout.code(), StatusCode::kUnimplemented);
  EXPECT_NE(dropout.message().find("dropout"), std::string::npos) << dropout.message();
}

TEST(HfTokenizer, AMergeNamingAnUnknownTokenIsRefused) {
  Status st = load_modified([](json* j) { (*j)["model"]["merges"].push_back("Ġzz qq"); });
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("names \"Ġzz\", which is not in the vocabulary"), std::string::npos)
      << st.message();
  Status bad_line = load_modified([](json* j) { (*j)["model"]["merges"][0] = "a b c"; });
  EXPECT_NE(bad_line.message().find("merges[0]"), std::string::npos) << bad_line.message();
}

TEST(HfTokenizer, MissingFilesAndInvalidTextAreErrors) {
  EXPECT_EQ(HfTokenizer::load(temp_dir("hfnone") + "/tokenizer.json").status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(HfTokenizer::load(temp_dir("hfempty")).status().code(), StatusCode::kNotFound);
  std::unique_ptr<HfTokenizer> tok = load_fixture("gpt2");
  std::vector<uint32_t> ids;
  Status st = tok->encode("ok \xC3(", &ids);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("byte 3"), std::string::npos) << st.message();
  EXPECT_EQ(tok->decode(std::vector<uint32_t>{tok->vocab_size()}).status().code(),
            StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace ax::data
