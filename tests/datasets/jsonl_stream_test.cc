// The streaming jsonl reader (datasets/text/src/json_line.cc behind TextSource) against what it
// replaced: nlohmann's whole-line parse and field lookup. Random records, many of them mutated
// into invalid JSON, must give the same documents, set names and verdicts, also when every
// document goes through the temporary file and comes back in tiny parts, and when lines are long
// enough to arrive in several pieces.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "ax/common/strings.h"
#include "ax/datasets/text/text_source.h"
#include "test_util.h"

namespace ax::data {
namespace {

using testing::temp_dir;
using testing::write_file;

class Gen {
 public:
  explicit Gen(uint64_t seed) : rng_(seed) {}

  std::string record() {
    std::string s = chance(0.03) ? "\xEF\xBB\xBF" : "";
    s += ws();
    s += chance(0.9) ? top_object() : value(0);
    s += ws();
    for (int m = chance(0.25) ? pick(3) + 1 : 0; m > 0; --m) mutate(&s);
    return s;
  }

  // A record whose text is about `bytes` long, with escapes and multi-byte characters throughout.
  std::string long_record(size_t bytes) {
    std::string text;
    while (text.size() < bytes) text += string_body(200);
    return "{\"meta\": {\"pile_set_name\": \"Long\"}, \"text\": \"" + text + "\"}";
  }

 private:
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  template <size_t N>
  const char* one_of(const char* const (&items)[N]) {
    return items[pick(static_cast<int>(N))];
  }

  std::string ws() {
    static const char* const kWs[] = {"", "", " ", "  ", "\t", " \r "};
    return chance(0.002) ? "\x0b" : one_of(kWs);
  }

  std::string string_body(int max_pieces) {
    static const char* const kPieces[] = {"hello",
                                          " ",
                                          "world",
                                          "caf\xC3\xA9",
                                          "\xE6\x9D\xB1",
                                          "\xF0\x9F\x98\x80",
                                          "\\n",
                                          "\\t",
                                          "\\\"",
                                          "\\\\",
                                          "\\/",
                                          "\\b",
                                          "\\f",
                                          "\\r",
                                          "\\u00e9",
                                          "\\u6771",
                                          "\\ud83d\\ude00",
                                          "\\u0000",
                                          "\\ud800",
                                          "\\udc00x",
                                          "\\x",
                                          "\x01",
                                          "\\u12",
                                          "   "};
    std::string s;
    for (int n = pick(max_pieces); n > 0; --n) {
      // Invalid pieces are rare, so most records stay valid.
      const int i = pick(sizeof(kPieces) / sizeof(kPieces[0]));
      if (i >= 18 && !chance(0.02)) continue;
      s += kPieces[i];
    }
    return s;
  }

  std::string key() {
    static const char* const kKeys[] = {"text", "meta", "pile_set_name", "a", "b",
                                        "a.b",  "x",    "\\u0074ext",    "",  "body"};
    return str_cat("\"", one_of(kKeys), "\"");
  }

  std::string object(int depth) {
    std::vector<std::string> members;
    for (int n = pick(4); n > 0; --n)
      members.push_back(str_cat(key(), ws(), ":", ws(), value(depth + 1)));
    return join(members);
  }

  // Mostly what a Pile record has, in any order, among other members.
  std::string top_object() {
    std::vector<std::string> members;
    for (int n = pick(3); n > 0; --n) members.push_back(str_cat(key(), ":", ws(), value(1)));
    if (chance(0.85)) members.push_back(str_cat("\"text\":", ws(), "\"", string_body(12), "\""));
    if (chance(0.5)) {
      members.push_back(str_cat("\"meta\": {\"pile_set_name\": \"", string_body(3), "\"}"));
    }
    if (chance(0.3)) members.push_back(str_cat("\"a\": {\"b\": ", value(2), "}"));
    if (chance(0.1)) members.push_back(str_cat("\"a.b\": ", value(1)));
    std::shuffle(members.begin(), members.end(), rng_);
    return join(members);
  }

  std::string join(const std::vector<std::string>& members) {
    std::string s = str_cat("{", ws());
    for (size_t i = 0; i < members.size(); ++i) {
      if (i > 0) s += str_cat(",", ws());
      s += str_cat(members[i], ws());
    }
    s += "}";
    return s;
  }

