#include "ax/datasets/text/task_convert.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "ax/common/file_io.h"
#include "ax/common/strings.h"

namespace ax::data {
namespace {

using nlohmann::json;

constexpr std::string_view kBom = "\xEF\xBB\xBF";

// RE2's \s (no \v) and [[:punct:]] (Python's string.punctuation).
bool re2_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\f' || c == '\r'; }
bool re2_punct(char c) {
  return (c >= '!' && c <= '/') || (c >= ':' && c <= '@') || (c >= '[' && c <= '`') ||
         (c >= '{' && c <= '~');
}

// regex_replace(text, r'\s+', ' ').
std::string collapse_space(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  bool in_run = false;
  for (char c : text) {
    if (!re2_space(c)) {
      out.push_back(c);
    } else if (!in_run) {
      out.push_back(' ');
    }
    in_run = re2_space(c);
  }
  return out;
}

bool ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

std::string_view trim_ascii(std::string_view s) {
  while (!s.empty() && ascii_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && ascii_space(s.back())) s.remove_suffix(1);
  return s;
}

// The input file line by line ('\n' or "\r\n"; a leading UTF-8 byte-order mark dropped).
class Lines {
 public:
  static StatusOr<Lines> open(const std::string& path) {
    Lines lines(path);
    if (!lines.in_) return IoError(str_cat("open ", path), errno);
    return lines;
  }
  // The next line, false at the end.
  bool next(std::string* line) {
    if (!std::getline(in_, *line)) return false;
    ++number_;
    if (!line->empty() && line->back() == '\r') line->pop_back();
    if (number_ == 1 && line->starts_with(kBom)) line->erase(0, kBom.size());
    return true;
  }
  // The first line that holds more than white space, without consuming anything.
  std::string peek() {
    std::ifstream again(path_);
    std::string line;
    while (std::getline(again, line)) {
      if (line.starts_with(kBom)) line.erase(0, kBom.size());
      if (!trim_ascii(line).empty()) return line;
    }
    return "";
  }
  std::string where() const { return str_cat(path_, ":", number_); }

 private:
  explicit Lines(const std::string& path) : path_(path), in_(path, std::ios::binary) {}
  std::string path_;
  std::ifstream in_;
  int64_t number_ = 0;
};

// The byte offset of the first byte of `text` that is NUL or not UTF-8, or npos. A sequence
// cut by the end of `text` (a file's first block) counts as valid.
size_t first_non_text_byte(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    const size_t n = c == 0           ? 0
                     : c < 0x80       ? 1
                     : (c >> 5) == 6  ? 2
                     : (c >> 4) == 14 ? 3
                     : (c >> 3) == 30 ? 4
                                      : 0;
    if (n == 0 || (n == 2 && c < 0xC2) || (n == 4 && c > 0xF4)) return i;
    for (size_t k = 1; k < n && i + k < text.size(); ++k) {
      if ((static_cast<unsigned char>(text[i + k]) & 0xC0) != 0x80) return i;
    }
    i += n;
  }
  return std::string_view::npos;
}

// An MNLI or Lambada input must hold text: an empty file, or one whose first 64 KiB hold a NUL
// or a byte that is not UTF-8 (a binary file, a compressed one), is refused by offset and value,
// never echoed.
Status check_is_text(const std::string& path, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return IoError(str_cat("open ", path), errno);
  std::string head(64 << 10, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(in.gcount()));
  if (trim_ascii(head).empty()) {
    return InvalidArgument(path, ": is empty", head.empty() ? "" : " (white space only)", ": no ",
                           what, " examples");
  }
  if (const size_t bad = first_non_text_byte(head); bad != std::string_view::npos) {
    char hex[8];
    std::snprintf(hex, sizeof(hex), "0x%02X", static_cast<unsigned char>(head[bad]));
    return InvalidArgument(path, ": is not text: byte offset ", bad, " is ", hex,
                           bad < head.size() && head[bad] == '\0' ? " (NUL)" : " (not UTF-8)",
                           "; expected ", what, " (a compressed or binary file must be unpacked)");
  }
  return Status::Ok();
}

bool looks_like_json(std::string_view first_line) {
  std::string_view t = trim_ascii(first_line);
  return !t.empty() && t.front() == '{';
}

// One output record per line, UTF-8 kept as is (a byte that is not UTF-8 becomes U+FFFD).
void append_record(const json& record, std::string* out) {
  *out += record.dump(-1, ' ', false, json::error_handler_t::replace);
  out->push_back('\n');
}

Status write_output(const std::string& path, const std::string& text) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) return IoError(str_cat("create directory ", parent.string()), ec.value());
  return write_file_atomically(path, text);
}

