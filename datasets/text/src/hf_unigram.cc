// The Unigram model of tokenizer.json (the crate's models/unigram/, itself SentencePiece's
// unigram_model.cc): the best segmentation by the pieces' log-probabilities (Viterbi over a trie
// of the pieces), unknown characters scored min_score - 10 and fused into one unknown token,
// which byte_fallback turns into <0xNN> pieces where the vocabulary has them all.
#include <algorithm>
#include <limits>
#include <unordered_map>

#include "hf_pipeline.h"

namespace ax::data::hf {
namespace {

constexpr double kUnkPenalty = 10.0;

struct UnigramStringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

class UnigramModel : public Model {
 public:
  Status tokenize(std::string_view piece, std::vector<uint32_t>* out) const override {
    if (piece.empty()) return Status::Ok();
    std::vector<std::string_view> parts;
    AX_RETURN_IF_ERROR(encode(piece, &parts));
    for (std::string_view part : parts) {
      auto it = ids_.find(part);
      if (it != ids_.end()) {
        out->push_back(it->second);
        continue;
      }
      if (byte_fallback_) {
        bool all = true;
        for (char c : part) all = all && byte_ids_[static_cast<unsigned char>(c)].has_value();
        if (all) {
          for (char c : part) out->push_back(*byte_ids_[static_cast<unsigned char>(c)]);
          continue;
        }
      }
      if (!unk_id_) return DataLoss("Unigram: an unknown piece and no unk_id");
      out->push_back(*unk_id_);
    }
    return Status::Ok();
  }

  std::optional<uint32_t> token_to_id(std::string_view token) const override {
    auto it = ids_.find(token);
    if (it == ids_.end()) return std::nullopt;
    return it->second;
  }
  const std::string* id_to_token(uint32_t id) const override {
    return id < pieces_.size() ? &pieces_[id] : nullptr;
  }
  size_t vocab_count() const override { return pieces_.size(); }
  uint32_t id_end() const override { return static_cast<uint32_t>(pieces_.size()); }
  std::optional<uint32_t> unk_id() const override { return unk_id_; }

  static StatusOr<std::unique_ptr<Model>> parse(const Json& j, const std::string& where);

 private:
  struct Node {
    size_t id = 0;
    double score = 0.0;
    std::optional<size_t> starts_at;
  };

