// Task converters on small files written here in the official layouts (GLUE's MNLI tsv,
// MultiNLI's jsonl, SQuAD v1.1 JSON, the OpenAI Lambada jsonl, LAMBADA's plain text), and the
// converted MNLI through `tokenize --format seq2seq`.
#include "ax/datasets/text/task_convert.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "ax/datasets/shards/dataset_index.h"
#include "ax/datasets/shards/shard_reader.h"
#include "ax/datasets/text/tokenize.h"
#include "ax/datasets/text/tokenizer.h"
#include "test_model.h"
#include "test_util.h"

namespace ax::data {
namespace {

using nlohmann::json;
using testing::read_file;
using testing::temp_dir;
using testing::write_file;

std::vector<json> read_jsonl(const std::string& path) {
  std::vector<json> records;
  std::istringstream in(read_file(path));
  std::string line;
  while (std::getline(in, line)) records.push_back(json::parse(line));
  return records;
}

StatusOr<ConvertTaskSummary> convert(TaskName task, const std::string& input,
                                     const std::string& output, bool ascii = false) {
  ConvertTaskOptions o;
  o.task = task;
  o.input = input;
  o.output = output;
  o.ascii_quotes = ascii;
  return convert_task(o);
}

// --- the T5 strings -----------------------------------------------------------------------------

TEST(T5Strings, PadPunctuationAsRe2Does) {
  EXPECT_EQ(t5_pad_punctuation("Hello, world!"), "Hello , world ! ");
  EXPECT_EQ(t5_pad_punctuation("U.S. 1,000"), "U . S . 1 , 000");
  EXPECT_EQ(t5_pad_punctuation("(a)"), " ( a ) ");
  EXPECT_EQ(t5_pad_punctuation("a\t\tb\n\nc  d"), "a b c d");
  // Non-ASCII punctuation is no [[:punct:]]; \v is no RE2 \s.
  EXPECT_EQ(t5_pad_punctuation("x\u2014\u201cy\u201d"), "x\u2014\u201cy\u201d");
  EXPECT_EQ(t5_pad_punctuation("a\vb"), "a\vb");
}

TEST(T5Strings, MnliSortedKeysNothingChanged) {
  EXPECT_EQ(mnli_inputs("It rained.", "The  ground, wet."),
            "mnli hypothesis: It rained. premise: The  ground, wet.");
}

TEST(T5Strings, SquadPaddedAndJoined) {
  EXPECT_EQ(squad_inputs("Who?", "Bo, (the cat)."), "question: Who ? context: Bo , ( the cat ) . ");
}

// --- MNLI ---------------------------------------------------------------------------------------

// GLUE's dev_matched.tsv columns; rows written for the test, one without a gold label ('-') as
// MultiNLI's own files have them, lines ended by "\r\n" as a Windows copy would be.
constexpr const char* kGlueHeader =
    "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
    "sentence1_parse\tsentence2_parse\tsentence1\tsentence2\tlabel1\tlabel2\tlabel3\tlabel4\t"
    "label5\tgold_label";

std::string glue_row(int index, const std::string& pair_id, const std::string& s1,
                     const std::string& s2, const std::string& gold) {
  return std::to_string(index) + "\t" + pair_id.substr(0, pair_id.size() - 1) + "\t" + pair_id +
         "\tgovernment\t( ( " + s1 + " ) )\t( ( " + s2 + " ) )\t(ROOT (S " + s1 + "))\t(ROOT (S " +
         s2 + "))\t" + s1 + "\t" + s2 + "\t" + gold + "\tneutral\t" + gold + "\tcontradiction\t" +
         gold + "\t" + gold + "\r\n";
}

struct Pair {
  std::string pair_id, premise, hypothesis, gold;
};
const std::vector<Pair> kPairs = {
    {"10001e", "The committee met on Tuesday, and the vote was postponed.",
     "The vote did not happen on Tuesday.", "entailment"},
    {"10002c", "He said \"maybe later\" and left.", "He stayed for dinner.", "contradiction"},
    {"10003n", "Prices rose sharply in the spring.", "Prices rose because of the weather.", "-"},
    {"10004n", "She reads the paper every morning.", "She reads it before work.", "neutral"},
};

void expect_mnli_records(const std::vector<json>& r) {
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0]["inputs"],
            "mnli hypothesis: The vote did not happen on Tuesday. premise: The committee met on "
            "Tuesday, and the vote was postponed.");
  EXPECT_EQ(r[0]["targets"], "entailment");
  EXPECT_EQ(r[0]["idx"], 0);
  EXPECT_EQ(r[0]["pair_id"], "10001e");
  EXPECT_EQ(r[1]["inputs"],
            "mnli hypothesis: He stayed for dinner. premise: He said \"maybe later\" and left.");
  EXPECT_EQ(r[1]["targets"], "contradiction");
  EXPECT_EQ(r[2]["targets"], "neutral");
  EXPECT_EQ(r[2]["idx"], 3);  // the row's number in the file, skipped rows counted
}

