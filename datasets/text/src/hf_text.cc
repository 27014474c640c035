// Text and JSON helpers of the Hugging Face pipeline: UTF-8, the character classes the Rust
// crate asks of `char`, GPT-2's byte-level alphabet, base64, and typed reads of component fields.
#include <utf8proc.h>

#include <string>

#include "hf_pipeline.h"

namespace ax::data::hf {

size_t char_len(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xF0) return 4;
  if (lead >= 0xE0) return 3;
  return 2;
}

size_t invalid_utf8_at(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char b = p[i];
    if (b < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) {
      len = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
      len = 3;
      if (b == 0xE0) lo = 0xA0;
      if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      len = 4;
      if (b == 0xF0) lo = 0x90;
      if (b == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    if (i + len > n || p[i + 1] < lo || p[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return i;
    }
    i += len;
  }
  return std::string_view::npos;
}

char32_t next_char(std::string_view s, size_t* pos) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + *pos;
  const unsigned char b = p[0];
  if (b < 0x80) {
    *pos += 1;
    return b;
  }
  if (b < 0xE0) {
    *pos += 2;
    return (static_cast<char32_t>(b & 0x1F) << 6) | (p[1] & 0x3F);
  }
  if (b < 0xF0) {
    *pos += 3;
    return (static_cast<char32_t>(b & 0x0F) << 12) | (static_cast<char32_t>(p[1] & 0x3F) << 6) |
           (p[2] & 0x3F);
  }
  *pos += 4;
  return (static_cast<char32_t>(b & 0x07) << 18) | (static_cast<char32_t>(p[1] & 0x3F) << 12) |
         (static_cast<char32_t>(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
}

bool is_white_space(char32_t cp) {
  // Unicode's White_Space property (PropList.txt): stable, 25 code points.
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

bool is_numeric(char32_t cp) {
  const utf8proc_category_t c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

bool is_word_char(char32_t cp) {
  if (cp == 0x200C || cp == 0x200D) return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char b = p[i];
    if (b < 0x80) {
      out.push_back(static_cast<char>(b));
      ++i;
      continue;
    }
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) {
      len = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
      len = 3;
      if (b == 0xE0) lo = 0xA0;
      if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      len = 4;
      if (b == 0xF0) lo = 0x90;
      if (b == 0xF4) hi = 0x8F;
    }
    // The maximal prefix of a well-formed sequence is replaced by one U+FFFD.
    size_t k = i + 1;
    bool ok = len > 0;
    if (ok) {
      if (k < n && p[k] >= lo && p[k] <= hi) {
        ++k;
        while (k < i + len && k < n && (p[k] & 0xC0) == 0x80) ++k;
        ok = k == i + len;
      } else {
        ok = false;
      }
    }
    if (ok) {
      out.append(bytes.substr(i, len));
    } else {
      out += "\xEF\xBF\xBD";
    }
    i = k;
  }
  return out;
}

namespace {

struct ByteLevelTables {
  std::array<std::string, 256> chars;
  std::array<int, 512> bytes{};  // code point (< 512) -> byte, or -1
  ByteLevelTables() {
    bytes.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool self = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      const char32_t cp = self ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      append_utf8(cp, &chars[b]);
      bytes[cp] = b;
    }
  }
};

const ByteLevelTables& byte_level_tables() {
  static const ByteLevelTables tables;
  return tables;
}

}  // namespace

const std::array<std::string, 256>& byte_level_chars() { return byte_level_tables().chars; }

int byte_level_byte(char32_t cp) { return cp < 512 ? byte_level_tables().bytes[cp] : -1; }

StatusOr<std::string> base64_decode(std::string_view text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  if (text.size() % 4 != 0)
    return DataLoss("base64 of length ", text.size(), " (not a multiple of 4)");
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = text[i + k];
      if (c == '=' && i + 4 == text.size() && k >= 2) {
        v[k] = 0;
        ++pad;
        continue;
      }
      if (pad > 0 || (v[k] = value(c)) < 0) return DataLoss("invalid base64 at character ", i + k);
    }
    const uint32_t w = (static_cast<uint32_t>(v[0]) << 18) | (static_cast<uint32_t>(v[1]) << 12) |
                       (static_cast<uint32_t>(v[2]) << 6) | static_cast<uint32_t>(v[3]);
    out.push_back(static_cast<char>(w >> 16));
    if (pad < 2) out.push_back(static_cast<char>((w >> 8) & 0xFF));
    if (pad < 1) out.push_back(static_cast<char>(w & 0xFF));
  }
  return out;
}

// ---- JSON fields ----

Status unsupported(const std::string& where, std::string_view what, std::string_view type,
                   std::string_view supported) {
  return Unimplemented(where, ": ", what, " \"", type,
                       "\" is not supported (supported: ", supported, ")");
}

StatusOr<std::string> component_type(const Json& j, const std::string& where) {
  if (!j.is_object()) return DataLoss(where, ": expected an object, found ", j.type_name());
  auto it = j.find("type");
  if (it == j.end() || !it->is_string()) return DataLoss(where, ": no \"type\" string");
  return it->get<std::string>();
}

StatusOr<bool> json_bool(const Json& j, const char* key, bool fallback, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return DataLoss(where, ".", key, ": expected true or false");
  return it->get<bool>();
}

StatusOr<std::string> json_string(const Json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return DataLoss(where, ".", key, ": expected a string");
  return it->get<std::string>();
}

StatusOr<std::optional<std::string>> json_optional_string(const Json& j, const char* key,
                                                          const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::optional<std::string>();
  if (!it->is_string()) return DataLoss(where, ".", key, ": expected a string or null");
  return std::optional<std::string>(it->get<std::string>());
}

StatusOr<uint64_t> json_uint(const Json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_unsigned()) {
    return DataLoss(where, ".", key, ": expected a non-negative integer");
  }
  return it->get<uint64_t>();
}

StatusOr<char32_t> json_char(const Json& j, const char* key, const std::string& where) {
  AX_ASSIGN_OR_RETURN(std::string s, json_string(j, key, where));
  if (s.empty() || invalid_utf8_at(s) != std::string_view::npos) {
    return DataLoss(where, ".", key, ": expected one character");
  }
  size_t pos = 0;
  const char32_t c = next_char(s, &pos);
  if (pos != s.size())
    return DataLoss(where, ".", key, ": expected one character, not \"", s, "\"");
  return c;
}

StatusOr<std::unique_ptr<Regex>> json_pattern(const Json& j, const char* key,
                                              const std::string& where) {
  auto it = j.find(key);
  const std::string field = str_cat(where, ".", key);
  if (it == j.end() || !it->is_object() || it->size() != 1) {
    return DataLoss(field, ": expected {\"String\": ...} or {\"Regex\": ...}");
  }
  const std::string kind = it->begin().key();
  const Json& value = it->begin().value();
  if (!value.is_string()) return DataLoss(field, ".", kind, ": expected a string");
  StatusOr<std::unique_ptr<Regex>> re =
      kind == "String"  ? Regex::literal(value.get<std::string>())
      : kind == "Regex" ? Regex::compile(value.get<std::string>())
                        : StatusOr<std::unique_ptr<Regex>>(DataLoss(field, ": \"", kind,
                                                                    "\" is neither String "
                                                                    "nor Regex"));
  if (!re.ok()) return re.status().with_context(field);
  return re;
}

}  // namespace ax::data::hf
