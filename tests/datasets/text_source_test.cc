#include "ax/datasets/text/text_source.h"

#include <gtest/gtest.h>
#include <zstd.h>

#include <cctype>
#include <string>
#include <vector>

#include "test_util.h"

namespace ax::data {
namespace {

using testing::temp_dir;
using testing::write_file;

std::string zstd_compress(const std::string& raw) {
  std::string out(ZSTD_compressBound(raw.size()), '\0');
  size_t n = ZSTD_compress(out.data(), out.size(), raw.data(), raw.size(), 3);
  EXPECT_FALSE(ZSTD_isError(n));
  out.resize(n);
  return out;
}

// All documents of a source, or the first error.
StatusOr<std::vector<Document>> read_all(const std::vector<std::string>& inputs,
                                         const TextSourceOptions& options = {},
                                         std::unique_ptr<TextSource>* keep = nullptr) {
  AX_ASSIGN_OR_RETURN(std::unique_ptr<TextSource> src, TextSource::open(inputs, options));
  std::vector<Document> docs;
  while (true) {
    Document d;
    AX_ASSIGN_OR_RETURN(bool got, src->next(&d));
    if (!got) break;
    docs.push_back(std::move(d));
  }
  if (keep != nullptr) *keep = std::move(src);
  return docs;
}

std::vector<std::string> texts(const std::vector<Document>& docs) {
  std::vector<std::string> out;
  for (const Document& d : docs) out.push_back(d.text);
  return out;
}

TEST(TextSource, TextLinesSkipsAndCountsEmpty) {
  std::string dir = temp_dir("ts");
  write_file(dir + "/a.txt", "first line\n\n   \nsecond line\r\nthird without newline");
  std::unique_ptr<TextSource> src;
  auto docs = read_all({dir + "/a.txt"}, {}, &src);
  ASSERT_TRUE(docs.ok()) << docs.status().to_string();
  EXPECT_EQ(texts(*docs),
            (std::vector<std::string>{"first line", "second line", "third without newline"}));
  EXPECT_EQ((*docs)[1].where, dir + "/a.txt:4");
  EXPECT_EQ(src->skipped_empty(), 2u);
  EXPECT_EQ(src->skipped_bad(), 0u);
  EXPECT_EQ(src->total_bytes(), src->bytes_read());
  EXPECT_GT(src->total_bytes(), 0u);
}

TEST(TextSource, LinesLongerThanOneRead) {
  std::string dir = temp_dir("ts");
  const std::string long_line(3 << 20, 'x');
  write_file(dir + "/long.txt", "short\n" + long_line + "\nend");
  auto docs = read_all({dir + "/long.txt"});
  ASSERT_TRUE(docs.ok()) << docs.status().to_string();
  EXPECT_EQ(texts(*docs), (std::vector<std::string>{"short", long_line, "end"}));
}

TEST(TextSource, Paragraphs) {
  std::string dir = temp_dir("ts");
  write_file(dir + "/p.txt", "\n\nOne a\nOne b\n\n\n  \nTwo\n\nThree a\nThree b\n");
  TextSourceOptions o;
  o.text_unit = TextUnit::kParagraph;
  auto docs = read_all({dir + "/p.txt"}, o);
  ASSERT_TRUE(docs.ok()) << docs.status().to_string();
  EXPECT_EQ(texts(*docs), (std::vector<std::string>{"One a\nOne b", "Two", "Three a\nThree b"}));
  EXPECT_EQ((*docs)[0].where, dir + "/p.txt:3");
  EXPECT_EQ((*docs)[2].where, dir + "/p.txt:10");
}

TEST(TextSource, WholeFilesAndEmptyFileCounted) {
  std::string dir = temp_dir("ts");
  write_file(dir + "/1.txt", "line one\nline two\n");
  write_file(dir + "/2.txt", "");
  write_file(dir + "/3.txt", " \n\t\n");
  write_file(dir + "/4.txt", "last");
  TextSourceOptions o;
  o.text_unit = TextUnit::kFile;
  std::unique_ptr<TextSource> src;
  auto docs = read_all({dir + "/*.txt"}, o, &src);
  ASSERT_TRUE(docs.ok()) << docs.status().to_string();
  EXPECT_EQ(texts(*docs), (std::vector<std::string>{"line one\nline two", "last"}));
  EXPECT_EQ(src->skipped_empty(), 2u);
  EXPECT_EQ(src->files().size(), 4u);
}

TEST(TextSource, JsonlFieldsDottedPathAndPileMeta) {
  std::string dir = temp_dir("ts");
  write_file(dir + "/a.jsonl",
             "{\"text\": \"hello \\u00e9t\\u00e9\", \"meta\": {\"pile_set_name\": \"Pile-CC\"}}\n"
             "\n"
             "{\"text\": \"no meta\"}\n"
             "{\"text\": \"   \"}\n");
  std::unique_ptr<TextSource> src;
  auto docs = read_all({dir + "/a.jsonl"}, {}, &src);
  ASSERT_TRUE(docs.ok()) << docs.status().to_string();
  ASSERT_EQ(docs->size(), 2u);
  EXPECT_EQ((*docs)[0].text, "hello \xC3\xA9t\xC3\xA9");
  EXPECT_EQ((*docs)[0].set_name, "Pile-CC");
  EXPECT_EQ((*docs)[1].set_name, "");
  EXPECT_EQ((*docs)[1].where, dir + "/a.jsonl:3");
  EXPECT_EQ(src->skipped_empty(), 1u);

  write_file(dir + "/b.jsonl", "{\"doc\": {\"body\": \"nested\"}}\n");
  TextSourceOptions o;
  o.json_field = "doc.body";
  auto nested = read_all({dir + "/b.jsonl"}, o);
  ASSERT_TRUE(nested.ok()) << nested.status().to_string();
  EXPECT_EQ(texts(*nested), std::vector<std::string>{"nested"});
}

TEST(TextSource, Seq2SeqReadsInputsAndTargets) {
  std::string dir = temp_dir("ts");
  write_file(dir + "/s.jsonl",
             "{\"inputs\": \"mnli hypothesis: a premise: b\", \"targets\": \"neutral\"}\n"
             "{\"q\": \"question: why\", \"a\": \"because\"}\n");
  TextSourceOptions o;
  o.seq2seq = true;
  o.skip_bad = true;
  std::unique_ptr<TextSource> src;
  auto docs = read_all({dir + "/s.jsonl"}, o, &src);
  ASSERT_TRUE(docs.ok()) << docs.status().to_string();
  ASSERT_EQ(docs->size(), 1u);
  EXPECT_EQ((*docs)[0].text, "mnli hypothesis: a premise: b");
  EXPECT_EQ((*docs)[0].targets, "neutral");
  EXPECT_EQ(src->skipped_bad(), 1u);

  o.inputs_field = "q";
  o.targets_field = "a";
  o.skip_bad = false;
  auto renamed = read_all({dir + "/s.jsonl"}, o);
  ASSERT_FALSE(renamed.ok());
  EXPECT_NE(renamed.status().message().find("s.jsonl:1: no field 'q'"), std::string::npos)
      << renamed.status().message();

  write_file(dir + "/plain.txt", "text\n");
  o.inputs_field = "inputs";
  auto plain = read_all({dir + "/plain.txt"}, o);
  EXPECT_EQ(plain.status().code(), StatusCode::kInvalidArgument);
}

TEST(TextSource, ZstdJsonlStreamsAcrossFrames) {
  std::string dir = temp_dir("ts");
  // Two concatenated frames, the second large enough to need several reads.
  std::string first = "{\"text\": \"frame one\", \"meta\": {\"pile_set_name\": \"Bible\"}}\n";
  std::string second;
  for (int i = 0; i < 20000; ++i) {
    second += "{\"text\": \"document " + std::to_string(i) +
              "\", \"meta\": {\"pile_set_name\": "
              "\"Fortunes\"}}\n";
  }
  write_file(dir + "/p.jsonl.zst", zstd_compress(first) + zstd_compress(second));
  std::unique_ptr<TextSource> src;
  auto docs = read_all({dir + "/p.jsonl.zst"}, {}, &src);
  ASSERT_TRUE(docs.ok()) << docs.status().to_string();
  ASSERT_EQ(docs->size(), 20001u);
  EXPECT_EQ((*docs)[0].set_name, "Bible");
  EXPECT_EQ((*docs)[20000].text, "document 19999");
  EXPECT_EQ((*docs)[20000].where, dir + "/p.jsonl.zst:20001");
  EXPECT_EQ(src->bytes_read(), src->total_bytes());
}

TEST(TextSource, TruncatedZstdIsDataLoss) {
  std::string dir = temp_dir("ts");
  std::string raw;
  for (int i = 0; i < 5000; ++i) raw += "{\"text\": \"line " + std::to_string(i) + "\"}\n";
  std::string z = zstd_compress(raw);
  write_file(dir + "/t.jsonl.zst", z.substr(0, z.size() / 2));
  auto docs = read_all({dir + "/t.jsonl.zst"});
  ASSERT_FALSE(docs.ok());
  EXPECT_EQ(docs.status().code(), StatusCode::kDataLoss);
  // The line the file ends in: the whole lines before it were read.
  EXPECT_NE(docs.status().message().find("t.jsonl.zst:"), std::string::npos);
  EXPECT_NE(docs.status().message().find(": truncated zstd stream"), std::string::npos)
      << docs.status().message();
  const size_t colon = docs.status().message().find("t.jsonl.zst:") + 12;
  EXPECT_TRUE(std::isdigit(static_cast<unsigned char>(docs.status().message()[colon])))
      << docs.status().message();

  write_file(dir + "/g.jsonl.zst", "this is not zstd at all\n");
  auto garbage = read_all({dir + "/g.jsonl.zst"});
  EXPECT_EQ(garbage.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(garbage.status().message().find("g.jsonl.zst:1: corrupt zstd data"), std::string::npos)
      << garbage.status().message();
}

TEST(TextSource, InvalidJsonNamesFileAndLine) {
  std::string dir = temp_dir("ts");
  write_file(dir + "/bad.jsonl", "{\"text\": \"ok\"}\n{\"text\": \"broken\n{\"text\": \"ok 2\"}\n");
  auto docs = read_all({dir + "/bad.jsonl"});
  ASSERT_FALSE(docs.ok());
  EXPECT_EQ(docs.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(docs.status().message().find(dir + "/bad.jsonl:2: invalid JSON"), std::string::npos)
      << docs.status().message();
}

TEST(TextSource, MissingOrNonStringField) {
  std::string dir = temp_dir("ts");
  write_file(dir + "/f.jsonl", "{\"body\": \"x\"}\n");
  auto missing = read_all({dir + "/f.jsonl"});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("f.jsonl:1: no field 'text'"), std::string::npos)
      << missing.status().message();

  write_file(dir + "/n.jsonl", "{\"text\": \"fine\"}\n{\"text\": 42}\n");
  auto number = read_all({dir + "/n.jsonl"});
  ASSERT_FALSE(number.ok());
  EXPECT_NE(number.status().message().find("n.jsonl:2: field 'text' is a number"),
            std::string::npos)
      << number.status().message();
}

TEST(TextSource, NonUtf8IsRejected) {
  std::string dir = temp_dir("ts");
  write_file(dir + "/l1.txt", "caf\xC3\xA9\nlatin1 caf\xE9\n");
  auto docs = read_all({dir + "/l1.txt"});
  ASSERT_FALSE(docs.ok());
  EXPECT_NE(docs.status().message().find("l1.txt:2: text is not valid UTF-8"), std::string::npos)
      << docs.status().message();
  write_file(dir + "/l1.jsonl", "{\"text\": \"caf\xE9\"}\n");
  auto json = read_all({dir + "/l1.jsonl"});
  ASSERT_FALSE(json.ok());
  EXPECT_NE(json.status().message().find("l1.jsonl:1: text is not valid UTF-8"), std::string::npos);
}

TEST(TextSource, SkipBadCountsEveryKind) {
  std::string dir = temp_dir("ts");
  write_file(dir + "/mix.jsonl",
             "{\"text\": \"good one\"}\n"
             "not json\n"
             "{\"other\": \"missing\"}\n"
             "{\"text\": [1, 2]}\n"
             "{\"text\": \"bad \xFF byte\"}\n"
             "[\"array\"]\n"
             "{\"text\": \"\"}\n"
             "{\"text\": \"good two\"}\n");
  TextSourceOptions o;
  o.skip_bad = true;
  std::unique_ptr<TextSource> src;
  auto docs = read_all({dir + "/mix.jsonl"}, o, &src);
  ASSERT_TRUE(docs.ok()) << docs.status().to_string();
  EXPECT_EQ(texts(*docs), (std::vector<std::string>{"good one", "good two"}));
  EXPECT_EQ(src->skipped_bad(), 5u);
  EXPECT_EQ(src->skipped_empty(), 1u);
}

TEST(TextSource, GlobsExpandSortedAndMissingInputsAreNotFound) {
  std::string dir = temp_dir("ts");
  write_file(dir + "/b.txt", "bee\n");
  write_file(dir + "/a.txt", "ay\n");
  write_file(dir + "/c.jsonl", "{\"text\": \"sea\"}\n");
  std::unique_ptr<TextSource> src;
  auto docs = read_all({dir + "/*.txt", dir + "/c.jsonl"}, {}, &src);
  ASSERT_TRUE(docs.ok()) << docs.status().to_string();
  EXPECT_EQ(texts(*docs), (std::vector<std::string>{"ay", "bee", "sea"}));
  EXPECT_EQ(src->files().size(), 3u);

  auto missing = TextSource::open({dir + "/nope.txt"}, {});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope.txt"), std::string::npos);

  auto nomatch = TextSource::open({dir + "/*.parquet"}, {});
  ASSERT_FALSE(nomatch.ok());
  EXPECT_EQ(nomatch.status().code(), StatusCode::kNotFound);
  EXPECT_NE(nomatch.status().message().find("*.parquet"), std::string::npos);
}

TEST(Utf8, Validation) {
  EXPECT_TRUE(is_valid_utf8(""));
  EXPECT_TRUE(is_valid_utf8("plain ascii"));
  EXPECT_TRUE(is_valid_utf8("\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"));  // é € 😀
  EXPECT_FALSE(is_valid_utf8("\xE9"));                                   // latin-1
  EXPECT_FALSE(is_valid_utf8("\xC3"));                                   // truncated
  EXPECT_FALSE(is_valid_utf8("\xC0\xAF"));                               // overlong
  EXPECT_FALSE(is_valid_utf8("\xED\xA0\x80"));                           // surrogate
  EXPECT_FALSE(is_valid_utf8("\xF4\x90\x80\x80"));                       // > U+10FFFF
  EXPECT_FALSE(is_valid_utf8("\x80"));                                   // lone continuation
}

}  // namespace
}  // namespace ax::data
