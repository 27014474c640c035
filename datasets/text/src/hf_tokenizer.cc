// A Hugging Face tokenizer.json: loading, the added tokens, the post-processor, and the order in
// which the crate runs its pipeline (tokenizer/mod.rs, added_vocabulary.rs):
//   1. added tokens with normalized=false are split out of the raw text;
//   2. each remaining piece is normalized, then added tokens with normalized=true (matched in
//      their normalized form) are split out of it;
//   3. the pre-tokenizer splits the remaining pieces;
//   4. the model turns each piece into ids; an added token is its own id.
// The post-processor's special tokens are added only by encode_with_special_tokens().
#include "ax/datasets/text/hf_tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <unordered_map>
#include <unordered_set>

#include "ax/common/file_io.h"
#include "ax/common/logging.h"
#include "ax/datasets/shards/shard_format.h"
#include "hf_pipeline.h"

namespace ax::data {
namespace {

using hf::Json;

struct AddedToken {
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = false;
  bool operator==(const AddedToken&) const = default;
};

// A set of strings matched leftmost-longest, as the crate's aho-corasick automata
// (MatchKind::LeftmostLongest) match the added tokens.
class TokenTrie {
 public:
  void add(std::string_view pattern, uint32_t id) {
    if (pattern.empty()) return;
    uint32_t node = 0;
    for (char c : pattern) {
      const auto b = static_cast<unsigned char>(c);
      auto [it, added] = edges_.try_emplace(key(node, b), static_cast<uint32_t>(ids_.size()));
      if (added) ids_.push_back(-1);
      node = it->second;
    }
    first_[static_cast<unsigned char>(pattern[0])] = true;
    if (ids_[node] < 0) ids_[node] = id;  // the first of equal patterns wins
  }
  bool empty() const { return ids_.size() == 1; }

  // The first position >= from where a pattern starts, with the longest pattern there.
  bool find(std::string_view s, size_t from, size_t* start, size_t* len, uint32_t* id) const {
    for (size_t i = from; i < s.size(); ++i) {
      if (!first_[static_cast<unsigned char>(s[i])]) continue;
      uint32_t node = 0;
      size_t best = 0;
      for (size_t k = i; k < s.size(); ++k) {
        auto it = edges_.find(key(node, static_cast<unsigned char>(s[k])));
        if (it == edges_.end()) break;
        node = it->second;
        if (ids_[node] >= 0) {
          best = k + 1 - i;
          *id = static_cast<uint32_t>(ids_[node]);
        }
      }
      if (best > 0) {
        *start = i;
        *len = best;
        return true;
      }
    }
    return false;
  }

 private:
  static uint64_t key(uint32_t node, unsigned char b) {
    return (static_cast<uint64_t>(node) << 8) | b;
  }
  std::unordered_map<uint64_t, uint32_t> edges_;
  std::vector<int64_t> ids_ = {-1};
  std::array<bool, 256> first_{};
};

bool ends_with_word_char(std::string_view s) {
  if (s.empty()) return false;
  size_t start = s.size() - 1;
  while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
  return hf::is_word_char(hf::next_char(s, &start));
}

bool starts_with_word_char(std::string_view s) {
  if (s.empty()) return false;
  size_t pos = 0;
  return hf::is_word_char(hf::next_char(s, &pos));
}

// Where the run of white space that ends `s` begins.
size_t trailing_space_start(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    size_t next = start;
    if (!hf::is_white_space(hf::next_char(s, &next))) break;
    end = start;
  }
  return end;
}

// The length of the run of white space that begins `s`.
size_t leading_space_len(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    size_t next = pos;
    if (!hf::is_white_space(hf::next_char(s, &next))) break;
    pos = next;
  }
  return pos;
}

constexpr const char* kSupportedModels = "BPE, Unigram";
constexpr const char* kSupportedPostProcessors = "TemplateProcessing, ByteLevel, Sequence";