// --- MNLI -------------------------------------------------------------------------------------

constexpr std::array<std::string_view, 3> kMnliLabels = {"entailment", "neutral", "contradiction"};

// The label word of a gold label: a word, or TFDS/Hugging Face's class id 0, 1, 2. nullopt for
// a pair without one ('-' in MultiNLI, -1 or empty in other exports).
StatusOr<std::optional<std::string>> mnli_label(std::string_view value, const std::string& where) {
  if (value == "-" || value == "-1" || value.empty()) return std::optional<std::string>();
  for (std::string_view word : kMnliLabels) {
    if (value == word) return std::optional<std::string>(std::string(word));
  }
  if (value.size() == 1 && value[0] >= '0' && value[0] <= '2') {
    return std::optional<std::string>(
        std::string(kMnliLabels[static_cast<size_t>(value[0] - '0')]));
  }
  return InvalidArgument(where, ": gold label '", value,
                         "' is none of entailment, neutral, contradiction, 0, 1, 2, '-'");
}

struct MnliPair {
  std::string premise, hypothesis, label, pair_id;
};

// Appends the pair's record, or counts it as skipped when it has no gold label.
Status add_mnli(const MnliPair& p, uint64_t idx, const std::string& where,
                ConvertTaskSummary* summary, std::string* out) {
  AX_ASSIGN_OR_RETURN(std::optional<std::string> label, mnli_label(p.label, where));
  if (!label) {
    ++summary->skipped;
    return Status::Ok();
  }
  json record = {
      {"inputs", mnli_inputs(p.hypothesis, p.premise)}, {"targets", *label}, {"idx", idx}};
  if (!p.pair_id.empty()) record["pair_id"] = p.pair_id;
  append_record(record, out);
  ++summary->written;
  return Status::Ok();
}

// The index of the first of `names` in the header, or -1.
int column(const std::vector<std::string>& header, std::initializer_list<std::string_view> names) {
  for (std::string_view name : names) {
    for (size_t i = 0; i < header.size(); ++i) {
      if (header[i] == name) return static_cast<int>(i);
    }
  }
  return -1;
}

// GLUE's tsv (csv.DictReader with QUOTE_NONE: fields are the text between tabs, quotes
// included).
Status convert_mnli_tsv(Lines& lines, ConvertTaskSummary* summary, std::string* out) {
  summary->input_format = "GLUE tsv";
  std::string line;
  lines.next(&line);
  const std::vector<std::string> header = str_split(line, '\t');
  const int premise = column(header, {"sentence1", "premise"});
  const int hypothesis = column(header, {"sentence2", "hypothesis"});
  const int label = column(header, {"gold_label", "label"});
  const int pair_id = column(header, {"pairID"});
  if (premise < 0 || hypothesis < 0 || label < 0) {
    return InvalidArgument(lines.where(),
                           ": the header needs the columns sentence1, sentence2 and gold_label "
                           "(or premise, hypothesis, label); it has: ",
                           line.substr(0, 300),
                           label < 0 ? " (a test file without labels cannot be converted)" : "");
  }
  uint64_t idx = 0;
  while (lines.next(&line)) {
    if (line.empty()) continue;
    const std::vector<std::string> f = str_split(line, '\t');
    if (f.size() != header.size()) {
      return InvalidArgument(lines.where(), ": ", f.size(), " columns, the header has ",
                             header.size());
    }
    MnliPair p{f[static_cast<size_t>(premise)], f[static_cast<size_t>(hypothesis)],
               f[static_cast<size_t>(label)], pair_id >= 0 ? f[static_cast<size_t>(pair_id)] : ""};
    AX_RETURN_IF_ERROR(add_mnli(p, idx++, lines.where(), summary, out));
  }
  return Status::Ok();
}

// `text` parsed, or DataLoss naming `where`, the line and column (for a whole file) and the
// byte offset (from 0) of the first byte that is not JSON, and nlohmann's reason without the
// raw bytes it last read (a binary file's would be echoed).
StatusOr<json> parse_json_located(const std::string& text, const std::string& where,
                                  bool whole_file) {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    const size_t byte = std::min(text.size(), e.byte > 0 ? e.byte - 1 : 0);
    std::string reason = e.what();
    if (const size_t colon = reason.find(": "); colon != std::string::npos) {
      reason = reason.substr(colon + 2);
    }
    if (const size_t last = reason.find("; last read:"); last != std::string::npos) {
      reason.erase(last);
    }
    if (!whole_file) {
      return DataLoss(where, ": not valid JSON at byte offset ", byte, " of the line: ", reason);
    }
    const auto before = text.begin() + static_cast<std::ptrdiff_t>(byte);
    const int64_t line = 1 + std::count(text.begin(), before, '\n');
    const size_t line_start = std::string_view(text).substr(0, byte).rfind('\n');
    const size_t column = byte - (line_start == std::string::npos ? 0 : line_start + 1) + 1;
    return DataLoss(where, ": not valid JSON at line ", line, ", column ", column, " (byte offset ",
                    byte, "): ", reason);
  }
}