  // encode_optimized: the best path, unknown runs fused.
  Status encode(std::string_view s, std::vector<std::string_view>* parts) const {
    const double unk_score = min_score_ - kUnkPenalty;
    std::vector<Node> best(s.size() + 1);
    size_t start = 0;
    while (start < s.size()) {
      const double here = best[start].score;
      bool has_single = false;
      const size_t mblen = char_len(static_cast<unsigned char>(s[start]));
      uint32_t node = 0;
      for (size_t k = start; k < s.size(); ++k) {
        auto next =
            edges_.find((static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(s[k]));
        if (next == edges_.end()) break;
        node = next->second;
        const int64_t id = leaf_[node];
        if (id < 0) continue;
        const size_t end = k + 1;
        const double candidate = scores_[static_cast<size_t>(id)] + here;
        Node& target = best[end];
        if (!target.starts_at || candidate > target.score) {
          target.score = candidate;
          target.starts_at = start;
          target.id = static_cast<size_t>(id);
        }
        if (!has_single && end - start == mblen) has_single = true;
      }
      if (!has_single) {
        Node& target = best[start + mblen];
        const double candidate = unk_score + here;
        if (!target.starts_at || candidate > target.score) {
          if (!unk_id_) return DataLoss("Unigram: a character no piece covers and no unk_id");
          target.score = candidate;
          target.starts_at = start;
          target.id = *unk_id_;
        }
      }
      start += mblen;
    }
    // Back from the end; consecutive unknown pieces become one.
    parts->clear();
    size_t end = s.size();
    size_t unk_begin = std::string_view::npos, unk_end = 0;
    while (end > 0) {
      const Node& node = best[end];
      const size_t begin = *node.starts_at;
      if (unk_id_ && node.id == *unk_id_) {
        if (unk_begin == std::string_view::npos) unk_end = end;
        unk_begin = begin;
      } else {
        if (unk_begin != std::string_view::npos) {
          parts->push_back(s.substr(unk_begin, unk_end - unk_begin));
          unk_begin = std::string_view::npos;
        }
        parts->push_back(s.substr(begin, end - begin));
      }
      end = begin;
    }
    if (unk_begin != std::string_view::npos)
      parts->push_back(s.substr(unk_begin, unk_end - unk_begin));
    std::reverse(parts->begin(), parts->end());
    return Status::Ok();
  }

  std::vector<std::string> pieces_;
  std::vector<double> scores_;
  std::unordered_map<std::string, uint32_t, UnigramStringHash, std::equal_to<>> ids_;
  // The trie of the pieces' bytes: (node << 8 | byte) -> child; leaf_[node] is the piece's id.
  std::unordered_map<uint64_t, uint32_t> edges_;
  std::vector<int64_t> leaf_;
  std::array<std::optional<uint32_t>, 256> byte_ids_{};
  std::optional<uint32_t> unk_id_;
  bool byte_fallback_ = false;
  double min_score_ = 0.0;
};

StatusOr<std::unique_ptr<Model>> UnigramModel::parse(const Json& j, const std::string& where) {
  auto m = std::unique_ptr<UnigramModel>(new UnigramModel());
  AX_ASSIGN_OR_RETURN(m->byte_fallback_, json_bool(j, "byte_fallback", false, where));
  auto vocab = j.find("vocab");
  if (vocab == j.end() || !vocab->is_array()) {
    return DataLoss(where, ".vocab: expected an array of [piece, score]");
  }
  m->min_score_ = std::numeric_limits<double>::infinity();
  m->leaf_.push_back(-1);
  for (size_t i = 0; i < vocab->size(); ++i) {
    const Json& e = (*vocab)[i];
    if (!e.is_array() || e.size() != 2 || !e[0].is_string() || !e[1].is_number()) {
      return DataLoss(where, ".vocab[", i, "]: expected [piece, score]");
    }
    m->pieces_.push_back(e[0].get<std::string>());
    m->scores_.push_back(e[1].get<double>());
    m->min_score_ = std::min(m->min_score_, m->scores_.back());
    m->ids_[m->pieces_.back()] = static_cast<uint32_t>(i);
  }
  // The trie; a piece given twice has the id of its last entry, as the crate's map does.
  for (const std::string& piece : m->pieces_) {
    uint32_t node = 0;
    for (char c : piece) {
      const uint64_t key = (static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(c);
      auto [it, added] = m->edges_.try_emplace(key, static_cast<uint32_t>(m->leaf_.size()));
      if (added) m->leaf_.push_back(-1);
      node = it->second;
    }
    if (node != 0) m->leaf_[node] = m->ids_[piece];
  }
  auto unk = j.find("unk_id");
  if (unk != j.end() && !unk->is_null()) {
    if (!unk->is_number_unsigned()) return DataLoss(where, ".unk_id: expected an id or null");
    const uint64_t id = unk->get<uint64_t>();
    if (m->pieces_.empty()) return DataLoss(where, ": an empty vocabulary");
    if (id >= m->pieces_.size()) {
      return DataLoss(where, ".unk_id: ", id, " is outside the vocabulary (", m->pieces_.size(),
                      " pieces)");
    }
    m->unk_id_ = static_cast<uint32_t>(id);
  }
  for (int b = 0; b < 256; ++b) {
    static const char* hex = "0123456789ABCDEF";
    const std::string code = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
    m->byte_ids_[b] = m->token_to_id(code);
  }
  return std::unique_ptr<Model>(std::move(m));
}

}  // namespace

StatusOr<std::unique_ptr<Model>> parse_unigram(const Json& j, const std::string& where) {
  return UnigramModel::parse(j, where);
}

}  // namespace ax::data::hf