// A tokenizer_config.json token: "<s>" or {"content": "<s>", ...}.
std::optional<std::string> config_token(const Json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    auto c = it->find("content");
    if (c != it->end() && c->is_string()) return c->get<std::string>();
  }
  return std::nullopt;
}

}  // namespace

class HfTokenizer::Impl {
 public:
  std::unique_ptr<hf::Normalizer> normalizer;
  std::unique_ptr<hf::PreTokenizer> pre_tokenizer;
  std::unique_ptr<hf::Model> model;
  std::unique_ptr<hf::Decoder> decoder;

  std::unordered_map<std::string, uint32_t> added_ids;
  std::unordered_map<uint32_t, AddedToken> added_by_id;
  std::unordered_set<std::string> special;
  TokenTrie raw_trie;         // added tokens with normalized=false
  TokenTrie normalized_trie;  // added tokens with normalized=true, in their normalized form

  std::vector<uint32_t> prefix, suffix;
  uint64_t hash = 0;
  uint32_t vocab_size = 0;
  int32_t eos = -1, bos = -1, pad = -1, unk = -1;

  std::optional<uint32_t> token_to_id(std::string_view token) const {
    auto it = added_ids.find(std::string(token));
    if (it != added_ids.end()) return it->second;
    return model->token_to_id(token);
  }

  // AddedVocabulary::find_matches and split_with_indices: `text` cut around the added tokens of
  // `trie`, appended to `out` (empty pieces dropped).
  void split_added(std::string_view text, bool at_origin, const TokenTrie& trie,
                   std::vector<hf::Piece>* out) const {
    auto emit = [&](size_t s, size_t e, int64_t token) {
      if (s >= e) return;
      hf::Piece p;
      p.text = std::string(text.substr(s, e - s));
      p.at_origin = at_origin && s == 0;
      p.token = token;
      out->push_back(std::move(p));
    };
    if (trie.empty()) {
      emit(0, text.size(), -1);
      return;
    }
    size_t start_offset = 0;
    size_t search = 0;
    size_t mat_start = 0, mat_len = 0;
    uint32_t id = 0;
    while (search < text.size() && trie.find(text, search, &mat_start, &mat_len, &id)) {
      search = mat_start + mat_len;
      size_t start = mat_start, stop = mat_start + mat_len;
      const AddedToken& token = added_by_id.at(id);
      if (token.single_word) {
        const bool start_space = start == 0 || !ends_with_word_char(text.substr(0, start));
        const bool stop_space = stop == text.size() || !starts_with_word_char(text.substr(stop));
        if (!start_space || !stop_space) continue;
      }
      if (token.lstrip) start = std::max(trailing_space_start(text.substr(0, start)), start_offset);
      if (token.rstrip) stop += leading_space_len(text.substr(stop));
      if (start_offset < start) emit(start_offset, start, -1);
      emit(start, stop, id);
      start_offset = stop;
    }
    if (start_offset < text.size()) emit(start_offset, text.size(), -1);
  }

  Status encode(std::string_view text, std::vector<uint32_t>* out) const {
    const size_t bad = hf::invalid_utf8_at(text);
    if (bad != std::string_view::npos) {
      return InvalidArgument("text is not valid UTF-8 (byte ", bad, ")");
    }
    std::vector<hf::Piece> raw;
    split_added(text, true, raw_trie, &raw);
    std::vector<hf::Piece> pieces;
    pieces.reserve(raw.size());
    for (hf::Piece& p : raw) {
      if (p.token >= 0) {
        pieces.push_back(std::move(p));
        continue;
      }
      if (normalizer) AX_RETURN_IF_ERROR(normalizer->normalize(&p.text));
      split_added(p.text, p.at_origin, normalized_trie, &pieces);
    }
    if (pre_tokenizer) AX_RETURN_IF_ERROR(pre_tokenizer->pre_tokenize(&pieces));
    for (const hf::Piece& p : pieces) {
      if (p.token >= 0) {
        out->push_back(static_cast<uint32_t>(p.token));
      } else {
        AX_RETURN_IF_ERROR(model->tokenize(p.text, out));
      }
    }
    return Status::Ok();
  }