  std::string value(int depth) {
    static const char* const kNumbers[] = {"0", "-0", "12", "1.5", "-3e10", "2E+5", "1e-3", "7"};
    static const char* const kBadNumbers[] = {"01", "1.", ".5", "-", "1e", "+1", "0x10", "1.2.3"};
    static const char* const kLiterals[] = {"true", "false", "null"};
    static const char* const kBadLiterals[] = {"tru", "nul", "falsey"};
    if (chance(0.03)) return chance(0.7) ? one_of(kBadNumbers) : one_of(kBadLiterals);
    const int kind = depth > 3 ? pick(3) : pick(6);
    switch (kind) {
      case 0:
        return chance(0.9) ? one_of(kNumbers) : one_of(kLiterals);
      case 1:
      case 2:
        return str_cat("\"", string_body(12), "\"");
      case 3:
        return one_of(kLiterals);
      case 4: {
        std::string s = str_cat("[", ws());
        for (int n = pick(3), i = 0; i < n; ++i) s += str_cat(i > 0 ? "," : "", value(depth + 1));
        s += "]";
        return s;
      }
      default:
        return object(depth);
    }
  }

  void mutate(std::string* s) {
    static const char kInsert[] = "{}[]\":,\\ abc01-eE.\t";
    if (s->empty()) return;
    const size_t at = static_cast<size_t>(pick(static_cast<int>(s->size())));
    switch (pick(3)) {
      case 0:
        s->erase(at, 1);
        break;
      case 1:
        s->insert(at, 1, kInsert[pick(sizeof(kInsert) - 1)]);
        break;
      default:
        s->insert(at, s->substr(at, static_cast<size_t>(pick(8))));
        break;
    }
  }

