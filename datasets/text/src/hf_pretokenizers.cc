// tokenizer.json pre-tokenizers (the crate's pre_tokenizers/): ByteLevel, Split, Metaspace,
// Digits, Whitespace, WhitespaceSplit and Sequence. BertPreTokenizer, Punctuation,
// CharDelimiterSplit, UnicodeScripts and FixedLength are refused.
#include "hf_pipeline.h"

namespace ax::data::hf {
namespace {

constexpr const char* kSupportedPreTokenizers =
    "ByteLevel, Split, Metaspace, Digits, Whitespace, WhitespaceSplit, Sequence";

// GPT-2's pattern (byte_level.rs).
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// PreTokenizedString::split: every piece that is not an added token is replaced by the pieces
// `split_one` makes of it; empty pieces are dropped.
template <typename Fn>
Status split_pieces(std::vector<Piece>* pieces, Fn split_one) {
  std::vector<Piece> out;
  out.reserve(pieces->size());
  std::vector<std::pair<size_t, size_t>> ranges;
  for (Piece& piece : *pieces) {
    if (piece.token >= 0) {
      out.push_back(std::move(piece));
      continue;
    }
    ranges.clear();
    AX_RETURN_IF_ERROR(split_one(&piece, &ranges));
    for (const auto& [s, e] : ranges) {
      if (s == e) continue;
      Piece p;
      p.text = piece.text.substr(s, e - s);
      p.at_origin = piece.at_origin && s == 0;
      out.push_back(std::move(p));
    }
  }
  *pieces = std::move(out);
  return Status::Ok();
}

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::unique_ptr<Regex> re)
      : add_prefix_space_(add_prefix_space), re_(std::move(re)) {}

  // Splits each piece by GPT-2's pattern and maps its bytes to GPT-2's characters in one pass
  // (the crate splits, then maps: the same pieces).
  Status pre_tokenize(std::vector<Piece>* pieces) const override {
    const auto& chars = byte_level_chars();
    std::vector<Piece> out;
    out.reserve(pieces->size());
    std::vector<Segment> segments;
    std::string prefixed;
    for (Piece& piece : *pieces) {
      if (piece.token >= 0) {
        out.push_back(std::move(piece));
        continue;
      }
      std::string_view text = piece.text;
      if (add_prefix_space_ && (text.empty() || text[0] != ' ')) {
        prefixed.assign(" ");
        prefixed.append(text);
        text = prefixed;
      }
      if (re_ == nullptr) {
        segments.assign(1, Segment{0, text.size(), true});
      } else {
        AX_RETURN_IF_ERROR(regex_segments(*re_, text, &segments));
      }
      for (const Segment& seg : segments) {  // Isolated: every segment is a piece
        if (seg.start == seg.end) continue;
        Piece& p = out.emplace_back();
        p.at_origin = piece.at_origin && seg.start == 0;
        size_t n = 0;
        for (size_t i = seg.start; i < seg.end; ++i) {
          n += chars[static_cast<unsigned char>(text[i])].size();
        }
        p.text.resize(n);
        char* dst = p.text.data();
        for (size_t i = seg.start; i < seg.end; ++i) {
          const std::string& c = chars[static_cast<unsigned char>(text[i])];
          for (char b : c) *dst++ = b;
        }
      }
    }
    *pieces = std::move(out);
    return Status::Ok();
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> re_;  // null: use_regex false
};

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(std::unique_ptr<Regex> re, SplitBehavior behavior, bool invert)
      : re_(std::move(re)), behavior_(behavior), invert_(invert) {}

  Status pre_tokenize(std::vector<Piece>* pieces) const override {
    std::vector<Segment> segments;
    return split_pieces(pieces, [&](Piece* p, std::vector<std::pair<size_t, size_t>>* r) {
      AX_RETURN_IF_ERROR(regex_segments(*re_, p->text, &segments));
      if (invert_) {
        for (Segment& s : segments) s.is_match = !s.is_match;
      }
      *r = apply_behavior(segments, behavior_);
      return Status::Ok();
    });
  }

 private:
  std::unique_ptr<Regex> re_;
  SplitBehavior behavior_;
  bool invert_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(char32_t replacement, PrependScheme scheme, bool split)
      : replacement_(replacement), scheme_(scheme), split_(split) {
    append_utf8(replacement, &rep_);
  }

  Status pre_tokenize(std::vector<Piece>* pieces) const override {
    std::vector<Segment> segments;
    return split_pieces(pieces, [&](Piece* p, std::vector<std::pair<size_t, size_t>>* r) {
      if (p->text.find(' ') != std::string::npos) {
        std::string replaced;
        replaced.reserve(p->text.size() + 8);
        for (char c : p->text) {
          if (c == ' ') {
            replaced += rep_;
          } else {
            replaced += c;
          }
        }
        p->text = std::move(replaced);
      }
      const bool starts = p->text.compare(0, rep_.size(), rep_) == 0;
      if ((scheme_ == PrependScheme::kAlways && !starts) ||
          (scheme_ == PrependScheme::kFirst && !starts && p->at_origin)) {
        p->text.insert(0, rep_);
      }
      if (!split_) {
        r->emplace_back(0, p->text.size());
        return Status::Ok();
      }
      char_segments(
          p->text, [&](char32_t c) { return c == replacement_; }, &segments);
      *r = apply_behavior(segments, SplitBehavior::kMergedWithNext);
      return Status::Ok();
    });
  }

 private:
  char32_t replacement_;
  std::string rep_;
  PrependScheme scheme_;
  bool split_;
};

