// Damaged shards and indexes: each damage gives an error with the right code that names the file
// (and the frame where one is at fault). Never a crash, never silent garbage.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "ax/datasets/shards/dataset_index.h"
#include "ax/datasets/shards/shard_reader.h"
#include "ax/datasets/shards/shard_writer.h"
#include "test_util.h"

namespace ax::data {
namespace {

namespace tu = ::ax::data::testing;

constexpr uint64_t kCorruptTokenizerHash = 0x00c0ffee12345678ULL;
constexpr uint32_t kFrameTokens = 1000;

uint32_t get_u32(const std::string& b, size_t at) {
  uint32_t v;
  std::memcpy(&v, b.data() + at, 4);
  return v;
}
void set_u32(std::string* b, size_t at, uint32_t v) { std::memcpy(b->data() + at, &v, 4); }
void put_u32(std::string* b, uint32_t v) { b->append(reinterpret_cast<const char*>(&v), 4); }
void put_u64(std::string* b, uint64_t v) { b->append(reinterpret_cast<const char*>(&v), 8); }

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016" PRIx64, v);
  return buf;
}

// Where things are in a shard, found from its seek table (the format as documented).
struct Layout {
  std::vector<uint64_t> frame_offset;
  std::vector<uint32_t> frame_bytes;
  uint64_t doc_table = 0;
  uint64_t seek_table = 0;
};

Layout layout_of(const std::string& b) {
  Layout l;
  const uint32_t n = get_u32(b, b.size() - 9);
  l.seek_table = b.size() - (8 + 12 * uint64_t{n} + 9);
  uint64_t offset = 64;
  for (uint32_t i = 0; i < n; ++i) {
    l.frame_offset.push_back(offset);
    l.frame_bytes.push_back(get_u32(b, l.seek_table + 8 + 12 * i));
    offset += l.frame_bytes.back();
  }
  l.doc_table = offset;
  return l;
}

// A zstd frame holding `data` in one raw (stored) block, so the test can write doc tables with
// chosen contents without a compressor.
std::string stored_zstd_frame(const void* data, uint32_t size) {
  std::string f;
  put_u32(&f, 0xFD2FB528);
  f.push_back(static_cast<char>(0xA0));  // 4-byte content size, single segment, no checksum
  put_u32(&f, size);
  const uint32_t block = 1u | (size << 3);  // last block, raw
  f.append(reinterpret_cast<const char*>(&block), 3);
  f.append(static_cast<const char*>(data), size);
  return f;
}

std::string doc_table_frame(const std::vector<uint64_t>& ends, uint32_t checksum) {
  std::string z = stored_zstd_frame(ends.data(), ends.size() * 8);
  std::string f;
  put_u32(&f, kDocTableMagic);
  put_u32(&f, 16 + z.size());
  put_u64(&f, ends.size());
  put_u32(&f, checksum);
  put_u32(&f, 0);
  return f + z;
}

void patch_byte(const std::string& path, uint64_t at, char value) {
  int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, &value, 1, static_cast<off_t>(at)), 1);
  ::close(fd);
}

void expect_error(const Status& s, StatusCode code, std::initializer_list<std::string> parts) {
  EXPECT_EQ(s.code(), code) << s.to_string();
  for (const std::string& p : parts) {
    EXPECT_NE(s.message().find(p), std::string::npos) << "'" << p << "' not in " << s.to_string();
  }
}