// A JSON line as an object, or an error naming the line and the byte within it.
StatusOr<json> parse_line(const std::string& line, const Lines& lines) {
  AX_ASSIGN_OR_RETURN(json record, parse_json_located(line, lines.where(), false));
  if (!record.is_object()) return DataLoss(lines.where(), ": not a JSON object");
  return record;
}

// The string at the first of `keys` that is present; an integer is written in decimal.
StatusOr<std::string> string_field(const json& record, std::initializer_list<const char*> keys,
                                   const Lines& lines) {
  for (const char* key : keys) {
    auto it = record.find(key);
    if (it == record.end()) continue;
    if (it->is_string()) return it->get<std::string>();
    if (it->is_number_integer()) return std::to_string(it->get<int64_t>());
    return InvalidArgument(lines.where(), ": field '", key, "' is not a string");
  }
  return InvalidArgument(lines.where(), ": no field '", *keys.begin(), "'");
}

// MultiNLI's jsonl (sentence1, sentence2, gold_label, pairID, ...), or an export with premise,
// hypothesis, label.
Status convert_mnli_jsonl(Lines& lines, ConvertTaskSummary* summary, std::string* out) {
  summary->input_format = "MultiNLI jsonl";
  std::string line;
  uint64_t idx = 0;
  while (lines.next(&line)) {
    if (trim_ascii(line).empty()) continue;
    AX_ASSIGN_OR_RETURN(json record, parse_line(line, lines));
    MnliPair p;
    AX_ASSIGN_OR_RETURN(p.premise, string_field(record, {"sentence1", "premise"}, lines));
    AX_ASSIGN_OR_RETURN(p.hypothesis, string_field(record, {"sentence2", "hypothesis"}, lines));
    AX_ASSIGN_OR_RETURN(p.label, string_field(record, {"gold_label", "label"}, lines));
    if (record.contains("pairID")) {
      AX_ASSIGN_OR_RETURN(p.pair_id, string_field(record, {"pairID"}, lines));
    }
    AX_RETURN_IF_ERROR(add_mnli(p, idx++, lines.where(), summary, out));
  }
  return Status::Ok();
}

// --- SQuAD ------------------------------------------------------------------------------------

// The value at `key` of a JSON object, of the wanted kind, or an error naming where it is.
StatusOr<const json*> member(const json& object, const char* key, json::value_t kind,
                             const std::string& where) {
  auto it = object.find(key);
  if (it == object.end()) return InvalidArgument(where, ": no '", key, "'");
  const bool ok = kind == json::value_t::string  ? it->is_string()
                  : kind == json::value_t::array ? it->is_array()
                                                 : it->is_object();
  if (!ok) return InvalidArgument(where, ": '", key, "' is a ", it->type_name());
  return &*it;
}

// The byte offset of code point `index` of UTF-8 `text` (SQuAD's answer_start counts Python's
// str indices, code points), or npos past the end.
size_t utf8_byte_offset(std::string_view text, int64_t index) {
  int64_t seen = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) continue;  // a continuation byte
    if (seen++ == index) return i;
  }
  return seen == index ? text.size() : std::string_view::npos;
}

