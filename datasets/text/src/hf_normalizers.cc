// tokenizer.json normalizers (the crate's normalizers/): NFC, NFD, NFKC, NFKD (Unicode
// normalization by Debian's utf8proc), Prepend, Replace, Strip, ByteLevel, Precompiled
// (hf_precompiled.cc) and Sequence. Lowercase, StripAccents, Nmt and BertNormalizer are refused.
#include <utf8proc.h>

#include <cstdlib>

#include "hf_pipeline.h"

namespace ax::data::hf {
namespace {

constexpr const char* kSupportedNormalizers =
    "NFC, NFD, NFKC, NFKD, Prepend, Replace, Strip, ByteLevel, Precompiled, Sequence";

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(int options) : options_(options) {}
  Status normalize(std::string* text) const override {
    if (text->empty()) return Status::Ok();
    utf8proc_uint8_t* out = nullptr;
    const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text->data()),
                                            static_cast<utf8proc_ssize_t>(text->size()), &out,
                                            static_cast<utf8proc_option_t>(options_));
    if (n < 0) {
      return InvalidArgument("Unicode normalization failed: ", utf8proc_errmsg(n));
    }
    text->assign(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
    std::free(out);
    return Status::Ok();
  }

 private:
  int options_;
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  Status normalize(std::string* text) const override {
    if (!text->empty()) text->insert(0, prefix_);
    return Status::Ok();
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(std::unique_ptr<Regex> re, std::string content)
      : re_(std::move(re)), content_(std::move(content)) {}
  Status normalize(std::string* text) const override {
    std::vector<Segment> segments;
    AX_RETURN_IF_ERROR(regex_segments(*re_, *text, &segments));
    std::string out;
    out.reserve(text->size());
    for (const Segment& s : segments) {
      if (s.is_match) {
        out += content_;
      } else {
        out.append(*text, s.start, s.end - s.start);
      }
    }
    *text = std::move(out);
    return Status::Ok();
  }

 private:
  std::unique_ptr<Regex> re_;
  std::string content_;
};

class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  Status normalize(std::string* text) const override {
    size_t begin = 0, end = text->size();
    if (left_) {
      size_t pos = 0;
      while (pos < end) {
        size_t next = pos;
        if (!is_white_space(next_char(*text, &next))) break;
        pos = next;
      }
      begin = pos;
    }
    if (right_) {
      while (end > begin) {
        size_t start = end - 1;
        while (start > begin && (static_cast<unsigned char>((*text)[start]) & 0xC0) == 0x80)
          --start;
        size_t next = start;
        if (!is_white_space(next_char(*text, &next))) break;
        end = start;
      }
    }
    *text = text->substr(begin, end - begin);
    return Status::Ok();
  }

 private:
  bool left_, right_;
};

// Each byte of the text becomes its GPT-2 byte-level character.
class ByteLevelNormalizer : public Normalizer {
 public:
  Status normalize(std::string* text) const override {
    const auto& chars = byte_level_chars();
    std::string out;
    out.reserve(text->size() * 2);
    for (char c : *text) out += chars[static_cast<unsigned char>(c)];
    *text = std::move(out);
    return Status::Ok();
  }
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts)
      : parts_(std::move(parts)) {}
  Status normalize(std::string* text) const override {
    for (const auto& n : parts_) AX_RETURN_IF_ERROR(n->normalize(text));
    return Status::Ok();
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

StatusOr<std::unique_ptr<Normalizer>> parse_normalizer(const Json& j, const std::string& where) {
  AX_ASSIGN_OR_RETURN(std::string type, component_type(j, where));
  const int stable = UTF8PROC_STABLE;
  if (type == "NFC") return made<Normalizer, UnicodeNormalizer>(stable | UTF8PROC_COMPOSE);
  if (type == "NFD") return made<Normalizer, UnicodeNormalizer>(stable | UTF8PROC_DECOMPOSE);
  if (type == "NFKC") {
    return made<Normalizer, UnicodeNormalizer>(stable | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
  }
  if (type == "NFKD") {
    return made<Normalizer, UnicodeNormalizer>(stable | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
  }
  if (type == "Prepend") {
    AX_ASSIGN_OR_RETURN(std::string prefix, json_string(j, "prepend", where));
    return made<Normalizer, PrependNormalizer>(std::move(prefix));
  }
  if (type == "Replace") {
    AX_ASSIGN_OR_RETURN(std::unique_ptr<Regex> re, json_pattern(j, "pattern", where));
    AX_ASSIGN_OR_RETURN(std::string content, json_string(j, "content", where));
    return made<Normalizer, ReplaceNormalizer>(std::move(re), std::move(content));
  }
  if (type == "Strip") {
    AX_ASSIGN_OR_RETURN(bool left, json_bool(j, "strip_left", false, where));
    AX_ASSIGN_OR_RETURN(bool right, json_bool(j, "strip_right", false, where));
    return made<Normalizer, StripNormalizer>(left, right);
  }
  if (type == "ByteLevel") return made<Normalizer, ByteLevelNormalizer>();
  if (type == "Precompiled") return parse_precompiled(j, where);
  if (type == "Sequence") {
    auto it = j.find("normalizers");
    if (it == j.end() || !it->is_array()) return DataLoss(where, ".normalizers: expected an array");
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (size_t i = 0; i < it->size(); ++i) {
      AX_ASSIGN_OR_RETURN(std::unique_ptr<Normalizer> part,
                          parse_normalizer((*it)[i], str_cat(where, ".normalizers[", i, "]")));
      parts.push_back(std::move(part));
    }
    return made<Normalizer, SequenceNormalizer>(std::move(parts));
  }
  return unsupported(where, "normalizer", type, kSupportedNormalizers);
}

}  // namespace ax::data::hf