class ShardCorruption : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tu::temp_dir("corrupt");
    docs_ = tu::random_documents(99, 120, 50000, 1, 400);
    ShardSetWriterOptions o;
    o.shard.frame_tokens = kFrameTokens;
    o.shard.zstd_level = 1;
    o.shard_tokens = 15000;
    o.tokenizer.hash = kCorruptTokenizerHash;
    auto writer = ShardSetWriter::create(dir_, o);
    ASSERT_TRUE(writer.ok());
    for (const auto& d : docs_) ASSERT_TRUE((*writer)->add_document(d).ok());
    auto index = (*writer)->finish();
    ASSERT_TRUE(index.ok());
    ASSERT_GE(index->shards.size(), 2u);
    shard_ = dir_ + "/shard-00000.axs";
    for (const auto& d : docs_) all_.insert(all_.end(), d.begin(), d.end());
    original_ = tu::read_file(shard_);
    layout_ = layout_of(original_);
    ASSERT_GT(layout_.frame_offset.size(), 6u);
  }

  Status open_shard() const { return ShardReader::open(shard_).status(); }
  Status open_set(std::optional<uint64_t> hash = kCorruptTokenizerHash) const {
    return ShardSet::open(dir_, hash).status();
  }
  void write_shard(const std::string& bytes) const { tu::write_file(shard_, bytes); }

  // Frame i's tokens through a fresh reader.
  Status read_frame(const ShardReader& r, uint32_t i) const {
    std::vector<uint32_t> out(kFrameTokens);
    return r.read(uint64_t{i} * kFrameTokens, out);
  }

  void rewrite_index(const std::function<void(DatasetIndex*)>& edit) const {
    auto index = read_dataset_index(dir_);
    ASSERT_TRUE(index.ok());
    edit(&*index);
    ASSERT_TRUE(write_dataset_index(dir_, *index).ok());
  }

  void replace_in_index(const std::string& from, const std::string& to) const {
    std::string text = tu::read_file(dir_ + "/index.json");
    size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
    tu::write_file(dir_ + "/index.json", text);
  }

  std::string dir_, shard_, original_;
  std::vector<std::vector<uint32_t>> docs_;
  std::vector<uint32_t> all_;  // the concatenated token stream
  Layout layout_;
};

TEST_F(ShardCorruption, BadHeaderMagic) {
  std::string b = original_;
  b[0] ^= 0x01;
  write_shard(b);
  expect_error(open_shard(), StatusCode::kDataLoss, {"shard-00000.axs", "header magic"});
  expect_error(open_set(), StatusCode::kDataLoss, {"shard-00000.axs", "header magic"});
  b = original_;
  b[9] = 'x';  // inside "AXSHARD"
  write_shard(b);
  expect_error(open_shard(), StatusCode::kDataLoss, {"shard-00000.axs", "magic"});
}

TEST_F(ShardCorruption, WrongVersion) {
  std::string b = original_;
  set_u32(&b, 16, 2);                             // ShardHeader::version
  set_u32(&b, 60, checksum32(b.data() + 8, 52));  // a well-formed header of another version
  write_shard(b);
  expect_error(open_shard(), StatusCode::kFailedPrecondition,
               {"shard-00000.axs", "version 2", "version 1"});
}

TEST_F(ShardCorruption, HeaderChecksum) {
  for (size_t at : {20, 32, 40, 48, 56, 61}) {  // kind, num_tokens, ..., the checksum itself
    std::string b = original_;
    b[at] ^= 0x04;
    write_shard(b);
    expect_error(open_shard(), StatusCode::kDataLoss, {"shard-00000.axs", "header checksum"});
  }
}