TEST(ConvertMnli, GlueTsv) {
  const std::string dir = temp_dir("mnli-tsv");
  std::string tsv = std::string(kGlueHeader) + "\r\n";
  for (size_t i = 0; i < kPairs.size(); ++i) {
    const Pair& p = kPairs[i];
    tsv += glue_row(static_cast<int>(i), p.pair_id, p.premise, p.hypothesis, p.gold);
  }
  write_file(dir + "/dev_matched.tsv", tsv);
  auto s = convert(TaskName::kMnli, dir + "/dev_matched.tsv", dir + "/out/mnli.jsonl");
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->input_format, "GLUE tsv");
  EXPECT_EQ(s->written, 3u);
  EXPECT_EQ(s->skipped, 1u);
  expect_mnli_records(read_jsonl(dir + "/out/mnli.jsonl"));
}

TEST(ConvertMnli, MultiNliJsonlGivesTheSameRecords) {
  const std::string dir = temp_dir("mnli-jsonl");
  std::string jsonl;
  for (const Pair& p : kPairs) {
    json line = {{"annotator_labels", {p.gold == "-" ? "neutral" : p.gold, "entailment"}},
                 {"genre", "government"},
                 {"gold_label", p.gold},
                 {"pairID", p.pair_id},
                 {"promptID", p.pair_id.substr(0, 5)},
                 {"sentence1", p.premise},
                 {"sentence1_binary_parse", "( " + p.premise + " )"},
                 {"sentence1_parse", "(ROOT (S " + p.premise + "))"},
                 {"sentence2", p.hypothesis},
                 {"sentence2_binary_parse", "( " + p.hypothesis + " )"},
                 {"sentence2_parse", "(ROOT (S " + p.hypothesis + "))"}};
    jsonl += line.dump() + "\n";
  }
  write_file(dir + "/multinli_1.0_dev_matched.jsonl", jsonl + "\n");
  auto s = convert(TaskName::kMnli, dir + "/multinli_1.0_dev_matched.jsonl", dir + "/m.jsonl");
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->input_format, "MultiNLI jsonl");
  EXPECT_EQ(s->skipped, 1u);
  expect_mnli_records(read_jsonl(dir + "/m.jsonl"));
}

TEST(ConvertMnli, ClassIdsOfOtherExports) {
  // premise, hypothesis, label 0/1/2 (TFDS and Hugging Face order), -1 without a label.
  const std::string dir = temp_dir("mnli-ids");
  write_file(dir + "/in.jsonl",
             "{\"premise\": \"A.\", \"hypothesis\": \"B.\", \"label\": 0, \"idx\": 0}\n"
             "{\"premise\": \"C.\", \"hypothesis\": \"D.\", \"label\": 1, \"idx\": 1}\n"
             "{\"premise\": \"E.\", \"hypothesis\": \"F.\", \"label\": 2, \"idx\": 2}\n"
             "{\"premise\": \"G.\", \"hypothesis\": \"H.\", \"label\": -1, \"idx\": 3}\n");
  auto s = convert(TaskName::kMnli, dir + "/in.jsonl", dir + "/out.jsonl");
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->skipped, 1u);
  const std::vector<json> r = read_jsonl(dir + "/out.jsonl");
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0]["inputs"], "mnli hypothesis: B. premise: A.");
  EXPECT_EQ(r[0]["targets"], "entailment");
  EXPECT_EQ(r[1]["targets"], "neutral");
  EXPECT_EQ(r[2]["targets"], "contradiction");
  EXPECT_FALSE(r[0].contains("pair_id"));
}

