// tokenizer.json decoders (the crate's decoders/): ByteLevel, Metaspace, ByteFallback, Fuse,
// Strip, Replace, BPEDecoder and Sequence, each turning the list of token strings into another
// list; the decoded text is the final list joined. WordPiece and CTC are refused.
#include "hf_pipeline.h"

namespace ax::data::hf {
namespace {

constexpr const char* kSupportedDecoders =
    "ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, BPEDecoder, Sequence";

// Tokens whose characters are all byte-level characters become their bytes, others their UTF-8;
// the whole is one string read as Rust's from_utf8_lossy reads it.
class ByteLevelDecoder : public Decoder {
 public:
  Status decode_chain(std::vector<std::string>* tokens) const override {
    std::string bytes;
    std::string token_bytes;
    for (const std::string& t : *tokens) {
      token_bytes.clear();
      bool all = true;
      size_t pos = 0;
      while (pos < t.size()) {
        const int b = byte_level_byte(next_char(t, &pos));
        if (b < 0) {
          all = false;
          break;
        }
        token_bytes.push_back(static_cast<char>(b));
      }
      bytes += all ? token_bytes : t;
    }
    tokens->assign(1, utf8_lossy(bytes));
    return Status::Ok();
  }
};

enum class DecoderPrepend { kAlways, kFirst, kNever };

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(char32_t replacement, DecoderPrepend scheme)
      : replacement_(replacement), scheme_(scheme) {}
  Status decode_chain(std::vector<std::string>* tokens) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      const std::string& t = (*tokens)[i];
      std::string out;
      out.reserve(t.size());
      size_t pos = 0;
      while (pos < t.size()) {
        const size_t start = pos;
        const char32_t c = next_char(t, &pos);
        if (c == replacement_) {
          if (!(i == 0 && scheme_ != DecoderPrepend::kNever)) out += ' ';
        } else {
          out.append(t, start, pos - start);
        }
      }
      (*tokens)[i] = std::move(out);
    }
    return Status::Ok();
  }

 private:
  char32_t replacement_;
  DecoderPrepend scheme_;
};

// Runs of <0xNN> tokens become their bytes as text, or one U+FFFD per byte when not UTF-8.
class ByteFallbackDecoder : public Decoder {
 public:
  Status decode_chain(std::vector<std::string>* tokens) const override {
    std::vector<std::string> out;
    std::string bytes;
    auto flush = [&] {
      if (bytes.empty()) return;
      if (invalid_utf8_at(bytes) == std::string_view::npos) {
        out.push_back(bytes);
      } else {
        for (size_t k = 0; k < bytes.size(); ++k) out.emplace_back("\xEF\xBF\xBD");
      }
      bytes.clear();
    };
    for (std::string& t : *tokens) {
      int value = -1;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>')
        value = parse_hex_byte(t[3], t[4]);
      if (value >= 0) {
        bytes.push_back(static_cast<char>(value));
        continue;
      }
      flush();
      out.push_back(std::move(t));
    }
    flush();
    *tokens = std::move(out);
    return Status::Ok();
  }

 private:
  // Rust's u8::from_str_radix(s, 16) on two bytes: two hex digits, or '+' and one.
  static int parse_hex_byte(char a, char b) {
    auto digit = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    if (a == '+') return digit(b);
    const int hi = digit(a), lo = digit(b);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
  }
};

class FuseDecoder : public Decoder {
 public:
  Status decode_chain(std::vector<std::string>* tokens) const override {
    std::string joined;
    for (const std::string& t : *tokens) joined += t;
    tokens->assign(1, std::move(joined));
    return Status::Ok();
  }
};

// Up to `start` leading and `stop` trailing `content` characters removed from each token.
class StripDecoder : public Decoder {
 public:
  StripDecoder(char32_t content, uint64_t start, uint64_t stop)
      : content_(content), start_(start), stop_(stop) {}
  Status decode_chain(std::vector<std::string>* tokens) const override {
    for (std::string& t : *tokens) {
      std::vector<std::pair<size_t, char32_t>> chars;  // (byte offset, char)
      for (size_t pos = 0; pos < t.size();) {
        const size_t at = pos;
        chars.emplace_back(at, next_char(t, &pos));
      }
      size_t start_cut = 0;
      for (size_t i = 0; i < chars.size() && i < start_; ++i) {
        if (chars[i].second != content_) break;
        start_cut = i + 1;
      }
      size_t stop_cut = chars.size();
      for (size_t i = 0; i < stop_ && i < chars.size(); ++i) {
        const size_t index = chars.size() - i - 1;
        if (chars[index].second != content_) break;
        stop_cut = index;
      }
      if (stop_cut < start_cut) stop_cut = start_cut;
      const size_t b = start_cut < chars.size() ? chars[start_cut].first : t.size();
      const size_t e = stop_cut < chars.size() ? chars[stop_cut].first : t.size();
      t = t.substr(b, e - b);
    }
    return Status::Ok();
  }

