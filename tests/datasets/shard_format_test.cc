// Round trips through the shard writer and reader: every token and document comes back, across
// frame and shard boundaries, from several threads, and as plain zstd.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include "ax/datasets/shards/dataset_index.h"
#include "ax/datasets/shards/shard_reader.h"
#include "ax/datasets/shards/shard_writer.h"
#include "test_util.h"

namespace ax::data {
namespace {

namespace tu = ::ax::data::testing;
using Docs = std::vector<std::vector<uint32_t>>;

constexpr uint64_t kTokenizerHash = 0x0123456789abcdefULL;

std::vector<uint32_t> concat(const Docs& docs) {
  std::vector<uint32_t> all;
  for (const auto& d : docs) all.insert(all.end(), d.begin(), d.end());
  return all;
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

ShardSetWriterOptions set_options(uint32_t frame_tokens, uint64_t shard_tokens,
                                  ShardKind kind = ShardKind::kLm) {
  ShardSetWriterOptions o;
  o.shard.kind = kind;
  o.shard.frame_tokens = frame_tokens;
  o.shard.zstd_level = 1;
  o.shard_tokens = shard_tokens;
  o.tokenizer.hash = kTokenizerHash;
  o.tokenizer.vocab_size = 50000;
  o.tokenizer.eos_id = 1;
  o.tokenizer.pad_id = 0;
  o.tokenizer.model_file = "test.model";
  return o;
}

DatasetIndex write_set(const std::string& dir, const Docs& docs,
                       const ShardSetWriterOptions& options) {
  auto writer = ShardSetWriter::create(dir, options);
  EXPECT_TRUE(writer.ok()) << writer.status().to_string();
  for (const auto& d : docs) EXPECT_TRUE((*writer)->add_document(d).ok());
  auto index = (*writer)->finish();
  EXPECT_TRUE(index.ok()) << index.status().to_string();
  return *index;
}

std::shared_ptr<ShardSet> open_set(const std::string& dir, size_t cache_frames = 4) {
  auto set = ShardSet::open(dir, kTokenizerHash, cache_frames);
  EXPECT_TRUE(set.ok()) << set.status().to_string();
  return set.ok() ? *set : nullptr;
}

// Every token (one big read and many small windows) and every document range.
void expect_same(const ShardSet& set, const Docs& docs) {
  const std::vector<uint32_t> all = concat(docs);
  ASSERT_EQ(set.num_tokens(), all.size());
  ASSERT_EQ(set.num_docs(), docs.size());
  std::vector<uint32_t> got(all.size());
  ASSERT_TRUE(set.read(0, got).ok());
  ASSERT_EQ(got, all);

  std::mt19937_64 rng(7);
  for (int i = 0; i < 300; ++i) {
    uint64_t begin = rng() % all.size();
    size_t n = std::min<size_t>(rng() % 3000, all.size() - begin);
    std::vector<uint32_t> window(n);
    ASSERT_TRUE(set.read(begin, window).ok());
    ASSERT_TRUE(std::equal(window.begin(), window.end(), all.begin() + begin)) << begin;
  }

  uint64_t offset = 0;
  for (size_t d = 0; d < docs.size(); ++d) {
    auto [b, e] = set.doc_range(d);
    ASSERT_EQ(b, offset) << "document " << d;
    ASSERT_EQ(e, offset + docs[d].size()) << "document " << d;
    offset = e;
  }
}

struct SizeCase {
  uint32_t frame_tokens;
  uint64_t shard_tokens;
  size_t docs;
};

class ShardRoundTrip : public ::testing::TestWithParam<SizeCase> {};

TEST_P(ShardRoundTrip, EveryTokenAndDocument) {
  const SizeCase c = GetParam();
  const Docs docs = tu::random_documents(c.frame_tokens, c.docs, 50000, 1, 600);
  const std::string dir = tu::temp_dir("roundtrip");
  DatasetIndex index = write_set(dir, docs, set_options(c.frame_tokens, c.shard_tokens));
  EXPECT_EQ(index.num_tokens, concat(docs).size());
  EXPECT_EQ(index.num_docs, docs.size());
  if (c.shard_tokens < index.num_tokens) {
    EXPECT_GT(index.shards.size(), 2u);
  }
  auto set = open_set(dir);
  ASSERT_TRUE(set);
  expect_same(*set, docs);
  EXPECT_TRUE(set->verify().ok()) << set->verify().to_string();
  for (size_t i = 0; i < set->num_shards(); ++i) {
    const ShardHeader& h = set->shard(i).header();
    EXPECT_EQ(h.frame_tokens, c.frame_tokens);
    EXPECT_EQ(h.tokenizer_hash, kTokenizerHash);
    EXPECT_EQ(h.kind, static_cast<uint32_t>(ShardKind::kLm));
    // Shards roll at the first document boundary at or past shard_tokens.
    if (i + 1 < set->num_shards()) {
      EXPECT_GE(h.num_tokens, c.shard_tokens);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(FrameAndShardSizes, ShardRoundTrip,
                         ::testing::Values(SizeCase{1000, 30000, 400}, SizeCase{1, 2000, 30},
                                           SizeCase{4096, 1, 20},
                                           SizeCase{kMaxFrameTokens, 50000, 400},
                                           SizeCase{kMaxFrameTokens, uint64_t{1} << 40, 400}));

TEST(ShardFormat, ReadsCrossFrameAndShardBoundaries) {
  const Docs docs = tu::random_documents(11, 300, 1000, 1, 400);
  const std::vector<uint32_t> all = concat(docs);
  const std::string dir = tu::temp_dir("boundaries");
  write_set(dir, docs, set_options(997, 20000));
  auto set = open_set(dir, 2);
  ASSERT_TRUE(set);
  ASSERT_GT(set->num_shards(), 2u);
  std::vector<uint64_t> boundaries;
  uint64_t start = 0;
  for (size_t s = 0; s < set->num_shards(); ++s) {
    const ShardReader& shard = set->shard(s);
    for (uint64_t f = 1; f < shard.num_frames(); ++f) boundaries.push_back(start + f * 997);
    start += shard.num_tokens();
    boundaries.push_back(start);
  }
  boundaries.pop_back();  // the end of the stream
  for (uint64_t b : boundaries) {
    for (uint64_t before : {1, 5, 997, 2000}) {
      for (uint64_t after : {0, 1, 7, 1500}) {
        const uint64_t begin = b >= before ? b - before : 0;
        const uint64_t end = std::min<uint64_t>(b + after, all.size());
        std::vector<uint32_t> got(end - begin);
        ASSERT_TRUE(set->read(begin, got).ok());
        ASSERT_TRUE(std::equal(got.begin(), got.end(), all.begin() + begin)) << begin;
      }
    }
  }
}

TEST(ShardFormat, TinySets) {
  for (const Docs& docs : {Docs{{1}}, Docs{{5, 6, 7, 1}}, Docs(9, std::vector<uint32_t>{1})}) {
    const std::string dir = tu::temp_dir("tiny");
    write_set(dir, docs, set_options(3, 2));
    auto set = open_set(dir);
    ASSERT_TRUE(set);
    expect_same(*set, docs);
    EXPECT_TRUE(set->verify().ok());
  }
}

TEST(ShardFormat, EmptySet) {
  const std::string dir = tu::temp_dir("empty");
  DatasetIndex index = write_set(dir, {}, set_options(100, 1000));
  EXPECT_TRUE(index.shards.empty());
  auto set = open_set(dir);
  ASSERT_TRUE(set);
  EXPECT_EQ(set->num_tokens(), 0u);
  EXPECT_TRUE(set->read(0, {}).ok());
  uint32_t one;
  EXPECT_EQ(set->read(0, {&one, 1}).code(), StatusCode::kOutOfRange);
}

TEST(ShardFormat, OutOfRangeReads) {
  const Docs docs = tu::random_documents(3, 10, 100, 5, 50);
  const std::string dir = tu::temp_dir("range");
  write_set(dir, docs, set_options(64, 1 << 20));
  auto set = open_set(dir);
  ASSERT_TRUE(set);
  const uint64_t n = set->num_tokens();
  std::vector<uint32_t> buf(10);
  EXPECT_EQ(set->read(n - 9, buf).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(set->read(n + 1, {}).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(set->read(UINT64_MAX - 2, buf).code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(set->read(n, {}).ok());
  EXPECT_TRUE(set->read(n - 10, buf).ok());
  Status s = set->shard(0).read(n, buf);
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_NE(s.message().find("shard-00000.axs"), std::string::npos) << s.message();
}

TEST(ShardFormat, Seq2SeqShardsHoldWholePairs) {
  const Docs docs = tu::random_documents(5, 201 - 1, 500, 1, 300);
  const std::string dir = tu::temp_dir("seq2seq");
  DatasetIndex index = write_set(dir, docs, set_options(500, 3000, ShardKind::kSeq2Seq));
  EXPECT_EQ(index.kind, ShardKind::kSeq2Seq);
  EXPECT_GT(index.shards.size(), 2u);
  for (const ShardEntry& e : index.shards) EXPECT_EQ(e.num_docs % 2, 0u) << e.file;
  auto set = open_set(dir);
  ASSERT_TRUE(set);
  expect_same(*set, docs);

  auto writer = ShardSetWriter::create(tu::temp_dir("seq2seq-odd"),
                                       set_options(500, 3000, ShardKind::kSeq2Seq));
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)->add_document(docs[0]).ok());
  EXPECT_EQ((*writer)->finish().status().code(), StatusCode::kFailedPrecondition);
}

TEST(ShardFormat, ZstdCliDecodesTheRawTokenStream) {
  const Docs docs = tu::random_documents(9, 200, 32000, 1, 500);
  const std::string dir = tu::temp_dir("zstdcli");
  write_set(dir, docs, set_options(1000, 1 << 20));
  const std::string out = dir + "/raw.bin";
  const std::string cmd = "zstd -q -dc " + dir + "/shard-00000.axs > " + out;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const std::string raw = tu::read_file(out);
  const std::vector<uint32_t> all = concat(docs);
  ASSERT_EQ(raw.size(), all.size() * sizeof(uint32_t));
  EXPECT_EQ(std::memcmp(raw.data(), all.data(), raw.size()), 0);
  const std::string test = "zstd -q -t " + dir + "/shard-00000.axs";
  EXPECT_EQ(std::system(test.c_str()), 0) << test;
}

TEST(ShardFormat, ConcurrentReadsAgree) {
  const Docs docs = tu::random_documents(13, 500, 50000, 1, 400);
  const std::vector<uint32_t> all = concat(docs);
  const std::string dir = tu::temp_dir("threads");
  write_set(dir, docs, set_options(1000, 40000));
  auto set = open_set(dir, 2);  // a small cache: many evictions while the other thread reads
  ASSERT_TRUE(set);
  auto reader = [&](uint64_t seed, int* mismatches) {
    std::mt19937_64 rng(seed);
    std::vector<uint32_t> window;
    for (int i = 0; i < 2000; ++i) {
      const uint64_t begin = rng() % all.size();
      window.resize(std::min<size_t>(1 + rng() % 2500, all.size() - begin));
      if (!set->read(begin, window).ok() ||
          !std::equal(window.begin(), window.end(), all.begin() + begin)) {
        ++*mismatches;
      }
    }
  };
  int bad[2] = {0, 0};
  std::thread a(reader, 1, &bad[0]);
  std::thread b(reader, 2, &bad[1]);
  a.join();
  b.join();
  EXPECT_EQ(bad[0], 0);
  EXPECT_EQ(bad[1], 0);
}

TEST(ShardFormat, IndexJsonRoundTrip) {
  const std::string dir = tu::temp_dir("index");
  DatasetIndex in;
  in.kind = ShardKind::kSeq2Seq;
  in.tokenizer = {0xfedcba9876543210ULL, 32000, 2, -1, "llama.model", "sentencepiece"};
  in.frame_tokens = 4096;
  in.shards = {{"shard-00000.axs", 100, 4, 777, 0x00000000000000ffULL},
               {"shard-00001.axs", 50, 2, 555, 0xffffffffffffffffULL}};
  in.num_tokens = 150;
  in.num_docs = 6;
  in.inputs = {"/data/a.jsonl.zst", "/data/b.jsonl"};
  in.skipped_empty = 3;
  in.skipped_bad = 1;
  in.docs_per_set = {{"Pile-CC", 4}, {"Github", 2}};
  ASSERT_TRUE(write_dataset_index(dir, in).ok());
  EXPECT_FALSE(exists(dir + "/index.json.tmp"));
  const std::string text = tu::read_file(dir + "/index.json");
  EXPECT_NE(text.find("\"fedcba9876543210\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"00000000000000ff\""), std::string::npos) << text;
  auto out = read_dataset_index(dir);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(out->format_version, kIndexFormatVersion);
  EXPECT_EQ(out->kind, in.kind);
  EXPECT_EQ(out->tokenizer.hash, in.tokenizer.hash);
  EXPECT_EQ(out->tokenizer.vocab_size, in.tokenizer.vocab_size);
  EXPECT_EQ(out->tokenizer.eos_id, in.tokenizer.eos_id);
  EXPECT_EQ(out->tokenizer.pad_id, in.tokenizer.pad_id);
  EXPECT_EQ(out->tokenizer.model_file, in.tokenizer.model_file);
  EXPECT_EQ(out->tokenizer.kind, "sentencepiece");
  EXPECT_EQ(out->frame_tokens, in.frame_tokens);
  EXPECT_EQ(out->num_tokens, in.num_tokens);
  EXPECT_EQ(out->num_docs, in.num_docs);
  ASSERT_EQ(out->shards.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(out->shards[i].file, in.shards[i].file);
    EXPECT_EQ(out->shards[i].num_tokens, in.shards[i].num_tokens);
    EXPECT_EQ(out->shards[i].num_docs, in.shards[i].num_docs);
    EXPECT_EQ(out->shards[i].bytes, in.shards[i].bytes);
    EXPECT_EQ(out->shards[i].xxh64, in.shards[i].xxh64);
  }
  EXPECT_EQ(out->inputs, in.inputs);
  EXPECT_EQ(out->skipped_empty, 3u);
  EXPECT_EQ(out->skipped_bad, 1u);
  EXPECT_EQ(out->docs_per_set, in.docs_per_set);

  // An index written before the tokenizer's kind was recorded reads as it did, kind empty; and
  // one without kind is written without the key.
  std::string old = text;
  const size_t at = old.find("\"kind\": \"sentencepiece\"");
  ASSERT_NE(at, std::string::npos) << old;
  const size_t comma = old.rfind(',', at);
  old.erase(comma, old.find('"', at + 9) + 1 - comma);
  tu::write_file(dir + "/index.json", old);
  auto before = read_dataset_index(dir);
  ASSERT_TRUE(before.ok()) << before.status().to_string() << "\n" << old;
  EXPECT_EQ(before->tokenizer.kind, "");
  EXPECT_EQ(before->tokenizer.model_file, "llama.model");
  in.tokenizer.kind.clear();
  ASSERT_TRUE(write_dataset_index(dir, in).ok());
  EXPECT_EQ(tu::read_file(dir + "/index.json").find("sentencepiece"), std::string::npos);
}

TEST(ShardFormat, DocumentsInPiecesEqualWholeDocuments) {
  const Docs docs = tu::random_documents(23, 60, 1000, 1, 900);
  const std::string whole = tu::temp_dir("pieces"), pieces = tu::temp_dir("pieces");
  const DatasetIndex want = write_set(whole, docs, set_options(256, 3000));
  auto writer = ShardSetWriter::create(pieces, set_options(256, 3000));
  ASSERT_TRUE(writer.ok());
  std::mt19937 rng(5);
  for (const auto& d : docs) {
    std::span<const uint32_t> rest(d);
    while (rest.size() > 0) {
      // Pieces of any size, empty ones included; the shard boundary waits for the document end.
      const size_t n = std::min<size_t>(rest.size(), rng() % 300);
      ASSERT_TRUE((*writer)->add_tokens(rest.first(n), n == rest.size()).ok());
      rest = rest.subspan(n);
    }
  }
  auto got = (*writer)->finish();
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  ASSERT_EQ(got->shards.size(), want.shards.size());
  for (size_t i = 0; i < want.shards.size(); ++i) {
    EXPECT_EQ(tu::read_file(pieces + "/" + got->shards[i].file),
              tu::read_file(whole + "/" + want.shards[i].file));
  }

  auto open = ShardSetWriter::create(tu::temp_dir("pieces"), set_options(256, 3000));
  ASSERT_TRUE(open.ok());
  ASSERT_TRUE((*open)->add_tokens(docs[0], /*end_of_document=*/false).ok());
  EXPECT_FALSE((*open)->finish().ok());  // a document without its end is no shard
}

TEST(ShardFormat, SetWriterFillsIndex) {
  const Docs docs = tu::random_documents(17, 100, 1000, 1, 300);
  const std::string dir = tu::temp_dir("extras");
  auto writer = ShardSetWriter::create(dir, set_options(256, 5000));
  ASSERT_TRUE(writer.ok());
  (*writer)->index_extras().inputs = {"in.jsonl"};
  (*writer)->index_extras().skipped_empty = 9;
  (*writer)->index_extras().docs_per_set["Wikipedia (en)"] = 100;
  for (const auto& d : docs) ASSERT_TRUE((*writer)->add_document(d).ok());
  EXPECT_EQ((*writer)->add_document({}).code(), StatusCode::kInvalidArgument);
  auto index = (*writer)->finish();
  ASSERT_TRUE(index.ok());
  auto read = read_dataset_index(dir);
  ASSERT_TRUE(read.ok()) << read.status().to_string();
  EXPECT_EQ(read->inputs, std::vector<std::string>{"in.jsonl"});
  EXPECT_EQ(read->skipped_empty, 9u);
  EXPECT_EQ(read->docs_per_set.at("Wikipedia (en)"), 100u);
  EXPECT_EQ(read->tokenizer.hash, kTokenizerHash);
  EXPECT_EQ(read->tokenizer.model_file, "test.model");
  EXPECT_EQ(read->frame_tokens, 256u);
  EXPECT_EQ(read->num_tokens, concat(docs).size());
  std::vector<std::string> names = {"index.json"};
  for (size_t i = 0; i < read->shards.size(); ++i) {
    char name[32];
    std::snprintf(name, sizeof(name), "shard-%05zu.axs", i);
    EXPECT_EQ(read->shards[i].file, name);
    EXPECT_EQ(read->shards[i].bytes, tu::read_file(dir + "/" + name).size());
    names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(list_dir(dir), names);  // no temporary files left
}

TEST(ShardFormat, CreateRemovesLeftoversOfAnInterruptedRun) {
  const std::string dir = tu::temp_dir("leftovers");
  tu::write_file(dir + "/shard-00000.axs", "an orphan shard from a crashed run");
  tu::write_file(dir + "/shard-00001.axs.tmp", "half a shard");
  tu::write_file(dir + "/index.json.tmp", "{");
  tu::write_file(dir + "/README", "not ours");
  auto writer = ShardSetWriter::create(dir, set_options(100, 1000));
  ASSERT_TRUE(writer.ok()) << writer.status().to_string();
  EXPECT_EQ(list_dir(dir), std::vector<std::string>{"README"});
}

TEST(ShardFormat, CreateRefusesAFinishedSet) {
  const std::string dir = tu::temp_dir("exists");
  write_set(dir, tu::random_documents(1, 5, 100, 1, 10), set_options(100, 1000));
  auto writer = ShardSetWriter::create(dir, set_options(100, 1000));
  ASSERT_FALSE(writer.ok());
  EXPECT_EQ(writer.status().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(writer.status().message().find("index.json"), std::string::npos);
  EXPECT_TRUE(exists(dir + "/shard-00000.axs"));  // nothing was touched
}

TEST(ShardFormat, UnfinishedWritersLeaveNoFiles) {
  const Docs docs = tu::random_documents(21, 100, 1000, 1, 300);
  const std::string dir = tu::temp_dir("unfinished");
  {
    ShardWriterOptions o;
    o.frame_tokens = 100;
    auto writer = ShardWriter::create(dir + "/one.axs", o);
    ASSERT_TRUE(writer.ok());
    for (const auto& d : docs) ASSERT_TRUE((*writer)->add_document(d).ok());
    EXPECT_EQ(list_dir(dir), std::vector<std::string>{"one.axs.tmp"});
  }
  EXPECT_TRUE(list_dir(dir).empty());
  {
    auto writer = ShardSetWriter::create(dir, set_options(100, 2000));
    ASSERT_TRUE(writer.ok());
    for (const auto& d : docs) ASSERT_TRUE((*writer)->add_document(d).ok());
    EXPECT_GT(list_dir(dir).size(), 2u);  // finished shards and the current temporary file
  }
  EXPECT_TRUE(list_dir(dir).empty());
}

// A write that fails (here the file-size limit; ENOSPC takes the same path) names the file and
// leaves neither a temporary nor a final file.
TEST(ShardFormat, WriteErrorLeavesNoFinalFile) {
  const Docs docs = tu::random_documents(23, 300, 50000, 100, 400);
  const std::string dir = tu::temp_dir("enospc");
  struct rlimit old;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  struct sigaction ignore = {}, old_action;
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(sigaction(SIGXFSZ, &ignore, &old_action), 0);
  struct rlimit small = old;
  small.rlim_cur = 20000;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);

  ShardWriterOptions o;
  o.frame_tokens = 1000;
  Status status;
  {
    auto writer = ShardWriter::create(dir + "/big.axs", o);
    ASSERT_TRUE(writer.ok());
    for (const auto& d : docs) {
      status = (*writer)->add_document(d);
      if (!status.ok()) break;
    }
    if (status.ok()) status = (*writer)->finish().status();
    EXPECT_TRUE(list_dir(dir).empty());  // removed at the error, before the destructor
  }
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &old), 0);
  ASSERT_EQ(sigaction(SIGXFSZ, &old_action, nullptr), 0);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("big.axs.tmp"), std::string::npos) << status.to_string();
  EXPECT_TRUE(list_dir(dir).empty());
}

TEST(ShardFormat, WriterRejectsBadOptions) {
  const std::string dir = tu::temp_dir("options");
  ShardWriterOptions o;
  o.frame_tokens = 0;
  EXPECT_EQ(ShardWriter::create(dir + "/a.axs", o).status().code(), StatusCode::kInvalidArgument);
  o.frame_tokens = kMaxFrameTokens + 1;
  EXPECT_EQ(ShardWriter::create(dir + "/a.axs", o).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ShardSetWriter::create(dir + "/missing", set_options(10, 10)).status().code(),
            StatusCode::kNotFound);
  EXPECT_TRUE(list_dir(dir).empty());
}

}  // namespace
}  // namespace ax::data