// An answer's answer_start must be where its text is in the context (the span a reader model is
// trained on): a mismatch is refused naming the question, the answer and what is there, and
// where in the context the text does occur.
Status check_answer_start(const json& answer, size_t k, const std::string& text,
                          const std::string& context, const std::string& at) {
  auto it = answer.find("answer_start");
  if (it == answer.end()) return InvalidArgument(at, ": answer ", k, " has no 'answer_start'");
  if (!it->is_number_integer() || it->get<int64_t>() < 0) {
    return InvalidArgument(at, ": answer ", k, " 'answer_start' = ", it->dump(),
                           " is not a character offset (an integer >= 0)");
  }
  const int64_t start = it->get<int64_t>();
  const size_t begin = utf8_byte_offset(context, start);
  if (begin != std::string_view::npos &&
      std::string_view(context).substr(begin).starts_with(text)) {
    return Status::Ok();
  }
  std::string there = "past the context's end";
  if (begin != std::string_view::npos) {
    json found = context.substr(begin, std::clamp<size_t>(text.size(), 20, 40));
    there = str_cat("the context has ", found.dump(-1, ' ', true, json::error_handler_t::replace));
  }
  const size_t found_at = context.find(text);
  std::string hint = " (the text is nowhere in the context)";
  if (found_at != std::string::npos) {
    int64_t chars = 0;
    for (size_t i = 0; i < found_at; ++i) {
      chars += (static_cast<unsigned char>(context[i]) & 0xC0) != 0x80;
    }
    hint = str_cat(" (the text first occurs at character ", chars, ")");
  }
  return InvalidArgument(at, ": answer ", k, " 'answer_start' = ", start, " does not match its ",
                         "text ", json(text).dump(-1, ' ', true, json::error_handler_t::replace),
                         ": at that character ", there, hint);
}

Status convert_squad_question(const json& qa, const std::string& context, const std::string& where,
                              ConvertTaskSummary* summary, std::string* out) {
  if (!qa.is_object()) return InvalidArgument(where, ": a question is not an object");
  AX_ASSIGN_OR_RETURN(const json* question, member(qa, "question", json::value_t::string, where));
  AX_ASSIGN_OR_RETURN(const json* id, member(qa, "id", json::value_t::string, where));
  const std::string at = str_cat(where, " question ", id->get<std::string>());
  AX_ASSIGN_OR_RETURN(const json* answers, member(qa, "answers", json::value_t::array, at));
  json padded = json::array(), raw = json::array();
  for (const json& a : *answers) {
    if (!a.is_object()) return InvalidArgument(at, ": an answer is not an object");
    AX_ASSIGN_OR_RETURN(const json* text, member(a, "text", json::value_t::string, at));
    AX_RETURN_IF_ERROR(check_answer_start(a, raw.size(), text->get<std::string>(), context, at));
    raw.push_back(*text);
    padded.push_back(t5_pad_punctuation(text->get<std::string>()));
  }
  if (padded.empty()) {  // SQuAD 2.0's unanswerable questions
    ++summary->skipped;
    return Status::Ok();
  }
  json record = {{"inputs", squad_inputs(question->get<std::string>(), context)},
                 {"targets", padded[0]},
                 {"id", *id},
                 {"answers", padded},
                 {"raw_answers", raw}};
  append_record(record, out);
  ++summary->written;
  return Status::Ok();
}

// {"data": [{"title", "paragraphs": [{"context", "qas": [{"question", "id", "answers":
// [{"text", "answer_start"}]}]}]}], "version"}.
Status convert_squad(const std::string& path, ConvertTaskSummary* summary, std::string* out) {
  summary->input_format = "SQuAD JSON";
  AX_ASSIGN_OR_RETURN(std::string text, read_file(path));
  if (trim_ascii(text).empty()) return InvalidArgument(path, ": is empty, not a SQuAD JSON file");
  AX_ASSIGN_OR_RETURN(const json doc, parse_json_located(text, path, true));
  if (!doc.is_object()) return InvalidArgument(path, ": not a SQuAD file (no top-level object)");
  AX_ASSIGN_OR_RETURN(const json* data, member(doc, "data", json::value_t::array, path));
  for (size_t a = 0; a < data->size(); ++a) {
    const std::string where = str_cat(path, ": data[", a, "]");
    const json& article = (*data)[a];
    if (!article.is_object()) return InvalidArgument(where, ": not an object");
    AX_ASSIGN_OR_RETURN(const json* paragraphs,
                        member(article, "paragraphs", json::value_t::array, where));
    for (size_t p = 0; p < paragraphs->size(); ++p) {
      const std::string at = str_cat(where, ".paragraphs[", p, "]");
      const json& paragraph = (*paragraphs)[p];
      if (!paragraph.is_object()) return InvalidArgument(at, ": not an object");
      AX_ASSIGN_OR_RETURN(const json* context,
                          member(paragraph, "context", json::value_t::string, at));
      AX_ASSIGN_OR_RETURN(const json* qas, member(paragraph, "qas", json::value_t::array, at));
      const std::string c = context->get<std::string>();
      for (const json& qa : *qas) {
        AX_RETURN_IF_ERROR(convert_squad_question(qa, c, at, summary, out));
      }
    }
  }
  return Status::Ok();
}

// --- Lambada ----------------------------------------------------------------------------------