 private:
  char32_t content_;
  uint64_t start_, stop_;
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(std::unique_ptr<Regex> re, std::string content)
      : re_(std::move(re)), content_(std::move(content)) {}
  Status decode_chain(std::vector<std::string>* tokens) const override {
    std::vector<Segment> segments;
    for (std::string& t : *tokens) {
      AX_RETURN_IF_ERROR(regex_segments(*re_, t, &segments));
      std::string out;
      for (const Segment& s : segments) {
        if (s.is_match) {
          out += content_;
        } else {
          out.append(t, s.start, s.end - s.start);
        }
      }
      t = std::move(out);
    }
    return Status::Ok();
  }

 private:
  std::unique_ptr<Regex> re_;
  std::string content_;
};

// The end-of-word suffix becomes a space, and nothing in the last token.
class BpeSuffixDecoder : public Decoder {
 public:
  explicit BpeSuffixDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  Status decode_chain(std::vector<std::string>* tokens) const override {
    if (suffix_.empty()) return Status::Ok();
    for (size_t i = 0; i < tokens->size(); ++i) {
      const std::string with = i + 1 == tokens->size() ? "" : " ";
      std::string& t = (*tokens)[i];
      std::string out;
      size_t pos = 0;
      for (size_t hit; (hit = t.find(suffix_, pos)) != std::string::npos;
           pos = hit + suffix_.size()) {
        out.append(t, pos, hit - pos);
        out += with;
      }
      out.append(t, pos, std::string::npos);
      t = std::move(out);
    }
    return Status::Ok();
  }

 private:
  std::string suffix_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts)
      : parts_(std::move(parts)) {}
  Status decode_chain(std::vector<std::string>* tokens) const override {
    for (const auto& d : parts_) AX_RETURN_IF_ERROR(d->decode_chain(tokens));
    return Status::Ok();
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

}  // namespace

StatusOr<std::unique_ptr<Decoder>> parse_decoder(const Json& j, const std::string& where) {
  AX_ASSIGN_OR_RETURN(std::string type, component_type(j, where));
  if (type == "ByteLevel") return made<Decoder, ByteLevelDecoder>();
  if (type == "Metaspace") {
    AX_ASSIGN_OR_RETURN(char32_t replacement, json_char(j, "replacement", where));
    DecoderPrepend scheme = DecoderPrepend::kAlways;
    AX_ASSIGN_OR_RETURN(std::optional<std::string> name,
                        json_optional_string(j, "prepend_scheme", where));
    if (name) {
      if (*name == "first") {
        scheme = DecoderPrepend::kFirst;
      } else if (*name == "never") {
        scheme = DecoderPrepend::kNever;
      } else if (*name != "always") {
        return unsupported(where + ".prepend_scheme", "prepend_scheme", *name,
                           "always, first, never");
      }
    }
    auto legacy = j.find("add_prefix_space");
    if (legacy != j.end() && legacy->is_boolean() && !legacy->get<bool>()) {
      if (scheme != DecoderPrepend::kNever) {
        return DataLoss(where, ": add_prefix_space false does not match prepend_scheme");
      }
    }
    return made<Decoder, MetaspaceDecoder>(replacement, scheme);
  }
  if (type == "ByteFallback") return made<Decoder, ByteFallbackDecoder>();
  if (type == "Fuse") return made<Decoder, FuseDecoder>();
  if (type == "Strip") {
    AX_ASSIGN_OR_RETURN(char32_t content, json_char(j, "content", where));
    AX_ASSIGN_OR_RETURN(uint64_t start, json_uint(j, "start", where));
    AX_ASSIGN_OR_RETURN(uint64_t stop, json_uint(j, "stop", where));
    return made<Decoder, StripDecoder>(content, start, stop);
  }
  if (type == "Replace") {
    AX_ASSIGN_OR_RETURN(std::unique_ptr<Regex> re, json_pattern(j, "pattern", where));
    AX_ASSIGN_OR_RETURN(std::string content, json_string(j, "content", where));
    return made<Decoder, ReplaceDecoder>(std::move(re), std::move(content));
  }
  if (type == "BPEDecoder") {
    AX_ASSIGN_OR_RETURN(std::optional<std::string> suffix,
                        json_optional_string(j, "suffix", where));
    return made<Decoder, BpeSuffixDecoder>(suffix.value_or("</w>"));
  }
  if (type == "Sequence") {
    auto it = j.find("decoders");
    if (it == j.end() || !it->is_array()) return DataLoss(where, ".decoders: expected an array");
    std::vector<std::unique_ptr<Decoder>> parts;
    for (size_t i = 0; i < it->size(); ++i) {
      AX_ASSIGN_OR_RETURN(std::unique_ptr<Decoder> part,
                          parse_decoder((*it)[i], str_cat(where, ".decoders[", i, "]")));
      parts.push_back(std::move(part));
    }
    return made<Decoder, SequenceDecoder>(std::move(parts));
  }
  return unsupported(where, "decoder", type, kSupportedDecoders);
}

}  // namespace ax::data::hf
