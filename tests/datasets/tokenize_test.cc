#include "ax/datasets/text/tokenize.h"

#include <gtest/gtest.h>
#include <sentencepiece_trainer.h>

#include <atomic>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "ax/datasets/shards/shard_reader.h"
#include "ax/datasets/text/doc_splitter.h"
#include "ax/datasets/text/tokenizer.h"
#include "test_model.h"
#include "test_util.h"

namespace ax::data {
namespace {

namespace fs = std::filesystem;
using testing::read_file;
using testing::sample_english;
using testing::temp_dir;
using testing::write_file;

const std::string& model() { return testing::small_model("bpe"); }
const std::string& unigram_model() { return testing::small_model("unigram"); }

std::vector<uint32_t> read_doc(const ShardSet& set, uint64_t d) {
  auto [begin, end] = set.doc_range(d);
  std::vector<uint32_t> out(end - begin);
  Status st = set.read(begin, out);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return out;
}

std::vector<uint32_t> encode_eos(const Tokenizer& tok, const std::string& text) {
  std::vector<uint32_t> ids;
  EXPECT_TRUE(tok.encode(text, &ids).ok());
  ids.push_back(static_cast<uint32_t>(tok.eos_id()));
  return ids;
}

std::set<std::string> names_in(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

TokenizeOptions options_for(const std::vector<std::string>& inputs, const std::string& out) {
  TokenizeOptions o;
  o.inputs = inputs;
  o.tokenizer_path = model();
  o.output_dir = out;
  o.threads = 2;
  o.progress_seconds = 0;
  return o;
}

// Several thousand short documents across a text file and a Pile-style jsonl file.
struct Corpus {
  std::string dir;
  std::vector<std::string> inputs;
  std::vector<std::string> docs;  // the expected documents, in order
};

Corpus make_corpus() {
  Corpus c;
  c.dir = temp_dir("tokz-in");
  std::string text = sample_english(400);        // 3200 lines
  write_file(c.dir + "/a.txt", text + "   \n");  // one blank document
  for (const std::string& line : str_split(text, '\n')) {
    if (!line.empty()) c.docs.push_back(line);
  }
  std::string jsonl;
  for (int i = 0; i < 300; ++i) {
    std::string doc = "Fortune number " + std::to_string(i) + ": the river is deep.";
    jsonl += "{\"text\": \"" + doc + "\", \"meta\": {\"pile_set_name\": \"" +
             (i % 3 == 0 ? "Bible" : "Fortunes") + "\"}}\n";
    c.docs.push_back(doc);
  }
  write_file(c.dir + "/b.jsonl", jsonl);
  c.inputs = {c.dir + "/a.txt", c.dir + "/b.jsonl"};
  return c;
}

TEST(Tokenize, RoundTripEqualsDirectEncodingPlusEos) {
  Corpus c = make_corpus();
  std::string out = temp_dir("tokz-out") + "/set";  // created by tokenize
  TokenizeOptions o = options_for(c.inputs, out);
  o.shard_tokens = 20000;  // several shards
  auto index = tokenize(o);
  ASSERT_TRUE(index.ok()) << index.status().to_string();
  EXPECT_EQ(index->num_docs, c.docs.size());
  EXPECT_GT(index->shards.size(), 1u);
  EXPECT_EQ(index->kind, ShardKind::kLm);
  EXPECT_EQ(index->skipped_empty, 1u);
  EXPECT_EQ(index->inputs, c.inputs);
  EXPECT_EQ(index->docs_per_set.at("Bible"), 100u);
  EXPECT_EQ(index->docs_per_set.at("Fortunes"), 200u);

  auto tok = Tokenizer::load(model());
  ASSERT_TRUE(tok.ok());
  EXPECT_EQ(index->tokenizer.hash, (*tok)->hash());
  EXPECT_EQ(index->tokenizer.eos_id, 1);
  auto set = ShardSet::open(out, (*tok)->hash());
  ASSERT_TRUE(set.ok()) << set.status().to_string();
  ASSERT_EQ((*set)->num_docs(), c.docs.size());
  uint64_t tokens = 0;
  for (uint64_t d = 0; d < c.docs.size(); ++d) {
    std::vector<uint32_t> expected = encode_eos(**tok, c.docs[d]);
    ASSERT_EQ(read_doc(**set, d), expected) << "document " << d << ": " << c.docs[d];
    tokens += expected.size();
  }
  EXPECT_EQ((*set)->num_tokens(), tokens);
  EXPECT_TRUE((*set)->verify().ok());
}

TEST(Tokenize, SameShardsForAnyThreadCount) {
  Corpus c = make_corpus();
  std::string base = temp_dir("tokz-out");
  std::vector<std::string> dirs = {base + "/t1", base + "/t2"};
  for (int threads : {1, 2}) {
    TokenizeOptions o = options_for(c.inputs, dirs[threads - 1]);
    o.threads = threads;
    o.shard_tokens = 15000;
    auto index = tokenize(o);
    ASSERT_TRUE(index.ok()) << index.status().to_string();
  }
  std::set<std::string> names = names_in(dirs[0]);
  EXPECT_EQ(names, names_in(dirs[1]));
  EXPECT_GT(names.size(), 2u);
  for (const std::string& name : names) {
    EXPECT_EQ(read_file(dirs[0] + "/" + name), read_file(dirs[1] + "/" + name)) << name;
  }
}

TEST(Tokenize, Seq2SeqPairs) {
  std::string in = temp_dir("tokz-in");
  std::vector<std::pair<std::string, std::string>> pairs;
  std::string jsonl;
  for (int i = 0; i < 50; ++i) {
    pairs.emplace_back("question: what is entry " + std::to_string(i) + "? context: the river",
                       i % 2 ? "entailment" : "neutral");
    jsonl += "{\"inputs\": \"" + pairs.back().first + "\", \"targets\": \"" + pairs.back().second +
             "\"}\n";
  }
  write_file(in + "/s.jsonl", jsonl);
  std::string out = temp_dir("tokz-out");
  TokenizeOptions o = options_for({in + "/s.jsonl"}, out);
  o.source.seq2seq = true;
  auto index = tokenize(o);
  ASSERT_TRUE(index.ok()) << index.status().to_string();
  EXPECT_EQ(index->kind, ShardKind::kSeq2Seq);
  EXPECT_EQ(index->num_docs, 100u);

  auto tok = Tokenizer::load(model());
  auto set = ShardSet::open(out);
  ASSERT_TRUE(set.ok()) << set.status().to_string();
  EXPECT_EQ((*set)->index().kind, ShardKind::kSeq2Seq);
  for (size_t i = 0; i < pairs.size(); ++i) {
    EXPECT_EQ(read_doc(**set, 2 * i), encode_eos(**tok, pairs[i].first));
    EXPECT_EQ(read_doc(**set, 2 * i + 1), encode_eos(**tok, pairs[i].second));
  }
}

TEST(Tokenize, CompleteSetNeedsOverwrite) {
  Corpus c = make_corpus();
  std::string out = temp_dir("tokz-out");
  TokenizeOptions o = options_for(c.inputs, out);
  o.shard_tokens = 10000;
  auto first = tokenize(o);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  ASSERT_GT(first->shards.size(), 2u);

  auto again = tokenize(o);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(again.status().message().find("--overwrite"), std::string::npos);

  // Overwriting with bigger shards leaves no shard of the old set behind.
  o.overwrite = true;
  o.shard_tokens = uint64_t{1} << 30;
  auto replaced = tokenize(o);
  ASSERT_TRUE(replaced.ok()) << replaced.status().to_string();
  EXPECT_EQ(replaced->shards.size(), 1u);
  EXPECT_EQ(names_in(out).size(), 2u);  // one shard + index.json
  auto set = ShardSet::open(out);
  ASSERT_TRUE(set.ok()) << set.status().to_string();
  EXPECT_EQ((*set)->num_docs(), c.docs.size());
  EXPECT_TRUE((*set)->verify().ok());
}

TEST(Tokenize, RerunAfterInterruptionGivesCompleteSet) {
  Corpus c = make_corpus();
  std::string out = temp_dir("tokz-out");
  TokenizeOptions o = options_for(c.inputs, out);
  o.shard_tokens = 10000;
  auto first = tokenize(o);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  std::set<std::string> complete = names_in(out);

  // A crash before the index was written, with a shard half written and one shard of a run
  // that got further.
  fs::remove(out + "/index.json");
  write_file(out + "/" + first->shards[1].file + ".tmp", "half a shard");
  write_file(out + "/shard-00099.axs", "orphan from a larger run");
  auto rerun = tokenize(o);
  ASSERT_TRUE(rerun.ok()) << rerun.status().to_string();
  EXPECT_EQ(names_in(out), complete);
  auto set = ShardSet::open(out);
  ASSERT_TRUE(set.ok()) << set.status().to_string();
  EXPECT_TRUE((*set)->verify().ok());
  auto tok = Tokenizer::load(model());
  ASSERT_EQ((*set)->num_docs(), c.docs.size());
  for (uint64_t d : {uint64_t{0}, uint64_t{1234}, uint64_t{c.docs.size() - 1}}) {
    EXPECT_EQ(read_doc(**set, d), encode_eos(**tok, c.docs[d]));
  }
}

TEST(Tokenize, RefusesTokenizerWithoutEos) {
  std::string dir = temp_dir("tokz-noeos");
  write_file(dir + "/t.txt", sample_english(20));
  auto st = sentencepiece::SentencePieceTrainer::Train(
      "--input=" + dir + "/t.txt --model_prefix=" + dir +
      "/noeos --vocab_size=200 --model_type=bpe --eos_id=-1 --minloglevel=2");
  ASSERT_TRUE(st.ok()) << st.ToString();
  TokenizeOptions o = options_for({dir + "/t.txt"}, dir + "/out");
  o.tokenizer_path = dir + "/noeos.model";
  auto index = tokenize(o);
  ASSERT_FALSE(index.ok());
  EXPECT_EQ(index.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(index.status().message().find("EOS"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir + "/out"));
}

TEST(Tokenize, InputErrorsStopTheRun) {
  std::string dir = temp_dir("tokz-bad");
  std::string jsonl;
  for (int i = 0; i < 3000; ++i) jsonl += "{\"text\": \"document " + std::to_string(i) + "\"}\n";
  write_file(dir + "/bad.jsonl", jsonl + "{\"text\": oops}\n");
  auto index = tokenize(options_for({dir + "/bad.jsonl"}, dir + "/out"));
  ASSERT_FALSE(index.ok());
  EXPECT_EQ(index.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(index.status().message().find("bad.jsonl:3001"), std::string::npos)
      << index.status().message();
  EXPECT_FALSE(fs::exists(dir + "/out/index.json"));

  TokenizeOptions skip = options_for({dir + "/bad.jsonl"}, dir + "/out");
  skip.source.skip_bad = true;
  auto skipped = tokenize(skip);
  ASSERT_TRUE(skipped.ok()) << skipped.status().to_string();
  EXPECT_EQ(skipped->num_docs, 3000u);
  EXPECT_EQ(skipped->skipped_bad, 1u);
}

// Issue 28: an empty input, or one whose every document is skipped, is refused in one line that
// names the cause, and no dataset (index.json) is written for training to trip over later.
TEST(Tokenize, RefusesAnInputWithoutDocuments) {
  std::string dir = temp_dir("tokz-empty");
  write_file(dir + "/empty.txt", "");
  auto index = tokenize(options_for({dir + "/empty.txt"}, dir + "/out"));
  ASSERT_FALSE(index.ok());
  EXPECT_EQ(index.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(index.status().message().find("nothing to tokenize: the input (1 file(s): " + dir +
                                          "/empty.txt) is empty"),
            std::string::npos)
      << index.status().message();
  EXPECT_FALSE(fs::exists(dir + "/out"));

  write_file(dir + "/blank.jsonl", "{\"text\": \"\"}\n\n{\"text\": \"   \"}\n");
  index = tokenize(options_for({dir + "/blank.jsonl"}, dir + "/out"));
  ASSERT_FALSE(index.ok());
  EXPECT_NE(index.status().message().find("no documents in 1 input file(s) (skipped 2 empty"),
            std::string::npos)
      << index.status().message();
  EXPECT_FALSE(fs::exists(dir + "/out/index.json"));
}

// sample_english as one line of about `bytes` bytes (cut at a space).
std::string long_line(size_t bytes) {
  std::string text = sample_english(400);
  for (char& c : text) {
    if (c == '\n') c = ' ';
  }
  std::string out;
  while (out.size() < bytes) out += text;
  return out.substr(0, out.rfind(' ', bytes));
}

TEST(Tokenize, LongDocumentsInPiecesEqualTheWholeEncodingAtSpaces) {
  // Unigram models sum piece scores in float along the whole text, so over hundreds of KB the
  // whole encoding can pick between near-equal segmentations of a word by rounding alone (seen
  // once in 300 KB here): they are compared on 12 KB, where rounding stays far below any gap.
  for (const auto& [path, bytes] :
       {std::pair{model(), size_t{300000}}, std::pair{unigram_model(), size_t{12000}}}) {
    const std::string in = temp_dir("tokz-in");
    const std::string doc = long_line(bytes);
    write_file(in + "/long.txt", "a short one\n" + doc + "\n");
    write_file(in + "/long.jsonl", "{\"text\": \"" + doc + "\"}\n");
    auto tok = Tokenizer::load(path);
    ASSERT_TRUE(tok.ok());
    EXPECT_TRUE((*tok)->seams_exact()) << path;
    EXPECT_EQ((*tok)->seam_style(), SeamStyle::kDropSpace) << path;
    const std::string out = temp_dir("tokz-out");
    TokenizeOptions o = options_for({in + "/long.txt", in + "/long.jsonl"}, out);
    o.tokenizer_path = path;
    o.split_bytes = 1024;  // a seam every 512 to 1024 bytes
    auto index = tokenize(o);
    ASSERT_TRUE(index.ok()) << index.status().to_string();
    EXPECT_EQ(index->num_docs, 3u);
    EXPECT_EQ(index->split_docs, 2u);
    auto set = ShardSet::open(out);
    ASSERT_TRUE(set.ok());
    const std::vector<uint32_t> whole = encode_eos(**tok, doc);
    EXPECT_EQ(read_doc(**set, 0), encode_eos(**tok, "a short one"));
    EXPECT_EQ(read_doc(**set, 1), whole) << path;
    EXPECT_EQ(read_doc(**set, 2), whole) << path;
  }
}

TEST(Tokenize, TextWithoutSpacesIsCutBetweenCharacters) {
  const std::string in = temp_dir("tokz-in");
  std::string doc;
  while (doc.size() < 20000) doc += "東京の空は青いです。猫が寝ている。";
  write_file(in + "/ja.txt", doc + "\n");
  const std::string out = temp_dir("tokz-out");
  TokenizeOptions o = options_for({in + "/ja.txt"}, out);
  o.split_bytes = 1000;
  auto index = tokenize(o);
  ASSERT_TRUE(index.ok()) << index.status().to_string();
  EXPECT_EQ(index->split_docs, 1u);
  // Each piece is encoded as a text of its own: the document is their encodings joined.
  auto tok = Tokenizer::load(model());
  std::vector<std::string> pieces;
  DocSplitter(1000, (*tok)->seam_style()).add(doc, true, &pieces);
  ASSERT_GT(pieces.size(), 20u);
  std::vector<uint32_t> want;
  for (const std::string& p : pieces) ASSERT_TRUE((*tok)->encode(p, &want).ok());
  want.push_back(static_cast<uint32_t>((*tok)->eos_id()));
  auto set = ShardSet::open(out);
  ASSERT_TRUE(set.ok());
  EXPECT_EQ(read_doc(**set, 0), want);
}

TEST(Tokenize, MemoryStaysBoundedOnAHugeLine) {
  const std::string in = temp_dir("tokz-in");
  write_file(in + "/line.txt", long_line(size_t{4} << 20));
  const std::string out = temp_dir("tokz-out");
  uint64_t tokens = 0;
  const int64_t growth = testing::child_memory_growth([&] {
    TokenizeOptions o = options_for({in + "/line.txt"}, out);
    auto index = tokenize(o);
    return index.ok() && index->num_docs == 1;
  });
  ASSERT_GE(growth, 0) << "tokenize failed in the child";
  // Chunks in flight, one document buffer, two encoders (~45 MiB): not the ~90 bytes per byte
  // that SentencePiece needs to encode the line at once (360 MiB here).
  EXPECT_LT(growth, int64_t{80} << 20) << (growth >> 20) << " MiB for a 4 MiB line";
  auto set = ShardSet::open(out);
  ASSERT_TRUE(set.ok()) << set.status().to_string();
  tokens = (*set)->num_tokens();
  EXPECT_GT(tokens, uint64_t{1} << 19);
}

TEST(Tokenize, MaxDocBytesIsCountedInTheIndex) {
  const std::string in = temp_dir("tokz-in");
  write_file(in + "/d.txt", long_line(5000) + "\nshort\n" + long_line(3000) + "\n");
  for (LongDocs policy : {LongDocs::kSkip, LongDocs::kTruncate}) {
    const std::string out = temp_dir("tokz-out");
    TokenizeOptions o = options_for({in + "/d.txt"}, out);
    o.source.max_doc_bytes = 2000;
    o.source.long_docs = policy;
    auto index = tokenize(o);
    ASSERT_TRUE(index.ok()) << index.status().to_string();
    const bool skip = policy == LongDocs::kSkip;
    EXPECT_EQ(index->num_docs, skip ? 1u : 3u);
    EXPECT_EQ(index->skipped_long, skip ? 2u : 0u);
    EXPECT_EQ(index->truncated_long, skip ? 0u : 2u);
    auto again = read_dataset_index(out);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->skipped_long, index->skipped_long);
    EXPECT_EQ(again->truncated_long, index->truncated_long);
  }
}

TEST(Tokenize, StopFlagEndsTheRunWithoutAnIndex) {
  Corpus c = make_corpus();
  const std::string out = temp_dir("tokz-out");
  TokenizeOptions o = options_for(c.inputs, out);
  std::atomic<bool> stop{true};
  o.stop = &stop;
  auto index = tokenize(o);
  ASSERT_FALSE(index.ok());
  EXPECT_EQ(index.status().code(), StatusCode::kAborted);
  EXPECT_FALSE(fs::exists(out + "/index.json"));
}

}  // namespace
}  // namespace ax::data