TEST_F(ShardCorruption, FlippedByteInDataFrame) {
  const uint32_t frame = 3;
  const uint64_t begin = layout_.frame_offset[frame];
  int harmless = 0;
  for (uint64_t at = begin; at < begin + layout_.frame_bytes[frame]; ++at) {
    SCOPED_TRACE(at - begin);
    patch_byte(shard_, at, static_cast<char>(original_[at] ^ 0x10));
    auto r = ShardReader::open(shard_, 0);
    ASSERT_TRUE(r.ok()) << r.status().to_string();  // open does not decode data frames
    // A few bits of a zstd frame do not change what it decodes to (e.g. in an entropy table
    // description); such a flip must give back exactly the original tokens.
    std::vector<uint32_t> got(kFrameTokens);
    Status s = (*r)->read(uint64_t{frame} * kFrameTokens, got);
    if (s.ok()) {
      EXPECT_TRUE(std::equal(got.begin(), got.end(), all_.begin() + frame * kFrameTokens));
      ++harmless;
      patch_byte(shard_, at, original_[at]);
      continue;
    }
    expect_error(s, StatusCode::kDataLoss, {"shard-00000.axs", "frame 3"});
    EXPECT_TRUE(read_frame(**r, frame - 1).ok());
    if ((at - begin) % 64 == 0) {
      expect_error((*r)->verify(), StatusCode::kDataLoss, {"shard-00000.axs", "frame 3"});
    }
    patch_byte(shard_, at, original_[at]);
  }
  EXPECT_LT(harmless, static_cast<int>(layout_.frame_bytes[frame] / 50));
  patch_byte(shard_, begin + layout_.frame_bytes[frame] / 2,
             static_cast<char>(~original_[begin + layout_.frame_bytes[frame] / 2]));
  auto set = ShardSet::open(dir_, kCorruptTokenizerHash);
  ASSERT_TRUE(set.ok());
  std::vector<uint32_t> out(10);
  expect_error((*set)->read(frame * kFrameTokens + 5, out), StatusCode::kDataLoss,
               {"shard-00000.axs", "frame 3"});
  expect_error((*set)->verify(), StatusCode::kDataLoss, {"shard-00000.axs", "frame 3"});
}

TEST_F(ShardCorruption, TruncatedFile) {
  const Layout& l = layout_;
  const uint64_t size = original_.size();
  for (uint64_t cut : {uint64_t{0}, uint64_t{10}, uint64_t{63}, uint64_t{64}, uint64_t{80},
                       l.frame_offset[2] + 7, l.frame_offset[5], l.doc_table, l.doc_table + 30,
                       l.seek_table, l.seek_table + 13, size - 9, size - 1}) {
    SCOPED_TRACE(cut);
    write_shard(original_.substr(0, cut));
    expect_error(open_shard(), StatusCode::kDataLoss, {"shard-00000.axs", "truncated"});
    expect_error(open_set(), StatusCode::kDataLoss, {"shard-00000.axs", "truncated"});
  }
  write_shard(original_.substr(0, size - 1));
  expect_error(open_shard(), StatusCode::kDataLoss,
               {"expected " + std::to_string(size) + " bytes, found " + std::to_string(size - 1)});
}

TEST_F(ShardCorruption, ExtendedFile) {
  for (const std::string& tail : {std::string(1, '\0'), std::string(100, 'x'), original_}) {
    write_shard(original_ + tail);
    const std::string found = std::to_string(original_.size() + tail.size());
    expect_error(open_shard(), StatusCode::kDataLoss,
                 {"shard-00000.axs", "truncated or extended",
                  "expected " + std::to_string(original_.size()) + " bytes, found " + found});
  }
}

TEST_F(ShardCorruption, BadDocTable) {
  const uint64_t at = layout_.doc_table;
  auto splice = [&](const std::string& table) {
    return original_.substr(0, at) + table + original_.substr(layout_.seek_table);
  };
  {
    std::string b = original_;
    b[at + 8] ^= 0x01;  // num_docs
    write_shard(b);
    expect_error(open_shard(), StatusCode::kDataLoss, {"shard-00000.axs", "doc table holds"});
  }
  {
    std::string b = original_;
    b[layout_.seek_table - 3] ^= 0x40;  // inside the compressed table
    write_shard(b);
    expect_error(open_shard(), StatusCode::kDataLoss, {"shard-00000.axs", "doc table"});
  }
  write_shard(original_);
  auto r = ShardReader::open(shard_);
  ASSERT_TRUE(r.ok());
  const std::vector<uint64_t> ends((*r)->doc_ends().begin(), (*r)->doc_ends().end());
  r->reset();
  const uint32_t checksum = checksum32(ends.data(), ends.size() * 8);

  write_shard(splice(doc_table_frame(ends, checksum)));  // the same table, stored: still valid
  EXPECT_TRUE(open_shard().ok()) << open_shard().to_string();

  write_shard(splice(doc_table_frame(ends, checksum ^ 1)));
  expect_error(open_shard(), StatusCode::kDataLoss, {"shard-00000.axs", "doc table checksum"});

  std::vector<uint64_t> swapped = ends;
  std::swap(swapped[3], swapped[4]);
  write_shard(splice(doc_table_frame(swapped, checksum32(swapped.data(), swapped.size() * 8))));
  expect_error(open_shard(), StatusCode::kDataLoss, {"shard-00000.axs", "document 4 ends at"});

  std::vector<uint64_t> short_end = ends;
  short_end.back() -= 1;
  write_shard(
      splice(doc_table_frame(short_end, checksum32(short_end.data(), short_end.size() * 8))));
  expect_error(open_shard(), StatusCode::kDataLoss, {"shard-00000.axs", "documents end at"});
}