class DigitsPreTokenizer : public PreTokenizer {
 public:
  explicit DigitsPreTokenizer(bool individual) : individual_(individual) {}
  Status pre_tokenize(std::vector<Piece>* pieces) const override {
    std::vector<Segment> segments;
    return split_pieces(pieces, [&](Piece* p, std::vector<std::pair<size_t, size_t>>* r) {
      char_segments(p->text, is_numeric, &segments);
      *r = apply_behavior(segments,
                          individual_ ? SplitBehavior::kIsolated : SplitBehavior::kContiguous);
      return Status::Ok();
    });
  }

 private:
  bool individual_;
};

class WhitespaceSplitPreTokenizer : public PreTokenizer {
 public:
  Status pre_tokenize(std::vector<Piece>* pieces) const override {
    std::vector<Segment> segments;
    return split_pieces(pieces, [&](Piece* p, std::vector<std::pair<size_t, size_t>>* r) {
      char_segments(p->text, is_white_space, &segments);
      *r = apply_behavior(segments, SplitBehavior::kRemoved);
      return Status::Ok();
    });
  }
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts)
      : parts_(std::move(parts)) {}
  Status pre_tokenize(std::vector<Piece>* pieces) const override {
    for (const auto& p : parts_) AX_RETURN_IF_ERROR(p->pre_tokenize(pieces));
    return Status::Ok();
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

}  // namespace

StatusOr<std::unique_ptr<PreTokenizer>> parse_pre_tokenizer(const Json& j,
                                                            const std::string& where) {
  AX_ASSIGN_OR_RETURN(std::string type, component_type(j, where));
  if (type == "ByteLevel") {
    AX_ASSIGN_OR_RETURN(bool prefix, json_bool(j, "add_prefix_space", true, where));
    AX_ASSIGN_OR_RETURN(bool use_regex, json_bool(j, "use_regex", true, where));
    std::unique_ptr<Regex> re;
    if (use_regex) {
      AX_ASSIGN_OR_RETURN(re, Regex::compile(kGpt2Pattern));
    }
    return made<PreTokenizer, ByteLevelPreTokenizer>(prefix, std::move(re));
  }
  if (type == "Split") {
    AX_ASSIGN_OR_RETURN(std::unique_ptr<Regex> re, json_pattern(j, "pattern", where));
    AX_ASSIGN_OR_RETURN(SplitBehavior behavior, parse_split_behavior(j, where));
    AX_ASSIGN_OR_RETURN(bool invert, json_bool(j, "invert", false, where));
    return made<PreTokenizer, SplitPreTokenizer>(std::move(re), behavior, invert);
  }
  if (type == "Metaspace") {
    AX_ASSIGN_OR_RETURN(char32_t replacement, json_char(j, "replacement", where));
    PrependScheme scheme = PrependScheme::kAlways;
    AX_ASSIGN_OR_RETURN(std::optional<std::string> name,
                        json_optional_string(j, "prepend_scheme", where));
    if (name) {
      if (*name == "always") {
        scheme = PrependScheme::kAlways;
      } else if (*name == "first") {
        scheme = PrependScheme::kFirst;
      } else if (*name == "never") {
        scheme = PrependScheme::kNever;
      } else {
        return unsupported(where + ".prepend_scheme", "prepend_scheme", *name,
                           "always, first, never");
      }
    }
    // Files from before prepend_scheme: add_prefix_space false means "never" (and contradicts
    // any other scheme, which the crate refuses too).
    auto legacy = j.find("add_prefix_space");
    if (legacy != j.end() && legacy->is_boolean() && !legacy->get<bool>()) {
      if (scheme != PrependScheme::kNever) {
        return DataLoss(where, ": add_prefix_space false does not match prepend_scheme");
      }
    }
    AX_ASSIGN_OR_RETURN(bool split, json_bool(j, "split", true, where));
    return made<PreTokenizer, MetaspacePreTokenizer>(replacement, scheme, split);
  }
  if (type == "Digits") {
    AX_ASSIGN_OR_RETURN(bool individual, json_bool(j, "individual_digits", false, where));
    return made<PreTokenizer, DigitsPreTokenizer>(individual);
  }
  if (type == "WhitespaceSplit") return made<PreTokenizer, WhitespaceSplitPreTokenizer>();
  if (type == "Whitespace") {
    // \w+|[^\w\s]+, the text between matches removed (whitespace.rs). This one is the regex
    // crate's, not Oniguruma's: its \w is Alphabetic, marks, decimal digits, connector
    // punctuation and the joiners.
    AX_ASSIGN_OR_RETURN(std::unique_ptr<Regex> re,
                        Regex::compile(R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}]+|)"
                                       R"([^\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}\s]+)"));
    return made<PreTokenizer, SplitPreTokenizer>(std::move(re), SplitBehavior::kRemoved, true);
  }
  if (type == "Sequence") {
    auto it = j.find("pretokenizers");
    if (it == j.end() || !it->is_array()) {
      return DataLoss(where, ".pretokenizers: expected an array");
    }
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (size_t i = 0; i < it->size(); ++i) {
      AX_ASSIGN_OR_RETURN(std::unique_ptr<PreTokenizer> part,
                          parse_pre_tokenizer((*it)[i], str_cat(where, ".pretokenizers[", i, "]")));
      parts.push_back(std::move(part));
    }
    return made<PreTokenizer, SequencePreTokenizer>(std::move(parts));
  }
  return unsupported(where, "pre-tokenizer", type, kSupportedPreTokenizers);
}

}  // namespace ax::data::hf