  StatusOr<std::string> decode(std::span<const uint32_t> ids, bool skip_special) const {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (uint32_t id : ids) {
      if (id >= vocab_size) {
        return OutOfRange("token id ", id, " is outside the vocabulary (size ", vocab_size, ")");
      }
      const std::string* token = nullptr;
      auto added = added_by_id.find(id);
      if (added != added_by_id.end()) {
        token = &added->second.content;
      } else {
        token = model->id_to_token(id);
      }
      if (token == nullptr) continue;  // an id no token has: left out, as the crate does
      if (skip_special && special.count(*token) > 0) continue;
      tokens.push_back(*token);
    }
    if (decoder == nullptr) {
      std::string joined;
      for (size_t i = 0; i < tokens.size(); ++i) {
        if (i > 0) joined += ' ';
        joined += tokens[i];
      }
      return joined;
    }
    AX_RETURN_IF_ERROR(decoder->decode_chain(&tokens));
    std::string joined;
    for (const std::string& t : tokens) joined += t;
    return joined;
  }

  // tokenizer.json's "added_tokens", numbered as AddedVocabulary::add_tokens numbers them: a
  // token the model has keeps the model's id, the others follow the model's vocabulary in order.
  Status add_tokens(const Json& list, const std::string& file) {
    if (list.is_null()) return Status::Ok();
    if (!list.is_array()) return DataLoss(file, ": added_tokens: expected an array");
    std::vector<std::pair<AddedToken, std::optional<uint64_t>>> tokens;
    for (size_t i = 0; i < list.size(); ++i) {
      const Json& e = list[i];
      const std::string where = str_cat("added_tokens[", i, "]");
      if (!e.is_object()) return DataLoss(file, ": ", where, ": expected an object");
      AddedToken t;
      AX_ASSIGN_OR_RETURN(t.content, hf::json_string(e, "content", where));
      AX_ASSIGN_OR_RETURN(t.single_word, hf::json_bool(e, "single_word", false, where));
      AX_ASSIGN_OR_RETURN(t.lstrip, hf::json_bool(e, "lstrip", false, where));
      AX_ASSIGN_OR_RETURN(t.rstrip, hf::json_bool(e, "rstrip", false, where));
      AX_ASSIGN_OR_RETURN(t.normalized, hf::json_bool(e, "normalized", true, where));
      AX_ASSIGN_OR_RETURN(t.special, hf::json_bool(e, "special", false, where));
      std::optional<uint64_t> file_id;
      auto id = e.find("id");
      if (id != e.end() && id->is_number_unsigned()) file_id = id->get<uint64_t>();
      tokens.emplace_back(std::move(t), file_id);
    }
    std::vector<AddedToken> specials, others;  // the crate's special_tokens and added_tokens
    for (const auto& [t, unused] : tokens) {
      if (t.special && !t.content.empty() && special.insert(t.content).second)
        specials.push_back(t);
    }
    std::unordered_map<std::string, std::vector<AddedToken>> seen;  // by content
    auto next_id = static_cast<uint32_t>(model->vocab_count());
    for (const auto& [t, file_id] : tokens) {
      std::vector<AddedToken>& same = seen[t.content];
      if (t.content.empty() || std::find(same.begin(), same.end(), t) != same.end()) continue;
      uint32_t id = 0;
      if (auto known = token_to_id(t.content)) {
        id = *known;
      } else {
        id = next_id++;
      }
      if (file_id && *file_id != id) {
        AX_LOG(kWarn, "data") << file << ": added token \"" << t.content << "\" is numbered "
                              << *file_id << " in the file but gets id " << id
                              << " (Hugging Face's numbering, which ax follows)";
      }
      added_ids[t.content] = id;
      added_by_id[id] = t;
      if (special.count(t.content) == 0) others.push_back(t);
      same.push_back(t);
    }
    for (const auto* group : {&specials, &others}) {
      for (const AddedToken& t : *group) {
        const uint32_t id = *token_to_id(t.content);
        if (!t.normalized) {
          raw_trie.add(t.content, id);
          continue;
        }
        std::string pattern = t.content;
        if (normalizer) AX_RETURN_IF_ERROR(normalizer->normalize(&pattern));
        normalized_trie.add(pattern, id);
      }
    }
    return Status::Ok();
  }