TEST_F(ShardCorruption, BadSeekTable) {
  const uint64_t size = original_.size();
  const uint64_t seek = layout_.seek_table;
  auto entry = [&](uint32_t frame, uint32_t field) { return seek + 8 + 12 * frame + 4 * field; };
  struct Case {
    std::function<void(std::string*)> damage;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {[&](std::string* b) { (*b)[size - 1] ^= 0x01; }, "bad seek table footer"},
      {[&](std::string* b) { (*b)[size - 5] = 0; }, "descriptor"},
      {[&](std::string* b) { set_u32(b, size - 9, get_u32(*b, size - 9) + 1); }, "lists"},
      {[&](std::string* b) { (*b)[seek] ^= 0x01; }, "seek table at offset"},
      {[&](std::string* b) { set_u32(b, entry(2, 1), 3996); }, "seek table: frame 2"},
      {[&](std::string* b) { set_u32(b, entry(4, 0), get_u32(*b, entry(4, 0)) + 1); }, "doc table"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.expect);
    std::string b = original_;
    c.damage(&b);
    write_shard(b);
    expect_error(open_shard(), StatusCode::kDataLoss, {"shard-00000.axs", c.expect});
  }

  // Sizes shifted between two frames keep the total, so only reading those frames can tell.
  std::string b = original_;
  set_u32(&b, entry(2, 0), get_u32(b, entry(2, 0)) + 1);
  set_u32(&b, entry(3, 0), get_u32(b, entry(3, 0)) - 1);
  set_u32(&b, entry(5, 2), get_u32(b, entry(5, 2)) ^ 0x100);  // frame 5's checksum
  write_shard(b);
  auto r = ShardReader::open(shard_);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(read_frame(**r, 1).ok());
  expect_error(read_frame(**r, 2), StatusCode::kDataLoss, {"shard-00000.axs", "frame 2"});
  expect_error(read_frame(**r, 3), StatusCode::kDataLoss, {"shard-00000.axs", "frame 3"});
  EXPECT_TRUE(read_frame(**r, 4).ok());
  expect_error(read_frame(**r, 5), StatusCode::kDataLoss,
               {"shard-00000.axs", "frame 5: checksum mismatch"});
  expect_error((*r)->verify(), StatusCode::kDataLoss, {"shard-00000.axs", "frame 2"});
}

TEST_F(ShardCorruption, NotAShardAtAll) {
  for (const std::string& junk :
       {std::string(), std::string("hello"), std::string(4096, '\0'), tu::sample_english(20)}) {
    write_shard(junk);
    expect_error(open_shard(), StatusCode::kDataLoss, {"shard-00000.axs"});
  }
  expect_error(ShardReader::open(dir_ + "/nope.axs").status(), StatusCode::kNotFound, {"nope.axs"});
}

