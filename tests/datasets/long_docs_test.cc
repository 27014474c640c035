// Inputs nobody should have but someone will: one huge line, one huge JSON field, a binary file,
// a .zst named .jsonl, documents over --max-doc-bytes. TextSource reads each with bounded memory
// and either hands the document on in parts or names the file and line that is wrong.
#include <gtest/gtest.h>
#include <zstd.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "ax/datasets/text/text_source.h"
#include "test_util.h"

namespace ax::data {
namespace {

using testing::child_memory_growth;
using testing::sample_english;
using testing::temp_dir;
using testing::write_file;

constexpr int64_t kMiB = int64_t{1} << 20;

// sample_english as one line: sentences joined by spaces, at least `bytes` long.
std::string one_line(size_t bytes) {
  std::string text = sample_english(1000);
  for (char& c : text) {
    if (c == '\n') c = ' ';
  }
  std::string out;
  while (out.size() < bytes) out += text;
  return out;
}

// Every part of every document, or the first error.
StatusOr<std::vector<DocPart>> all_parts(const std::string& path, const TextSourceOptions& o,
                                         std::unique_ptr<TextSource>* keep = nullptr) {
  AX_ASSIGN_OR_RETURN(std::unique_ptr<TextSource> src, TextSource::open({path}, o));
  std::vector<DocPart> parts;
  while (true) {
    DocPart p;
    AX_ASSIGN_OR_RETURN(bool got, src->next_part(&p));
    if (!got) break;
    parts.push_back(std::move(p));
  }
  if (keep != nullptr) *keep = std::move(src);
  return parts;
}

// Reads every part and drops it: what the tokenize pipeline's reader does.
bool drain(const std::string& path, const TextSourceOptions& o) {
  auto src = TextSource::open({path}, o);
  if (!src.ok()) return false;
  DocPart p;
  while (true) {
    StatusOr<bool> got = (*src)->next_part(&p);
    if (!got.ok()) return false;
    if (!*got) return true;
  }
}

TEST(LongDocs, HugeLineComesInPartsThroughTheSpillFile) {
  const std::string dir = temp_dir("long");
  const std::string line = one_line(6 * kMiB);
  write_file(dir + "/big.txt", "short one\n" + line + "\r\nlast\n");
  TextSourceOptions o;
  o.doc_memory_bytes = kMiB;  // the long line goes through the temporary file
  o.part_bytes = 300000;
  o.spill_dir = dir;
  auto parts = all_parts(dir + "/big.txt", o);
  ASSERT_TRUE(parts.ok()) << parts.status().to_string();
  ASSERT_GT(parts->size(), 20u);
  EXPECT_EQ(parts->front().text, "short one");
  EXPECT_TRUE(parts->front().first && parts->front().last);
  std::string joined;
  for (size_t i = 1; i + 1 < parts->size(); ++i) {
    const DocPart& p = (*parts)[i];
    EXPECT_LE(p.text.size(), o.part_bytes);
    EXPECT_EQ(p.first, i == 1);
    EXPECT_EQ(p.last, i + 2 == parts->size());
    EXPECT_EQ(p.where, dir + "/big.txt:2");
    joined += p.text;
  }
  EXPECT_EQ(joined, line);
  EXPECT_EQ(parts->back().text, "last");
  // The spill file is anonymous: nothing is left in the directory.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), {}), 1);
}

TEST(LongDocs, HugeJsonFieldIsDecodedInPieces) {
  const std::string dir = temp_dir("long");
  // Escapes and multi-byte characters all along, so they fall on every kind of boundary.
  std::string escaped, decoded;
  for (int i = 0; escaped.size() < 5 * kMiB; ++i) {
    escaped += "line " + std::to_string(i) + " caf\\u00e9 \xE6\x9D\xB1 \\ud83d\\ude00\\n\\\"q\\\" ";
    decoded += "line " + std::to_string(i) + " caf\xC3\xA9 \xE6\x9D\xB1 \xF0\x9F\x98\x80\n\"q\" ";
  }
  write_file(dir + "/big.jsonl", "{\"text\": \"" + escaped +
                                     "\", \"meta\": {\"pile_set_name\": \"Huge\"}}\n"
                                     "{\"text\": \"small\"}\n");
  TextSourceOptions o;
  o.doc_memory_bytes = kMiB;
  o.spill_dir = dir;
  auto src = TextSource::open({dir + "/big.jsonl"}, o);
  ASSERT_TRUE(src.ok());
  Document d;
  ASSERT_TRUE(*(*src)->next(&d));
  EXPECT_EQ(d.text, decoded);
  EXPECT_EQ(d.set_name, "Huge");  // the meta field comes after the text
  ASSERT_TRUE(*(*src)->next(&d));
  EXPECT_EQ(d.text, "small");
}

TEST(LongDocs, ParagraphsAcrossTheSpillFileDropTheirBlankLines) {
  const std::string dir = temp_dir("long");
  write_file(dir + "/p.txt",
             "a long first paragraph line\nand its second line\n   \t \n\n"
             "second paragraph\n      \nthird\n");
  TextSourceOptions o;
  o.text_unit = TextUnit::kParagraph;
  o.doc_memory_bytes = 16;  // every paragraph is spilled, blank lines rolled back in the file
  o.part_bytes = 5;
  o.spill_dir = dir;
  auto src = TextSource::open({dir + "/p.txt"}, o);
  ASSERT_TRUE(src.ok());
  std::vector<std::string> docs;
  Document d;
  while (*(*src)->next(&d)) docs.push_back(d.text);
  EXPECT_EQ(docs, (std::vector<std::string>{"a long first paragraph line\nand its second line",
                                            "second paragraph", "third"}));
}

TEST(LongDocs, MemoryStaysBoundedOnAHugeLineAndAHugeField) {
  const std::string dir = temp_dir("long");
  write_file(dir + "/line.txt", one_line(40 * kMiB));
  write_file(dir + "/field.jsonl", "{\"text\": \"" + one_line(40 * kMiB) + "\"}\n");
  TextSourceOptions o;
  o.spill_dir = dir;
  for (const char* name : {"/line.txt", "/field.jsonl"}) {
    const int64_t growth = child_memory_growth([&] { return drain(dir + name, o); });
    ASSERT_GE(growth, 0) << name << ": reading failed";
    // The line reader (~1.3 MiB), the 8 MiB document buffer and a part: half of one copy.
    EXPECT_LT(growth, 20 * kMiB) << name << ": " << growth / kMiB << " MiB for a 40 MiB document";
  }
}

TEST(LongDocs, BinaryFileIsOneClearErrorWithBoundedMemory) {
  const std::string dir = temp_dir("long");
  std::mt19937 rng(7);
  std::string bytes(32 * kMiB, '\0');
  for (char& c : bytes) {
    c = static_cast<char>(rng() % 256);
    if (c == '\n') c = ' ';  // one line of 32 MiB
  }
  write_file(dir + "/model.bin", bytes);
  auto docs = all_parts(dir + "/model.bin", {});
  ASSERT_FALSE(docs.ok());
  EXPECT_EQ(docs.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(docs.status().message().find("model.bin:1: text is not valid UTF-8"), std::string::npos)
      << docs.status().message();

  TextSourceOptions skip;
  skip.skip_bad = true;
  std::unique_ptr<TextSource> src;
  auto skipped = all_parts(dir + "/model.bin", skip, &src);
  ASSERT_TRUE(skipped.ok());
  EXPECT_TRUE(skipped->empty());
  EXPECT_EQ(src->skipped_bad(), 1u);
  const int64_t growth = child_memory_growth([&] { return drain(dir + "/model.bin", skip); });
  ASSERT_GE(growth, 0);
  EXPECT_LT(growth, 16 * kMiB) << growth / kMiB << " MiB for a 32 MiB binary file";
}

TEST(LongDocs, ZstdNamedJsonlIsAnErrorNamingFileAndLine) {
  const std::string dir = temp_dir("long");
  std::string raw;
  for (int i = 0; i < 2000; ++i) raw += "{\"text\": \"document " + std::to_string(i) + "\"}\n";
  std::string z(ZSTD_compressBound(raw.size()), '\0');
  z.resize(ZSTD_compress(z.data(), z.size(), raw.data(), raw.size(), 3));
  write_file(dir + "/pile.jsonl", z);
  auto docs = all_parts(dir + "/pile.jsonl", {});
  ASSERT_FALSE(docs.ok());
  EXPECT_EQ(docs.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(docs.status().message().find("pile.jsonl:1: "), std::string::npos)
      << docs.status().message();
}

TEST(LongDocs, MaxDocBytesSkipsTruncatesOrFails) {
  const std::string dir = temp_dir("long");
  // 12 bytes; 14 bytes with a 2-byte character at bytes 10-11; 5 bytes.
  write_file(dir + "/d.jsonl",
             "{\"text\": \"twelve bytes\"}\n{\"text\": \"abcdefghi\\u00e9xyz\"}\n"
             "{\"text\": \"short\"}\n");
  TextSourceOptions o;
  o.max_doc_bytes = 10;
  std::unique_ptr<TextSource> src;
  auto skipped = all_parts(dir + "/d.jsonl", o, &src);
  ASSERT_TRUE(skipped.ok()) << skipped.status().to_string();
  ASSERT_EQ(skipped->size(), 1u);
  EXPECT_EQ(skipped->front().text, "short");
  EXPECT_EQ(src->skipped_long(), 2u);
  EXPECT_EQ(src->truncated_long(), 0u);

  o.long_docs = LongDocs::kTruncate;
  auto cut = all_parts(dir + "/d.jsonl", o, &src);
  ASSERT_TRUE(cut.ok()) << cut.status().to_string();
  ASSERT_EQ(cut->size(), 3u);
  EXPECT_EQ((*cut)[0].text, "twelve byt");
  EXPECT_EQ((*cut)[1].text, "abcdefghi");  // 10 bytes would end inside the "é"
  EXPECT_EQ(src->truncated_long(), 2u);

  o.long_docs = LongDocs::kFail;
  auto failed = all_parts(dir + "/d.jsonl", o);
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("d.jsonl:1: a document of 12 bytes, more than "
                                           "--max-doc-bytes 10"),
            std::string::npos)
      << failed.status().message();
}

TEST(LongDocs, MaxDocBytesAppliesToEachFieldOfAPair) {
  const std::string dir = temp_dir("long");
  write_file(dir + "/s.jsonl",
             "{\"inputs\": \"short question\", \"targets\": \"a very long answer indeed\"}\n"
             "{\"inputs\": \"q\", \"targets\": \"a\"}\n");
  TextSourceOptions o;
  o.seq2seq = true;
  o.max_doc_bytes = 16;
  std::unique_ptr<TextSource> src;
  auto parts = all_parts(dir + "/s.jsonl", o, &src);
  ASSERT_TRUE(parts.ok()) << parts.status().to_string();
  ASSERT_EQ(parts->size(), 2u);  // the second pair's inputs and targets
  EXPECT_EQ((*parts)[0].text, "q");
  EXPECT_FALSE((*parts)[0].targets);
  EXPECT_EQ((*parts)[1].text, "a");
  EXPECT_TRUE((*parts)[1].targets);
  EXPECT_EQ(src->skipped_long(), 1u);
}

}  // namespace
}  // namespace ax::data