  std::mt19937_64 rng_;
};

bool blank(std::string_view s) { return s.find_first_not_of(" \t\r\n\v\f") == s.npos; }

const nlohmann::json* find_field(const nlohmann::json& obj, const std::string& path) {
  if (auto it = obj.find(path); it != obj.end()) return &*it;
  const nlohmann::json* cur = &obj;
  for (const std::string& part : str_split(path, '.')) {
    if (!cur->is_object()) return nullptr;
    auto it = cur->find(part);
    if (it == cur->end()) return nullptr;
    cur = &*it;
  }
  return cur;
}

struct Outcome {
  std::vector<std::string> texts, set_names, lines;
  uint64_t bad = 0, empty = 0;
};

// What the whole-line reader made of the lines: nlohmann::json::parse and a path lookup.
Outcome reference(const std::vector<std::string>& lines, const std::string& field) {
  Outcome o;
  for (size_t n = 0; n < lines.size(); ++n) {
    std::string line = lines[n];
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (blank(line)) continue;
    if (!is_valid_utf8(line)) {
      ++o.bad;
      continue;
    }
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    const nlohmann::json* v = j.is_object() ? find_field(j, field) : nullptr;
    if (v == nullptr || !v->is_string()) {
      ++o.bad;
      continue;
    }
    const std::string text = v->get<std::string>();
    if (blank(text)) {
      ++o.empty;
      continue;
    }
    o.texts.push_back(text);
    o.lines.push_back(std::to_string(n + 1));
    const nlohmann::json* set = find_field(j, "meta.pile_set_name");
    o.set_names.push_back(set != nullptr && set->is_string() ? set->get<std::string>() : "");
  }
  return o;
}

Outcome streamed(const std::string& path, TextSourceOptions options) {
  options.skip_bad = true;
  Outcome o;
  auto src = TextSource::open({path}, options);
  EXPECT_TRUE(src.ok()) << src.status().to_string();
  if (!src.ok()) return o;
  Document d;
  while (true) {
    StatusOr<bool> got = (*src)->next(&d);
    EXPECT_TRUE(got.ok()) << got.status().to_string();
    if (!got.ok() || !*got) break;
    o.texts.push_back(d.text);
    o.set_names.push_back(d.set_name);
    o.lines.push_back(d.where.substr(d.where.rfind(':') + 1));
  }
  o.bad = (*src)->skipped_bad();
  o.empty = (*src)->skipped_empty();
  return o;
}

void expect_same(const Outcome& want, const Outcome& got, const std::string& what,
                 const std::vector<std::string>& lines) {
  for (size_t i = 0; i < std::min(want.lines.size(), got.lines.size()); ++i) {
    ASSERT_EQ(got.lines[i], want.lines[i])
        << what << ": the documents differ from here on; line " << want.lines[i] << ": "
        << lines[std::stoul(want.lines[i]) - 1].substr(0, 300);
  }
  EXPECT_EQ(got.bad, want.bad) << what;
  EXPECT_EQ(got.empty, want.empty) << what;
  ASSERT_EQ(got.texts.size(), want.texts.size()) << what;
  for (size_t i = 0; i < want.texts.size(); ++i) {
    ASSERT_EQ(got.texts[i], want.texts[i]) << what << ": document " << i;
    ASSERT_EQ(got.set_names[i], want.set_names[i]) << what << ": document " << i;
  }
}

TEST(JsonlStream, AgreesWithWholeLineParserOnRandomRecords) {
  Gen gen(20240517);
  std::vector<std::string> lines;
  for (int i = 0; i < 6000; ++i) lines.push_back(gen.record());
  // Lines longer than one read piece (256 KiB), so values straddle piece boundaries.
  for (size_t bytes : {300000u, 700000u}) lines.push_back(gen.long_record(bytes));
  std::string file;
  for (const std::string& l : lines) file += l + "\n";
  const std::string dir = temp_dir("jsonl-stream");
  write_file(dir + "/r.jsonl", file);

  for (const std::string field : {"text", "a.b", "meta.pile_set_name"}) {
    const Outcome want = reference(lines, field);
    EXPECT_GT(want.texts.size(), 300u) << field;  // the generator makes enough good records
    EXPECT_GT(want.bad, 600u) << field;           // ... and enough bad ones
    TextSourceOptions o;
    o.json_field = field;
    expect_same(want, streamed(dir + "/r.jsonl", o), field + ", defaults", lines);
    // Every document through the temporary file, read back 7 bytes at a time.
    o.doc_memory_bytes = 16;
    o.part_bytes = 7;
    o.spill_dir = dir;
    expect_same(want, streamed(dir + "/r.jsonl", o), field + ", spilled, tiny parts", lines);
  }
}

TEST(JsonlStream, AgreesWithWholeLineParserOnEdgeCases) {
  const std::vector<std::string> lines = {
      R"({"text": "\ud83d\ude00 pair"})",          // a surrogate pair
      R"({"text": "\ud800X\udc00 broken pair"})",  // something between the halves
      R"({"text": "\ud800\u0041 high, then no low"})",
      R"({"text": "\udc00 low alone"})",
      R"({"text": "\ud800"})",
      "\xEF\xBB\xBF{\"text\": \"after a BOM\"}",
      R"( {"text" : "spaces" , "meta" : { "pile_set_name" : "A" } } )",
      R"({"text": "x", "text": "the last duplicate wins"})",
      R"({"a.b": "exact key", "a": {"b": "nested"}})",
      R"({"a": {"b": "nested, then replaced"}, "a": 1})",
      R"({"text": "control char \u0001 escaped"})",
      "{\"text\": \"raw control \x01 char\"}",
      R"({"text": "ok"} trailing)",
      R"({"text": "ok",})",
      R"({"text": "n", "n": -0.5e+3, "m": [true, false, null, {}, []]})",
      R"({"text": "n", "n": 1.})",
      R"({"text": "n", "n": 01})",
      R"([{"text": "an array"}])",
      R"("a string")",
  };
  std::string file;
  for (const std::string& l : lines) file += l + "\n";
  const std::string dir = temp_dir("jsonl-stream");
  write_file(dir + "/edge.jsonl", file);
  for (const std::string field : {"text", "a.b"}) {
    TextSourceOptions o;
    o.json_field = field;
    expect_same(reference(lines, field), streamed(dir + "/edge.jsonl", o), field, lines);
  }
}

}  // namespace
}  // namespace ax::data
