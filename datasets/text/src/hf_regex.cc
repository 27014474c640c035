// Regular expressions of tokenizer.json, and splitting a text by a pattern.
//
// The crate compiles its patterns with Oniguruma (utils/onig.rs); ax uses Debian's PCRE2 (UTF,
// Unicode properties, lookaround) and gives the few escapes whose meaning differs Oniguruma's
// meaning. Checked against the crate (tests/datasets/hf_tokenizer/): \s is Unicode White_Space
// (PCRE2's \s leaves out U+0085), \w is letters, marks, numbers and connector punctuation
// (PCRE2's leaves out marks and connectors other than '_'), \h is a hexadecimal digit (PCRE2's
// is horizontal space), and ^ and $ match at line boundaries. Inside a character class \S, \W and
// \H keep PCRE2's meaning (a difference only for U+0085, marks and connector punctuation).
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cctype>
#include <ios>

#include "hf_pipeline.h"

namespace ax::data::hf {
namespace {

pcre2_code* as_code(void* p) { return static_cast<pcre2_code*>(p); }

// Oniguruma's escapes in PCRE2's terms.
std::string onig_to_pcre2(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 16);
  bool in_class = false;
  size_t class_start = 0;  // index in `p` just after the class's '[' or "[^"
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      const char* outside = nullptr;
      const char* inside = nullptr;
      switch (e) {
        case 's':
          outside = "[\\s\\x{85}]";
          inside = "\\s\\x{85}";
          break;
        case 'S':
          outside = "[^\\s\\x{85}]";
          break;
        case 'w':
          outside = "[\\p{L}\\p{M}\\p{N}\\p{Pc}]";
          inside = "\\p{L}\\p{M}\\p{N}\\p{Pc}";
          break;
        case 'W':
          outside = "[^\\p{L}\\p{M}\\p{N}\\p{Pc}]";
          break;
        case 'h':
          outside = "[0-9A-Fa-f]";
          inside = "0-9A-Fa-f";
          break;
        case 'H':
          outside = "[^0-9A-Fa-f]";
          break;
        default:
          break;
      }
      if (!in_class && outside != nullptr) {
        out += outside;
      } else if (in_class && inside != nullptr) {
        out += inside;
      } else {
        out += c;
        out += e;
      }
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      class_start = i + 1;
      continue;
    }
    if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {
      const size_t close = p.find(":]", i + 2);
      if (close != std::string_view::npos) {
        out.append(p.substr(i, close + 2 - i));
        i = close + 1;
        continue;
      }
    }
    if (in_class && c == ']' && i != class_start) in_class = false;
    out += c;
  }
  return out;
}

StatusOr<void*> compile_pcre2(const std::string& pattern, std::string_view shown) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return DataLoss("regex \"", shown, "\" does not compile (", reinterpret_cast<char*>(message),
                    " at offset ", offset, ")");
  }
  // JIT where the platform has it; the interpreter otherwise (same matches).
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return static_cast<void*>(code);
}

// One match-data block per thread (only the whole match's offsets are read).
pcre2_match_data* thread_match_data() {
  struct Holder {
    pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
    ~Holder() { pcre2_match_data_free(md); }
  };
  thread_local Holder holder;
  return holder.md;
}

}  // namespace

Regex::~Regex() { pcre2_code_free(as_code(code_)); }

StatusOr<std::unique_ptr<Regex>> Regex::compile(std::string_view pattern) {
  std::unique_ptr<Regex> re(new Regex());
  re->pattern_ = std::string(pattern);
  AX_ASSIGN_OR_RETURN(re->code_, compile_pcre2(onig_to_pcre2(pattern), pattern));
  return re;
}

StatusOr<std::unique_ptr<Regex>> Regex::literal(std::string_view text) {
  // Every character that is not a letter or digit escaped (a backslash before any ASCII
  // punctuation is a literal in PCRE2; non-ASCII characters are literals as they are).
  std::string escaped;
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u)) {
      if (c == '\n') {
        escaped += "\\n";
        continue;
      }
      if (u < 0x20 || u == 0x7F) {
        escaped += str_cat("\\x{", std::hex, static_cast<int>(u), "}");
        continue;
      }
      escaped += '\\';
    }
    escaped += c;
  }
  std::unique_ptr<Regex> re(new Regex());
  re->pattern_ = std::string(text);
  AX_ASSIGN_OR_RETURN(re->code_, compile_pcre2(escaped, text));
  return re;
}

Status Regex::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>* out) const {
  out->clear();
  pcre2_match_data* md = thread_match_data();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  std::optional<size_t> last_match_end;
  while (start <= text.size()) {
    const int rc =
        pcre2_match(as_code(code_), subject, text.size(), start, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      return Internal("regex \"", pattern_, "\": ", reinterpret_cast<char*>(message));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t s = ov[0], e = ov[1];
    if (s == e) {
      // An empty match: the next search starts one character on; one right after the previous
      // match is not reported.
      start = e < text.size() ? e + char_len(static_cast<unsigned char>(text[e])) : e + 1;
      if (last_match_end == e) continue;
    } else {
      start = e;
    }
    last_match_end = e;
    out->emplace_back(s, e);
  }
  return Status::Ok();
}

Status regex_segments(const Regex& re, std::string_view text, std::vector<Segment>* out) {
  out->clear();
  if (text.empty()) {
    out->push_back({0, 0, false});
    return Status::Ok();
  }
  std::vector<std::pair<size_t, size_t>> matches;
  AX_RETURN_IF_ERROR(re.find_all(text, &matches));
  size_t prev = 0;
  for (const auto& [s, e] : matches) {
    if (prev != s) out->push_back({prev, s, false});
    out->push_back({s, e, true});
    prev = e;
  }
  if (prev != text.size()) out->push_back({prev, text.size(), false});
  return Status::Ok();
}

std::vector<std::pair<size_t, size_t>> apply_behavior(std::vector<Segment> segments,
                                                      SplitBehavior behavior) {
  std::vector<std::pair<size_t, size_t>> out;
  out.reserve(segments.size());
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const Segment& s : segments) out.emplace_back(s.start, s.end);
      break;
    case SplitBehavior::kRemoved:
      for (const Segment& s : segments) {
        if (!s.is_match) out.emplace_back(s.start, s.end);
      }
      break;
    case SplitBehavior::kContiguous: {
      bool previous = false;
      for (const Segment& s : segments) {
        if (s.is_match == previous && !out.empty()) {
          out.back().second = s.end;
        } else {
          out.emplace_back(s.start, s.end);
        }
        previous = s.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool previous = false;
      for (const Segment& s : segments) {
        if (s.is_match && !previous && !out.empty()) {
          out.back().second = s.end;
        } else {
          out.emplace_back(s.start, s.end);
        }
        previous = s.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool previous = false;
      for (auto it = segments.rbegin(); it != segments.rend(); ++it) {
        if (it->is_match && !previous && !out.empty()) {
          out.back().first = it->start;
        } else {
          out.emplace_back(it->start, it->end);
        }
        previous = it->is_match;
      }
      std::reverse(out.begin(), out.end());
      break;
    }
  }
  return out;
}

StatusOr<SplitBehavior> parse_split_behavior(const Json& j, const std::string& where) {
  AX_ASSIGN_OR_RETURN(std::string b, json_string(j, "behavior", where));
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  return unsupported(where + ".behavior", "behavior", b,
                     "Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
}

}  // namespace ax::data::hf