Status add_lambada(std::string text, const ConvertTaskOptions& o, const Lines& lines,
                   ConvertTaskSummary* summary, std::string* out) {
  if (o.ascii_quotes) text = ascii_quotes(text);
  StatusOr<LastWord> split = split_last_word(text);
  if (!split.ok()) return InvalidArgument(lines.where(), ": ", split.status().message());
  json record = {{"text", str_cat(split->context, " ", split->word)},
                 {"context", split->context},
                 {"last_word", split->word}};
  append_record(record, out);
  ++summary->written;
  return Status::Ok();
}

// The OpenAI jsonl ({"text": ...} per line) or LAMBADA's plain text (a passage per line).
Status convert_lambada(Lines& lines, const ConvertTaskOptions& o, ConvertTaskSummary* summary,
                       std::string* out) {
  const bool jsonl = looks_like_json(lines.peek());
  summary->input_format = jsonl ? "Lambada jsonl" : "LAMBADA plain text";
  std::string line;
  while (lines.next(&line)) {
    if (trim_ascii(line).empty()) continue;
    std::string text = line;
    if (jsonl) {
      AX_ASSIGN_OR_RETURN(json record, parse_line(line, lines));
      AX_ASSIGN_OR_RETURN(text, string_field(record, {"text"}, lines));
    }
    AX_RETURN_IF_ERROR(add_lambada(std::move(text), o, lines, summary, out));
  }
  return Status::Ok();
}

}  // namespace

std::string t5_pad_punctuation(std::string_view text) {
  std::string padded;
  padded.reserve(text.size() + text.size() / 4);
  for (char c : text) {
    if (re2_punct(c)) {
      padded.push_back(' ');
      padded.push_back(c);
      padded.push_back(' ');
    } else {
      padded.push_back(c);
    }
  }
  return collapse_space(padded);
}

std::string mnli_inputs(std::string_view hypothesis, std::string_view premise) {
  return str_cat("mnli hypothesis: ", hypothesis, " premise: ", premise);
}

std::string squad_inputs(std::string_view question, std::string_view context) {
  return collapse_space(str_cat("question: ", t5_pad_punctuation(question),
                                " context: ", t5_pad_punctuation(context)));
}

StatusOr<LastWord> split_last_word(std::string_view text) {
  const std::string_view t = trim_ascii(text);
  size_t cut = t.size();
  while (cut > 0 && !ascii_space(t[cut - 1])) --cut;
  const std::string_view context = trim_ascii(t.substr(0, cut));
  if (context.empty()) {
    return InvalidArgument("the text '", t.substr(0, 80),
                           "' is one word: there is no context before a last word");
  }
  return LastWord{std::string(context), std::string(t.substr(cut))};
}

std::string ascii_quotes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    // “ ” ‘ ’ are E2 80 9C, 9D, 98, 99.
    if (i + 2 < text.size() && text[i] == '\xE2' && text[i + 1] == '\x80') {
      const char c = text[i + 2];
      if (c == '\x9C' || c == '\x9D' || c == '\x98' || c == '\x99') {
        out.push_back(c == '\x9C' || c == '\x9D' ? '"' : '\'');
        i += 2;
        continue;
      }
    }
    out.push_back(text[i]);
  }
  return out;
}

StatusOr<ConvertTaskSummary> convert_task(const ConvertTaskOptions& o) {
  ConvertTaskSummary summary;
  std::string out;
  if (o.task == TaskName::kSquad) {
    AX_RETURN_IF_ERROR(convert_squad(o.input, &summary, &out));
  } else {
    AX_RETURN_IF_ERROR(check_is_text(o.input, o.task == TaskName::kLambada
                                                  ? "Lambada jsonl or plain text"
                                                  : "MNLI tsv or jsonl"));
    AX_ASSIGN_OR_RETURN(Lines lines, Lines::open(o.input));
    if (o.task == TaskName::kLambada) {
      AX_RETURN_IF_ERROR(convert_lambada(lines, o, &summary, &out));
    } else if (looks_like_json(lines.peek())) {
      AX_RETURN_IF_ERROR(convert_mnli_jsonl(lines, &summary, &out));
    } else {
      AX_RETURN_IF_ERROR(convert_mnli_tsv(lines, &summary, &out));
    }
  }
  if (summary.written == 0) {
    return InvalidArgument(o.input, ": no examples (", summary.skipped,
                           " without a label or answer)");
  }
  AX_RETURN_IF_ERROR(write_output(o.output, out));
  return summary;
}

}  // namespace ax::data