TEST(ConvertMnli, ErrorsNameTheLine) {
  const std::string dir = temp_dir("mnli-bad");
  write_file(dir + "/bad_label.tsv", std::string(kGlueHeader) + "\n" +
                                         glue_row(0, "1e", "A.", "B.", "entailment") +
                                         glue_row(1, "2e", "C.", "D.", "yes"));
  auto s = convert(TaskName::kMnli, dir + "/bad_label.tsv", dir + "/o.jsonl");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("bad_label.tsv:3: gold label 'yes'"), std::string::npos)
      << s.status().message();

  // GLUE's test files have no labels.
  write_file(dir + "/test_matched.tsv",
             "index\tpromptID\tpairID\tgenre\tsentence1\tsentence2\n0\t1\t1n\tfiction\tA.\tB.\n");
  s = convert(TaskName::kMnli, dir + "/test_matched.tsv", dir + "/o.jsonl");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("test file"), std::string::npos) << s.status().message();

  write_file(dir + "/short.tsv", std::string(kGlueHeader) + "\nA\tB\n");
  s = convert(TaskName::kMnli, dir + "/short.tsv", dir + "/o.jsonl");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("short.tsv:2: 2 columns, the header has 16"),
            std::string::npos)
      << s.status().message();

  write_file(dir + "/broken.jsonl", "{\"sentence1\": \"A.\", \"sentence2\": \"B.\", \"gold_lab\n");
  s = convert(TaskName::kMnli, dir + "/broken.jsonl", dir + "/o.jsonl");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("broken.jsonl:1: not valid JSON"), std::string::npos)
      << s.status().message();

  write_file(dir + "/only_dash.jsonl",
             "{\"sentence1\": \"A.\", \"sentence2\": \"B.\", \"gold_label\": \"-\"}\n");
  s = convert(TaskName::kMnli, dir + "/only_dash.jsonl", dir + "/o.jsonl");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("no examples (1 without"), std::string::npos)
      << s.status().message();

  s = convert(TaskName::kMnli, dir + "/missing.tsv", dir + "/o.jsonl");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("missing.tsv"), std::string::npos);
}

// The converted file is what tokenize --format seq2seq reads: (inputs, targets) pairs.
TEST(ConvertMnli, TokenizesAsSeq2Seq) {
  const std::string dir = temp_dir("mnli-tok");
  std::string jsonl;
  for (const Pair& p : kPairs) {
    jsonl +=
        json{{"sentence1", p.premise}, {"sentence2", p.hypothesis}, {"gold_label", p.gold}}.dump() +
        "\n";
  }
  write_file(dir + "/dev.jsonl", jsonl);
  auto s = convert(TaskName::kMnli, dir + "/dev.jsonl", dir + "/mnli.jsonl");
  ASSERT_TRUE(s.ok()) << s.status().to_string();

  TokenizeOptions o;
  o.inputs = {dir + "/mnli.jsonl"};
  o.tokenizer_path = testing::small_model("bpe");
  o.output_dir = dir + "/shards";
  o.threads = 1;
  o.progress_seconds = 0;
  o.source.seq2seq = true;
  auto index = tokenize(o);
  ASSERT_TRUE(index.ok()) << index.status().to_string();
  EXPECT_EQ(index->kind, ShardKind::kSeq2Seq);
  EXPECT_EQ(index->num_docs, 6u);  // three pairs

  auto tok = Tokenizer::load(o.tokenizer_path);
  ASSERT_TRUE(tok.ok());
  auto set = ShardSet::open(o.output_dir);
  ASSERT_TRUE(set.ok()) << set.status().to_string();
  auto [begin, end] = (*set)->doc_range(1);  // the first pair's targets
  std::vector<uint32_t> ids(end - begin);
  ASSERT_TRUE((*set)->read(begin, ids).ok());
  ASSERT_EQ(ids.back(), static_cast<uint32_t>((*tok)->eos_id()));
  ids.pop_back();
  auto text = (*tok)->decode(ids);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "entailment");
}

