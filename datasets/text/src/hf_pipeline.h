// The components of a Hugging Face tokenizer.json pipeline, as the Rust `tokenizers` crate
// (0.22) runs them: normalizers, pre-tokenizers, the BPE and Unigram models, decoders, and the
// text helpers they share. Each component's behaviour is the crate's, down to its quirks; the
// file of each says which of the crate's sources it follows. What is supported and what is
// refused: docs/tokenization.md "Hugging Face tokenizer.json".
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ax/common/status.h"
#include "ax/datasets/text/text_source.h"  // append_utf8

namespace ax::data::hf {

using Json = nlohmann::json;

// ---- Text (hf_text.cc) ----

// Byte offset of the first byte that is not part of well-formed UTF-8, or npos.
size_t invalid_utf8_at(std::string_view s);
// The code point at s[*pos] (s is valid UTF-8); advances *pos past it.
char32_t next_char(std::string_view s, size_t* pos);
// Length in bytes of the UTF-8 character starting with this byte.
size_t char_len(unsigned char lead);
// Rust's char::is_whitespace (Unicode White_Space).
bool is_white_space(char32_t cp);
// Rust's char::is_numeric (general categories Nd, Nl, No).
bool is_numeric(char32_t cp);
// The regex crate's \w (letters, marks, digits, connector punctuation, join controls).
bool is_word_char(char32_t cp);
// Rust's String::from_utf8_lossy: each maximal ill-formed subsequence becomes one U+FFFD.
std::string utf8_lossy(std::string_view bytes);
// GPT-2's byte-to-character table (bytes_char in byte_level.rs): the UTF-8 of each byte's char.
const std::array<std::string, 256>& byte_level_chars();
// The byte a ByteLevel character stands for, or -1.
int byte_level_byte(char32_t cp);
// Base64 (standard alphabet, padding required as Rust's BASE64_STANDARD wants it).
StatusOr<std::string> base64_decode(std::string_view text);

// ---- Regular expressions (hf_regex.cc) ----

// A pattern compiled by PCRE2 with Oniguruma's meaning (the crate's SysRegex is Oniguruma).
class Regex {
 public:
  // A tokenizer.json {"Regex": ...} pattern.
  static StatusOr<std::unique_ptr<Regex>> compile(std::string_view pattern);
  // A {"String": ...} pattern: the text literally (the crate escapes it into a regex).
  static StatusOr<std::unique_ptr<Regex>> literal(std::string_view text);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Every non-overlapping match of `text` (valid UTF-8), left to right, as byte ranges; an
  // empty match right after the previous match is skipped (onig's find_iter).
  Status find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>* out) const;
  const std::string& pattern() const { return pattern_; }

 private:
  Regex() = default;
  void* code_ = nullptr;  // pcre2_code_8
  std::string pattern_;
};

// ---- Splitting (NormalizedString::split with a Pattern) ----

// One segment of a text: a match of the pattern or the text between matches.
struct Segment {
  size_t start = 0;
  size_t end = 0;
  bool is_match = false;
};

// The crate's SplitDelimiterBehavior.
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
StatusOr<SplitBehavior> parse_split_behavior(const Json& j, const std::string& where);

// The segments of `text` for a regex (Pattern for &SysRegex), and for a character predicate
// (Pattern for Fn(char) -> bool: each matching character is its own match).
Status regex_segments(const Regex& re, std::string_view text, std::vector<Segment>* out);
template <typename Pred>
void char_segments(std::string_view text, Pred pred, std::vector<Segment>* out);
// The byte ranges that remain of `segments` under `behavior` (empty ones included; the caller
// drops them as PreTokenizedString::split does).
std::vector<std::pair<size_t, size_t>> apply_behavior(std::vector<Segment> segments,
                                                      SplitBehavior behavior);

// ---- The string being tokenized ----

// One split of PreTokenizedString: text not yet tokenized, or an added token already found.
struct Piece {
  std::string text;
  // Whether the piece begins at byte 0 of the encoded text (NormalizedString's
  // offsets_original().0 == 0, which Metaspace's prepend_scheme "first" asks).
  bool at_origin = false;
  int64_t token = -1;  // >= 0: the id of the added token this piece is
};