TEST_F(ShardCorruption, IndexInvalidJson) {
  tu::write_file(dir_ + "/index.json", "{\"format\": \"ax-shards\", ");
  expect_error(open_set(), StatusCode::kDataLoss, {"index.json", "invalid JSON"});
}

TEST_F(ShardCorruption, IndexWrongFormatVersion) {
  replace_in_index("\"format_version\": 1", "\"format_version\": 7");
  expect_error(open_set(), StatusCode::kFailedPrecondition,
               {"index.json", "format_version 7", "version 1"});
}

TEST_F(ShardCorruption, IndexWrongFormatOrFields) {
  const std::string text = tu::read_file(dir_ + "/index.json");
  struct Case {
    std::string from, to, expect;
  };
  const std::vector<Case> cases = {
      {"\"ax-shards\"", "\"mds\"", "format is \"mds\""},
      {"\"kind\": \"lm\"", "\"kind\": \"mlm\"", "kind \"mlm\""},
      {"\"frame_tokens\": 1000,", "", "'frame_tokens' is missing"},
      {"\"shard-00001.axs\"", "\"../shard-00001.axs\"", "not a plain file name"},
      {"\"shard-00001.axs\"", "\"shard-00000.axs\"", "listed twice"},
      {"\"hash\": \"" + hex64(kCorruptTokenizerHash) + "\"", "\"hash\": \"C0FFEE\"",
       "tokenizer.hash"},
      {"\"num_docs\": " + std::to_string(docs_.size()), "\"num_docs\": 1", "shards hold"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.expect);
    tu::write_file(dir_ + "/index.json", text);
    replace_in_index(c.from, c.to);
    expect_error(open_set(), StatusCode::kDataLoss, {"index.json", c.expect});
  }
}

TEST_F(ShardCorruption, IndexMissing) {
  ASSERT_EQ(::unlink((dir_ + "/index.json").c_str()), 0);
  expect_error(open_set(), StatusCode::kNotFound, {"index.json"});
}

TEST_F(ShardCorruption, MissingShardFile) {
  ASSERT_EQ(::unlink((dir_ + "/shard-00001.axs").c_str()), 0);
  expect_error(open_set(), StatusCode::kNotFound, {"shard-00001.axs"});
}

TEST_F(ShardCorruption, ShardSizeDiffersFromIndex) {
  rewrite_index([](DatasetIndex* index) { index->shards[1].bytes += 1; });
  expect_error(open_set(), StatusCode::kDataLoss, {"shard-00001.axs", "index.json says"});
}

TEST_F(ShardCorruption, ShardCountsDifferFromIndex) {
  rewrite_index([](DatasetIndex* index) {
    index->shards[0].num_tokens += 1;
    index->num_tokens += 1;
  });
  expect_error(open_set(), StatusCode::kDataLoss, {"shard-00000.axs", "index.json says"});
}

TEST_F(ShardCorruption, ShardHashDiffersFromIndex) {
  rewrite_index([](DatasetIndex* index) { index->shards[1].xxh64 ^= 1; });
  auto set = ShardSet::open(dir_, kCorruptTokenizerHash);
  ASSERT_TRUE(set.ok());  // the whole-file hash is only checked by verify()
  expect_error((*set)->verify(), StatusCode::kDataLoss, {"shard-00001.axs", "XXH64"});
}

TEST_F(ShardCorruption, TokenizerHashMismatch) {
  const uint64_t other = 0x1111222233334444ULL;
  expect_error(open_set(other), StatusCode::kFailedPrecondition,
               {hex64(kCorruptTokenizerHash), hex64(other), "another tokenizer"});
  EXPECT_TRUE(open_set(std::nullopt).ok());
  // Shards whose header disagrees with the index's tokenizer.
  rewrite_index([&](DatasetIndex* index) { index->tokenizer.hash = other; });
  expect_error(open_set(std::nullopt), StatusCode::kDataLoss,
               {"shard-00000.axs", hex64(kCorruptTokenizerHash), hex64(other)});
}

}  // namespace
}  // namespace ax::data