// --- SQuAD --------------------------------------------------------------------------------------

// SQuAD v1.1's layout (dev-v1.1.json), with a second article in v2.0's style whose question has
// no answer.
constexpr const char* kSquad = R"({"data": [
 {"title": "Riverside_Stadium", "paragraphs": [
  {"context": "The stadium opened in 1998 and holds 41,000 people. Its first match, a cup final, ended 2\u20131.",
   "qas": [
    {"answers": [{"answer_start": 22, "text": "1998"}, {"answer_start": 22, "text": "1998"},
                 {"answer_start": 19, "text": "in 1998"}],
     "question": "When did the stadium open?", "id": "5733be284776f41900661182"},
    {"answers": [{"answer_start": 37, "text": "41,000"}],
     "question": "How many people does it hold?", "id": "5733be284776f41900661183"}]}]},
 {"title": "Empty", "paragraphs": [
  {"context": "Nothing here.",
   "qas": [{"plausible_answers": [], "answers": [], "is_impossible": true,
            "question": "What is here?", "id": "5733be284776f41900661184"}]}]}],
 "version": "1.1"})";

TEST(ConvertSquad, T5StringsAndEveryAnswer) {
  const std::string dir = temp_dir("squad");
  write_file(dir + "/dev-v1.1.json", kSquad);
  auto s = convert(TaskName::kSquad, dir + "/dev-v1.1.json", dir + "/squad.jsonl");
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->input_format, "SQuAD JSON");
  EXPECT_EQ(s->written, 2u);
  EXPECT_EQ(s->skipped, 1u);
  const std::vector<json> r = read_jsonl(dir + "/squad.jsonl");
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0]["inputs"],
            "question: When did the stadium open ? context: The stadium opened in 1998 and holds "
            "41 , 000 people . Its first match , a cup final , ended 2\u20131 . ");
  EXPECT_EQ(r[0]["targets"], "1998");
  EXPECT_EQ(r[0]["id"], "5733be284776f41900661182");
  EXPECT_EQ(r[0]["answers"], json({"1998", "1998", "in 1998"}));
  EXPECT_EQ(r[1]["inputs"],
            "question: How many people does it hold ? context: The stadium opened in 1998 and "
            "holds 41 , 000 people . Its first match , a cup final , ended 2\u20131 . ");
  EXPECT_EQ(r[1]["targets"], "41 , 000");
  EXPECT_EQ(r[1]["answers"], json({"41 , 000"}));
  EXPECT_EQ(r[1]["raw_answers"], json({"41,000"}));
}

TEST(ConvertSquad, ErrorsNameWhere) {
  const std::string dir = temp_dir("squad-bad");
  write_file(dir + "/a.json",
             R"({"data": [{"title": "T", "paragraphs": [{"context": "C.", "qas": [)"
             R"({"question": "Q?", "id": "x1", "answers": [{"answer_start": 0}]}]}]}]})");
  auto s = convert(TaskName::kSquad, dir + "/a.json", dir + "/o.jsonl");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("data[0].paragraphs[0] question x1: no 'text'"),
            std::string::npos)
      << s.status().message();
  write_file(dir + "/b.json", R"({"version": "1.1"})");
  s = convert(TaskName::kSquad, dir + "/b.json", dir + "/o.jsonl");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("b.json: no 'data'"), std::string::npos)
      << s.status().message();
  write_file(dir + "/c.json", "{\"data\": [");
  s = convert(TaskName::kSquad, dir + "/c.json", dir + "/o.jsonl");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("not valid JSON"), std::string::npos);
}

// A SQuAD file with one question whose one answer has `answer` (its JSON members) over `context`.
std::string squad_with(const std::string& context, const std::string& answer) {
  return R"({"data": [{"title": "T", "paragraphs": [{"context": )" + json(context).dump() +
         R"(, "qas": [{"question": "Q?", "id": "q7", "answers": [)" + answer + "]}]}]}]}";
}

