// The Precompiled normalizer: SentencePiece's compiled normalization rules (a Darts double-array
// trie over UTF-8 keys and a blob of NUL-terminated replacements), as T5's, mT5's and other
// converted SentencePiece tokenizers carry them in tokenizer.json. Applied as the crate applies
// it (normalizers/precompiled.rs with the spm_precompiled crate), which is not SentencePiece's own
// longest-match walk: the text is cut into extended grapheme clusters (utf8proc); a cluster of
// fewer than 6 bytes whose bytes begin with a key is replaced whole by the replacement of the
// SHORTEST such key; any other cluster is mapped a character at a time the same way, a character
// that begins no key kept as it is.
#include <utf8proc.h>

#include <cstring>

#include "hf_pipeline.h"

namespace ax::data::hf {
namespace {

class PrecompiledNormalizer : public Normalizer {
 public:
  static StatusOr<std::unique_ptr<Normalizer>> create(const std::string& blob,
                                                      const std::string& where) {
    auto n = std::unique_ptr<PrecompiledNormalizer>(new PrecompiledNormalizer());
    if (blob.size() < 4) return DataLoss(where, ": cannot parse precompiled_charsmap (too short)");
    uint32_t trie_bytes = 0;
    for (int k = 3; k >= 0; --k)
      trie_bytes = (trie_bytes << 8) | static_cast<unsigned char>(blob[k]);
    const size_t units = trie_bytes / 4;
    if (4 + units * 4 > blob.size()) {
      return DataLoss(where, ": cannot parse precompiled_charsmap (a trie of ", trie_bytes,
                      " bytes in ", blob.size() - 4, ")");
    }
    n->array_.resize(units);
    for (size_t i = 0; i < units; ++i) {
      uint32_t u = 0;
      for (int k = 3; k >= 0; --k) u = (u << 8) | static_cast<unsigned char>(blob[4 + i * 4 + k]);
      n->array_[i] = u;
    }
    n->normalized_ = blob.substr(4 + units * 4);
    if (invalid_utf8_at(n->normalized_) != std::string_view::npos) {
      return DataLoss(where, ": precompiled_charsmap's replacements are not valid UTF-8");
    }
    if (n->array_.empty()) return DataLoss(where, ": precompiled_charsmap has an empty trie");
    return std::unique_ptr<Normalizer>(std::move(n));
  }

  Status normalize(std::string* text) const override {
    std::string out;
    out.reserve(text->size());
    bool modified = false;
    const std::string_view s = *text;
    size_t pos = 0;
    utf8proc_int32_t state = 0;
    while (pos < s.size()) {
      // One extended grapheme cluster: [start, pos).
      const size_t start = pos;
      char32_t c = next_char(s, &pos);
      while (pos < s.size()) {
        size_t next = pos;
        const char32_t d = next_char(s, &next);
        if (utf8proc_grapheme_break_stateful(static_cast<utf8proc_int32_t>(c),
                                             static_cast<utf8proc_int32_t>(d), &state)) {
          break;
        }
        c = d;
        pos = next;
      }
      const std::string_view grapheme = s.substr(start, pos - start);
      std::string_view norm;
      if (grapheme.size() < 6 && transform(grapheme, &norm)) {
        modified = true;
        out.append(norm);
        continue;
      }
      for (size_t p = 0; p < grapheme.size();) {
        const size_t len = char_len(static_cast<unsigned char>(grapheme[p]));
        const std::string_view part = grapheme.substr(p, len);
        if (transform(part, &norm)) {
          modified = true;
          out.append(norm);
        } else {
          out.append(part);
        }
        p += len;
      }
    }
    if (modified) *text = std::move(out);
    return Status::Ok();
  }

 private:
  PrecompiledNormalizer() = default;

  static bool has_leaf(uint32_t u) { return ((u >> 8) & 1) == 1; }
  static uint32_t value(uint32_t u) { return u & ((1u << 31) - 1); }
  static uint32_t label(uint32_t u) { return u & ((1u << 31) | 0xFF); }
  static size_t offset(uint32_t u) {
    return static_cast<size_t>(u >> 10) << ((u & (1u << 9)) >> 6);
  }

  // The replacement of the shortest key that `chunk` begins with (spm_precompiled's transform).
  bool transform(std::string_view chunk, std::string_view* norm) const {
    size_t node = 0;
    node ^= offset(array_[0]);
    for (char ch : chunk) {
      const auto c = static_cast<unsigned char>(ch);
      if (c == 0) break;
      node ^= c;
      if (node >= array_.size()) return false;
      const uint32_t unit = array_[node];
      if (label(unit) != c) return false;
      node ^= offset(unit);
      if (node >= array_.size()) return false;
      if (has_leaf(unit)) {
        const size_t index = value(array_[node]);
        if (index > normalized_.size()) return false;
        size_t end = normalized_.find('\0', index);
        if (end == std::string::npos) end = normalized_.size();
        *norm = std::string_view(normalized_).substr(index, end - index);
        return true;
      }
    }
    return false;
  }

  std::vector<uint32_t> array_;
  std::string normalized_;
};

}  // namespace

StatusOr<std::unique_ptr<Normalizer>> parse_precompiled(const Json& j, const std::string& where) {
  AX_ASSIGN_OR_RETURN(std::string b64, json_string(j, "precompiled_charsmap", where));
  StatusOr<std::string> blob = base64_decode(b64);
  if (!blob.ok()) return blob.status().with_context(where + ".precompiled_charsmap");
  return PrecompiledNormalizer::create(*blob, where);
}

}  // namespace ax::data::hf