// ---- Components ----

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual Status normalize(std::string* text) const = 0;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Splits (and may rewrite) the pieces that are not added tokens, in place.
  virtual Status pre_tokenize(std::vector<Piece>* pieces) const = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  // Appends the ids of one pre-tokenized piece.
  virtual Status tokenize(std::string_view piece, std::vector<uint32_t>* out) const = 0;
  virtual std::optional<uint32_t> token_to_id(std::string_view token) const = 0;
  // nullptr when the id is not in the model's vocabulary.
  virtual const std::string* id_to_token(uint32_t id) const = 0;
  // The crate's get_vocab_size(): the number of entries (added tokens are numbered from it).
  virtual size_t vocab_count() const = 0;
  // One past the highest id.
  virtual uint32_t id_end() const = 0;
  virtual std::optional<uint32_t> unk_id() const = 0;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual Status decode_chain(std::vector<std::string>* tokens) const = 0;
};

// Parsers: `where` names the component in errors ("pre_tokenizer.pretokenizers[1]"). A null
// component is not parsed (the caller skips it). Anything unsupported is an error naming it and
// the supported types.
StatusOr<std::unique_ptr<Normalizer>> parse_normalizer(const Json& j, const std::string& where);
StatusOr<std::unique_ptr<PreTokenizer>> parse_pre_tokenizer(const Json& j,
                                                            const std::string& where);
StatusOr<std::unique_ptr<Decoder>> parse_decoder(const Json& j, const std::string& where);
StatusOr<std::unique_ptr<Model>> parse_bpe(const Json& j, const std::string& where);
StatusOr<std::unique_ptr<Model>> parse_unigram(const Json& j, const std::string& where);
// The Precompiled normalizer (hf_precompiled.cc).
StatusOr<std::unique_ptr<Normalizer>> parse_precompiled(const Json& j, const std::string& where);

// ---- Reading the JSON (hf_text.cc) ----

// The type of a component object ("type"), or an error naming `where`.
StatusOr<std::string> component_type(const Json& j, const std::string& where);
// Optional fields with a default; a present field of the wrong type is an error. A JSON null
// counts as absent, as serde's Option does.
StatusOr<bool> json_bool(const Json& j, const char* key, bool fallback, const std::string& where);
StatusOr<std::string> json_string(const Json& j, const char* key, const std::string& where);
StatusOr<std::optional<std::string>> json_optional_string(const Json& j, const char* key,
                                                          const std::string& where);
StatusOr<uint64_t> json_uint(const Json& j, const char* key, const std::string& where);
// A Rust `char` field: a string of exactly one character.
StatusOr<char32_t> json_char(const Json& j, const char* key, const std::string& where);
// {"String": s} or {"Regex": r}: the Pattern of Split and Replace.
StatusOr<std::unique_ptr<Regex>> json_pattern(const Json& j, const char* key,
                                              const std::string& where);
// "where: type T is not supported (supported: A, B, C)".
Status unsupported(const std::string& where, std::string_view what, std::string_view type,
                   std::string_view supported);

// ---- Template definitions ----

// A new component as the StatusOr of its interface: made<Normalizer, Nfc>(args...).
template <typename Base, typename T, typename... Args>
StatusOr<std::unique_ptr<Base>> made(Args&&... args) {
  return std::unique_ptr<Base>(new T(std::forward<Args>(args)...));
}

template <typename Pred>
void char_segments(std::string_view text, Pred pred, std::vector<Segment>* out) {
  out->clear();
  if (text.empty()) {
    out->push_back({0, 0, false});
    return;
  }
  size_t last = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t start = pos;
    const char32_t c = next_char(text, &pos);
    if (pred(c)) {
      if (last < start) out->push_back({last, start, false});
      out->push_back({start, pos, true});
      last = pos;
    }
  }
  if (last < text.size()) out->push_back({last, text.size(), false});
}

}  // namespace ax::data::hf