// Issue 28: answer_start (a character offset, as Python's str counts) must be where the answer
// is: off by 5, past the end, missing or not an integer is refused naming the question, the
// answer and what the context holds there. A context with a multi-byte character before the
// answer counts characters, not bytes.
TEST(ConvertSquad, AnswerStartMustMatchItsContext) {
  const std::string dir = temp_dir("squad-start");
  const std::string context = "Ended 2\u20131 in May, after 1998.";
  auto run = [&](const std::string& answer) {
    write_file(dir + "/s.json", squad_with(context, answer));
    return convert(TaskName::kSquad, dir + "/s.json", dir + "/o.jsonl");
  };
  auto ok = run(R"({"answer_start": 13, "text": "May"})");  // 15 in bytes
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok->written, 1u);

  auto off = run(R"({"answer_start": 18, "text": "May"})");
  ASSERT_FALSE(off.ok());
  EXPECT_NE(off.status().message().find(
                "data[0].paragraphs[0] question q7: answer 0 'answer_start' = 18 does not match "
                "its text \"May\": at that character the context has \"after 1998.\""),
            std::string::npos)
      << off.status().message();
  EXPECT_NE(off.status().message().find("first occurs at character 13"), std::string::npos)
      << off.status().message();

  auto past = run(R"({"answer_start": 400, "text": "May"})");
  ASSERT_FALSE(past.ok());
  EXPECT_NE(past.status().message().find("= 400 does not match its text \"May\": at that "
                                         "character past the context's end"),
            std::string::npos)
      << past.status().message();

  auto missing = run(R"({"text": "May"})");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("question q7: answer 0 has no 'answer_start'"),
            std::string::npos)
      << missing.status().message();

  auto text = run(R"({"answer_start": "13", "text": "May"})");
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.status().message().find("'answer_start' = \"13\" is not a character offset"),
            std::string::npos)
      << text.status().message();

  auto absent = run(R"({"answer_start": 0, "text": "June"})");
  ASSERT_FALSE(absent.ok());
  EXPECT_NE(absent.status().message().find("the text is nowhere in the context"), std::string::npos)
      << absent.status().message();
  EXPECT_FALSE(std::filesystem::exists(dir + "/o.jsonl.tmp"));
}

// Invalid JSON is refused with its line, column and byte offset; an empty file by name.
TEST(ConvertSquad, InvalidJsonNamesLineAndByteOffset) {
  const std::string dir = temp_dir("squad-json");
  write_file(dir + "/a.json", "{\"data\": [\n  {\"title\": \"T\",, \"paragraphs\": []}]}\n");
  auto s = convert(TaskName::kSquad, dir + "/a.json", dir + "/o.jsonl");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("a.json: not valid JSON at line 2, column 17 (byte offset "
                                      "27): syntax error"),
            std::string::npos)
      << s.status().message();
  write_file(dir + "/empty.json", " \n");
  s = convert(TaskName::kSquad, dir + "/empty.json", dir + "/o.jsonl");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("empty.json: is empty"), std::string::npos)
      << s.status().message();
}

// Issue 28: an empty or binary file given as MNLI (or Lambada) is named as such, and no raw byte
// of it reaches the message.
TEST(ConvertMnli, EmptyAndBinaryFilesAreRefusedWithoutEchoingThem) {
  const std::string dir = temp_dir("mnli-binary");
  write_file(dir + "/empty.tsv", "");
  auto s = convert(TaskName::kMnli, dir + "/empty.tsv", dir + "/o.jsonl");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("empty.tsv: is empty: no MNLI tsv or jsonl examples"),
            std::string::npos)
      << s.status().message();
  // zstd's magic number, then bytes that are not UTF-8.
  write_file(dir + "/train.tsv.zst", std::string("\x28\xB5\x2F\xFD\x04\x58\x00\x01\xFF\xFE", 10));
  s = convert(TaskName::kMnli, dir + "/train.tsv.zst", dir + "/o.jsonl");
  ASSERT_FALSE(s.ok());
  const std::string m(s.status().message());
  EXPECT_NE(m.find("train.tsv.zst: is not text: byte offset 1 is 0xB5 (not UTF-8)"),
            std::string::npos)
      << m;
  for (char c : m) EXPECT_TRUE(static_cast<unsigned char>(c) < 0x80 && c != '\0') << m;
  write_file(dir + "/nul.txt", std::string("a passage\0with a NUL\n", 21));
  s = convert(TaskName::kLambada, dir + "/nul.txt", dir + "/o.jsonl");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("nul.txt: is not text: byte offset 9 is 0x00 (NUL)"),
            std::string::npos)
      << s.status().message();
}