  // The special tokens of a post-processor around a single text.
  Status parse_post_processor(const Json& j, const std::string& where) {
    AX_ASSIGN_OR_RETURN(std::string type, hf::component_type(j, where));
    if (type == "ByteLevel") return Status::Ok();  // offsets only
    if (type == "Sequence") {
      auto it = j.find("processors");
      if (it == j.end() || !it->is_array())
        return DataLoss(where, ".processors: expected an array");
      for (size_t i = 0; i < it->size(); ++i) {
        AX_RETURN_IF_ERROR(parse_post_processor((*it)[i], str_cat(where, ".processors[", i, "]")));
      }
      return Status::Ok();
    }
    if (type != "TemplateProcessing") {
      return hf::unsupported(where, "post-processor", type, kSupportedPostProcessors);
    }
    auto single = j.find("single");
    auto specials = j.find("special_tokens");
    if (single == j.end() || !single->is_array())
      return DataLoss(where, ".single: expected an array");
    std::vector<uint32_t> before, after;
    bool seen_sequence = false;
    for (size_t i = 0; i < single->size(); ++i) {
      const Json& piece = (*single)[i];
      const std::string at = str_cat(where, ".single[", i, "]");
      if (piece.is_object() && piece.contains("Sequence")) {
        const Json& seq = piece["Sequence"];
        if (!seq.is_object() || seq.value("id", "") != "A") {
          return DataLoss(at, ": a single-text template takes sequence A only");
        }
        seen_sequence = true;
        continue;
      }
      if (!piece.is_object() || !piece.contains("SpecialToken") ||
          !piece["SpecialToken"].is_object() || !piece["SpecialToken"].contains("id") ||
          !piece["SpecialToken"]["id"].is_string()) {
        return DataLoss(at, ": expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
      }
      const std::string name = piece["SpecialToken"]["id"].get<std::string>();
      if (specials == j.end() || !specials->is_object() || !specials->contains(name)) {
        return DataLoss(at, ": special token \"", name, "\" is not in ", where, ".special_tokens");
      }
      const Json& entry = (*specials)[name];
      auto ids = entry.is_object() ? entry.find("ids") : entry.end();
      if (ids == entry.end() || !ids->is_array()) {
        return DataLoss(where, ".special_tokens.", name, ".ids: expected an array");
      }
      for (const Json& id : *ids) {
        if (!id.is_number_unsigned())
          return DataLoss(where, ".special_tokens.", name, ".ids: expected ids");
        (seen_sequence ? after : before).push_back(id.get<uint32_t>());
      }
    }
    // A later processor wraps what the earlier ones made.
    prefix.insert(prefix.begin(), before.begin(), before.end());
    suffix.insert(suffix.end(), after.begin(), after.end());
    return Status::Ok();
  }

  int32_t find_id(std::initializer_list<const char*> names) const {
    for (const char* name : names) {
      if (auto id = token_to_id(name)) return static_cast<int32_t>(*id);
    }
    return -1;
  }

  // EOS, BOS, pad and unknown: tokenizer_config.json's names where it has them; otherwise the
  // post-processor's template (its last token after the text is EOS, its first before is BOS),
  // then the usual names.
  void choose_special_ids(const Json* config) {
    auto from_config = [&](const char* key) -> std::optional<int32_t> {
      if (config == nullptr) return std::nullopt;
      std::optional<std::string> name = config_token(*config, key);
      if (!name) return std::nullopt;
      auto id = token_to_id(*name);
      if (!id) return std::nullopt;
      return static_cast<int32_t>(*id);
    };
    if (auto id = from_config("eos_token")) {
      eos = *id;
    } else if (!suffix.empty()) {
      eos = static_cast<int32_t>(suffix.back());
    } else {
      eos = find_id({"</s>", "<|endoftext|>", "<|end_of_text|>", "<eos>"});
    }
    if (auto id = from_config("bos_token")) {
      bos = *id;
    } else if (!prefix.empty()) {
      bos = static_cast<int32_t>(prefix.front());
    } else {
      bos = find_id({"<s>", "<|begin_of_text|>", "<bos>"});
    }
    if (auto id = from_config("pad_token")) {
      pad = *id;
    } else {
      pad = find_id({"<pad>"});
    }
    if (auto id = from_config("unk_token")) {
      unk = *id;
    } else if (auto id = model->unk_id()) {
      unk = static_cast<int32_t>(*id);
    } else {
      unk = -1;
    }
  }
};

StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::load(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::string file = path;
  if (fs::is_directory(path, ec)) file = (fs::path(path) / "tokenizer.json").string();
  if (!fs::exists(file, ec)) return NotFound("tokenizer ", file, " does not exist");
  AX_ASSIGN_OR_RETURN(std::string bytes, read_file(file));

  Json j;
  try {
    j = Json::parse(bytes);
  } catch (const Json::parse_error& e) {
    // nlohmann: "[json.exception.parse_error.101] parse error at line 1, column 44: syntax
    // error ..."; e.byte counts from 1.
    std::string what = e.what();
    std::string place;
    if (const size_t at = what.find(" at line "), colon = what.find(": ");
        at != std::string::npos && colon != std::string::npos && at < colon) {
      place = str_cat(" (", what.substr(at + 4, colon - at - 4), ")");
    }
    if (const size_t colon = what.find(": "); colon != std::string::npos)
      what = what.substr(colon + 2);
    return DataLoss(file, ": invalid JSON at byte ", e.byte > 0 ? e.byte - 1 : 0, place, ": ",
                    what);
  }
  if (!j.is_object()) return DataLoss(file, ": expected a JSON object, found ", j.type_name());

  auto impl = std::make_unique<Impl>();
  impl->hash = hash64(bytes.data(), bytes.size());
  Status st = [&]() -> Status {
    try {
      if (auto v = j.find("version"); v != j.end() && !(v->is_string() && *v == "1.0")) {
        return DataLoss("version: ", v->dump(), " (ax reads version \"1.0\")");
      }
      auto model = j.find("model");
      if (model == j.end() || !model->is_object()) return DataLoss("no \"model\" object");
      std::string type;
      if (auto t = model->find("type"); t != model->end() && t->is_string()) {
        type = t->get<std::string>();
      } else if (model->contains("merges")) {
        type = "BPE";  // files from before the model's type was written
      } else if (model->contains("vocab") && (*model)["vocab"].is_array()) {
        type = "Unigram";
      }
      if (type == "BPE") {
        AX_ASSIGN_OR_RETURN(impl->model, hf::parse_bpe(*model, "model"));
      } else if (type == "Unigram") {
        AX_ASSIGN_OR_RETURN(impl->model, hf::parse_unigram(*model, "model"));
      } else {
        return hf::unsupported("model", "model", type.empty() ? "(none)" : type, kSupportedModels);
      }
      if (auto n = j.find("normalizer"); n != j.end() && !n->is_null()) {
        AX_ASSIGN_OR_RETURN(impl->normalizer, hf::parse_normalizer(*n, "normalizer"));
      }
      if (auto p = j.find("pre_tokenizer"); p != j.end() && !p->is_null()) {
        AX_ASSIGN_OR_RETURN(impl->pre_tokenizer, hf::parse_pre_tokenizer(*p, "pre_tokenizer"));
      }
      if (auto d = j.find("decoder"); d != j.end() && !d->is_null()) {
        AX_ASSIGN_OR_RETURN(impl->decoder, hf::parse_decoder(*d, "decoder"));
      }
      if (auto p = j.find("post_processor"); p != j.end() && !p->is_null()) {
        AX_RETURN_IF_ERROR(impl->parse_post_processor(*p, "post_processor"));
      }
      AX_RETURN_IF_ERROR(impl->add_tokens(j.value("added_tokens", Json()), file));
      return Status::Ok();
    } catch (const Json::exception& e) {
      return DataLoss(e.what());
    }
  }();
  if (!st.ok()) return st.with_context(file);

  uint32_t end = impl->model->id_end();
  for (const auto& [id, unused] : impl->added_by_id) end = std::max(end, id + 1);
  impl->vocab_size = end;
  for (const auto* list : {&impl->prefix, &impl->suffix}) {
    for (uint32_t id : *list) {
      if (id >= end) {
        return DataLoss(file, ": the post-processor's special token id ", id,
                        " is outside the vocabulary (size ", end, ")");
      }
    }
  }

  // tokenizer_config.json beside it, when there is one.
  const fs::path config_path = fs::path(file).parent_path() / "tokenizer_config.json";
  std::optional<Json> config;
  if (fs::exists(config_path, ec)) {
    AX_ASSIGN_OR_RETURN(std::string text, read_file(config_path.string()));
    try {
      config = Json::parse(text);
    } catch (const Json::parse_error& e) {
      return DataLoss(config_path.string(), ": invalid JSON at byte ", e.byte);
    }
    if (!config->is_object()) return DataLoss(config_path.string(), ": expected a JSON object");
  }
  impl->choose_special_ids(config ? &*config : nullptr);

  std::unique_ptr<HfTokenizer> tok(new HfTokenizer(std::move(impl)));
  tok->finish_loading(path);
  return tok;
}

HfTokenizer::HfTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HfTokenizer::~HfTokenizer() = default;

uint64_t HfTokenizer::hash() const { return impl_->hash; }
uint32_t HfTokenizer::vocab_size() const { return impl_->vocab_size; }
int32_t HfTokenizer::eos_id() const { return impl_->eos; }
int32_t HfTokenizer::pad_id() const { return impl_->pad; }
int32_t HfTokenizer::unk_id() const { return impl_->unk; }
int32_t HfTokenizer::bos_id() const { return impl_->bos; }
const std::vector<uint32_t>& HfTokenizer::prefix_ids() const { return impl_->prefix; }
const std::vector<uint32_t>& HfTokenizer::suffix_ids() const { return impl_->suffix; }

Status HfTokenizer::encode(std::string_view text, std::vector<uint32_t>* out) const {
  return impl_->encode(text, out);
}

Status HfTokenizer::encode_with_special_tokens(std::string_view text,
                                               std::vector<uint32_t>* out) const {
  out->insert(out->end(), impl_->prefix.begin(), impl_->prefix.end());
  AX_RETURN_IF_ERROR(impl_->encode(text, out));
  out->insert(out->end(), impl_->suffix.begin(), impl_->suffix.end());
  return Status::Ok();
}

StatusOr<std::string> HfTokenizer::decode(std::span<const uint32_t> ids) const {
  return impl_->decode(ids, false);
}

StatusOr<std::string> HfTokenizer::decode(std::span<const uint32_t> ids,
                                          bool skip_special_tokens) const {
  return impl_->decode(ids, skip_special_tokens);
}

std::string HfTokenizer::id_to_piece(uint32_t id) const {
  auto added = impl_->added_by_id.find(id);
  if (added != impl_->added_by_id.end()) return added->second.content;
  if (const std::string* token = impl_->model->id_to_token(id)) return *token;
  return str_cat("<invalid id ", id, ">");
}

}  // namespace ax::data