// --- Lambada ------------------------------------------------------------------------------------

TEST(SplitLastWord, ContextAndWord) {
  auto s = split_last_word("  He picked up his coat and walked out past Maria \n");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->context, "He picked up his coat and walked out past");
  EXPECT_EQ(s->word, "Maria");
  s = split_last_word("it was the end.");  // punctuation stays with the word
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->word, "end.");
  s = split_last_word("a  \t b");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->context, "a");
  EXPECT_EQ(s->word, "b");
  EXPECT_FALSE(split_last_word(" alone ").ok());
  EXPECT_FALSE(split_last_word("").ok());
}

TEST(AsciiQuotes, PaxReplacements) {
  EXPECT_EQ(ascii_quotes("\u201cNo,\u201d she said. \u2018It\u2019s late.\u2019 \u2014 ok"),
            "\"No,\" she said. 'It's late.' \u2014 ok");
}

TEST(ConvertLambada, OpenAiJsonl) {
  const std::string dir = temp_dir("lambada");
  write_file(dir + "/lambada_test.jsonl",
             "{\"text\": \"\u201cWhere are you going?\u201d asked Maria. He did not answer, just "
             "picked up his coat and walked out past Maria\"}\n"
             "{\"text\": \"the bell rang twice before anyone moved to open the door\"}\n");
  auto s = convert(TaskName::kLambada, dir + "/lambada_test.jsonl", dir + "/plain.jsonl");
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->input_format, "Lambada jsonl");
  EXPECT_EQ(s->written, 2u);
  std::vector<json> r = read_jsonl(dir + "/plain.jsonl");
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0]["context"],
            "\u201cWhere are you going?\u201d asked Maria. He did not answer, just picked up his "
            "coat and walked out past");
  EXPECT_EQ(r[0]["last_word"], "Maria");
  EXPECT_EQ(r[0]["text"], r[0]["context"].get<std::string>() + " Maria");
  EXPECT_EQ(r[1]["last_word"], "door");

  s = convert(TaskName::kLambada, dir + "/lambada_test.jsonl", dir + "/pax.jsonl", true);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  r = read_jsonl(dir + "/pax.jsonl");
  EXPECT_EQ(r[0]["text"],
            "\"Where are you going?\" asked Maria. He did not answer, just picked up his coat and "
            "walked out past Maria");
}

TEST(ConvertLambada, PlainTextAndErrors) {
  const std::string dir = temp_dir("lambada-txt");
  write_file(dir + "/lambada_test_plain_text.txt",
             "he picked up his coat and walked out past maria\n\nthe bell rang twice door\n");
  auto s = convert(TaskName::kLambada, dir + "/lambada_test_plain_text.txt", dir + "/o.jsonl");
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->input_format, "LAMBADA plain text");
  EXPECT_EQ(s->written, 2u);
  EXPECT_EQ(read_jsonl(dir + "/o.jsonl")[1]["last_word"], "door");

  write_file(dir + "/one.jsonl", "{\"text\": \"two words\"}\n{\"text\": \"alone\"}\n");
  s = convert(TaskName::kLambada, dir + "/one.jsonl", dir + "/o2.jsonl");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("one.jsonl:2: the text 'alone' is one word"),
            std::string::npos)
      << s.status().message();
  write_file(dir + "/nofield.jsonl", "{\"passage\": \"two words\"}\n");
  s = convert(TaskName::kLambada, dir + "/nofield.jsonl", dir + "/o3.jsonl");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("nofield.jsonl:1: no field 'text'"), std::string::npos)
      << s.status().message();
}

}  // namespace
}  // namespace ax::data
