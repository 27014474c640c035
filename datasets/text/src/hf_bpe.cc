// The BPE model of tokenizer.json (the crate's models/bpe/): the vocabulary, the merges in either
// form ("a b" strings or ["a", "b"] pairs), unk_token and fuse_unk, byte_fallback (<0xNN> pieces),
// ignore_merges (a piece in the vocabulary is one token as it is), continuing_subword_prefix and
// end_of_word_suffix. The merge loop is the crate's: a heap of candidate pairs ordered by
// (rank, position), O(n log n) in the length of a piece. Dropout above 0 is refused (it makes
// encoding random).
#include <algorithm>
#include <queue>
#include <unordered_map>

#include "hf_pipeline.h"

namespace ax::data::hf {
namespace {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using Vocab = std::unordered_map<std::string, uint32_t, StringHash, std::equal_to<>>;

uint64_t pair_key(uint32_t a, uint32_t b) { return (static_cast<uint64_t>(a) << 32) | b; }

class BpeModel : public Model {
 public:
  Status tokenize(std::string_view piece, std::vector<uint32_t>* out) const override {
    if (piece.empty()) return Status::Ok();
    if (ignore_merges_) {
      auto it = vocab_.find(piece);
      if (it != vocab_.end()) {
        out->push_back(it->second);
        return Status::Ok();
      }
    }
    // The symbols of the piece: one per character (merge_word).
    std::vector<Symbol> symbols;
    symbols.reserve(piece.size());
    // A pending run of unknown characters: its id and bytes.
    bool unk = false;
    uint32_t unk_run_id = 0;
    size_t unk_run_len = 0;
    auto add = [&](uint32_t id, size_t len) {
      const auto index = static_cast<int64_t>(symbols.size());
      symbols.push_back({id, index - 1, index + 1, len});
    };
    std::string s;
    size_t pos = 0;
    while (pos < piece.size()) {
      const size_t start = pos;
      pos += char_len(static_cast<unsigned char>(piece[pos]));
      const size_t byte_len = pos - start;
      s.clear();
      if (start > 0 && prefix_) s += *prefix_;
      s.append(piece.substr(start, byte_len));
      if (pos >= piece.size() && suffix_) s += *suffix_;
      auto it = vocab_.find(s);
      if (it != vocab_.end()) {
        if (unk) {
          add(unk_run_id, unk_run_len);
          unk = false;
        }
        add(it->second, byte_len);
        continue;
      }
      if (byte_fallback_) {
        bool all = true;
        std::vector<uint32_t> bytes;
        for (char c : s) {
          auto b = byte_ids_[static_cast<unsigned char>(c)];
          if (!b) {
            all = false;
            break;
          }
          bytes.push_back(*b);
        }
        if (all) {
          for (uint32_t id : bytes) add(id, 1);
          continue;
        }
      }
      if (unk_token_) {
        if (!unk_id_)
          return DataLoss("BPE: unk_token \"", *unk_token_, "\" is not in the vocabulary");
        if (unk && fuse_unk_) {
          unk_run_len += byte_len;
        } else {
          if (unk) add(unk_run_id, unk_run_len);
          unk = true;
          unk_run_id = *unk_id_;
          unk_run_len = byte_len;
        }
      }
    }
    if (unk) add(unk_run_id, unk_run_len);
    if (!symbols.empty()) symbols.back().next = -1;
    merge_all(&symbols);
    for (const Symbol& sym : symbols) {
      if (sym.len != 0) out->push_back(sym.id);
    }
    return Status::Ok();
  }

  std::optional<uint32_t> token_to_id(std::string_view token) const override {
    auto it = vocab_.find(token);
    if (it == vocab_.end()) return std::nullopt;
    return it->second;
  }
  const std::string* id_to_token(uint32_t id) const override {
    auto it = vocab_r_.find(id);
    return it == vocab_r_.end() ? nullptr : &it->second;
  }
  size_t vocab_count() const override { return vocab_.size(); }
  uint32_t id_end() const override { return id_end_; }
  std::optional<uint32_t> unk_id() const override { return unk_id_; }

  static StatusOr<std::unique_ptr<Model>> parse(const Json& j, const std::string& where);

 private:
  struct Symbol {
    uint32_t id;
    int64_t prev;
    int64_t next;
    size_t len;  // bytes; 0 once merged into the symbol before it
  };
  struct Merge {
    size_t pos;
    uint32_t rank;
    uint32_t new_id;
    // The top of the heap is the lowest rank, then the lowest position.
    bool operator<(const Merge& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };

  const std::pair<uint32_t, uint32_t>* find_merge(uint32_t a, uint32_t b) const {
    auto it = merges_.find(pair_key(a, b));
    return it == merges_.end() ? nullptr : &it->second;
  }

  void merge_all(std::vector<Symbol>* symbols_ptr) const {
    std::vector<Symbol>& symbols = *symbols_ptr;
    std::priority_queue<Merge> queue;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      if (const auto* m = find_merge(symbols[i].id, symbols[i + 1].id)) {
        queue.push({i, m->first, m->second});
      }
    }
    while (!queue.empty()) {
      const Merge top = queue.top();
      queue.pop();
      Symbol& cur = symbols[top.pos];
      if (cur.len == 0 || cur.next == -1) continue;
      const auto next_pos = static_cast<size_t>(cur.next);
      const Symbol right = symbols[next_pos];
      const auto* target = find_merge(cur.id, right.id);
      if (target == nullptr || target->second != top.new_id) continue;  // an expired entry
      cur.id = top.new_id;
      cur.len += right.len;
      cur.next = right.next;
      symbols[next_pos].len = 0;
      if (right.next > -1 && static_cast<size_t>(right.next) < symbols.size()) {
        symbols[static_cast<size_t>(right.next)].prev = static_cast<int64_t>(top.pos);
      }
      if (cur.prev >= 0) {
        const auto prev = static_cast<size_t>(cur.prev);
        if (const auto* m = find_merge(symbols[prev].id, cur.id)) {
          queue.push({prev, m->first, m->second});
        }
      }
      if (cur.next >= 0 && static_cast<size_t>(cur.next) < symbols.size()) {
        if (const auto* m = find_merge(cur.id, symbols[static_cast<size_t>(cur.next)].id)) {
          queue.push({top.pos, m->first, m->second});
        }
      }
    }
  }

  Vocab vocab_;
  std::unordered_map<uint32_t, std::string> vocab_r_;
  std::unordered_map<uint64_t, std::pair<uint32_t, uint32_t>> merges_;  // pair -> (rank, new id)
  std::array<std::optional<uint32_t>, 256> byte_ids_{};                 // <0xNN> pieces
  std::optional<std::string> unk_token_, prefix_, suffix_;
  std::optional<uint32_t> unk_id_;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  uint32_t id_end_ = 0;
};

StatusOr<std::unique_ptr<Model>> BpeModel::parse(const Json& j, const std::string& where) {
  auto m = std::unique_ptr<BpeModel>(new BpeModel());
  auto dropout = j.find("dropout");
  if (dropout != j.end() && !dropout->is_null()) {
    if (!dropout->is_number()) return DataLoss(where, ".dropout: expected a number or null");
    if (dropout->get<double>() != 0.0) {
      return Unimplemented(where, ".dropout: BPE dropout ", dropout->get<double>(),
                           " is not supported (it makes encoding random; supported: null or 0)");
    }
  }
  AX_ASSIGN_OR_RETURN(m->unk_token_, json_optional_string(j, "unk_token", where));
  AX_ASSIGN_OR_RETURN(m->prefix_, json_optional_string(j, "continuing_subword_prefix", where));
  AX_ASSIGN_OR_RETURN(m->suffix_, json_optional_string(j, "end_of_word_suffix", where));
  AX_ASSIGN_OR_RETURN(m->fuse_unk_, json_bool(j, "fuse_unk", false, where));
  AX_ASSIGN_OR_RETURN(m->byte_fallback_, json_bool(j, "byte_fallback", false, where));
  AX_ASSIGN_OR_RETURN(m->ignore_merges_, json_bool(j, "ignore_merges", false, where));

  auto vocab = j.find("vocab");
  if (vocab == j.end() || !vocab->is_object()) {
    return DataLoss(where, ".vocab: expected an object of token: id");
  }
  m->vocab_.reserve(vocab->size());
  for (const auto& [token, id] : vocab->items()) {
    if (!id.is_number_unsigned() || id.get<uint64_t>() > 0xFFFFFFFFull) {
      return DataLoss(where, ".vocab: the id of \"", token, "\" is not an unsigned 32-bit number");
    }
    const auto v = id.get<uint32_t>();
    m->vocab_[token] = v;
    m->vocab_r_[v] = token;
    m->id_end_ = std::max(m->id_end_, v + 1);
  }
  if (m->unk_token_) m->unk_id_ = m->token_to_id(*m->unk_token_);
  for (int b = 0; b < 256; ++b) {
    static const char* hex = "0123456789ABCDEF";
    const std::string code = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
    m->byte_ids_[b] = m->token_to_id(code);
  }

  auto merges = j.find("merges");
  if (merges == j.end() || !merges->is_array())
    return DataLoss(where, ".merges: expected an array");
  const size_t prefix_len = m->prefix_ ? m->prefix_->size() : 0;
  uint32_t rank = 0;
  m->merges_.reserve(merges->size());
  for (size_t i = 0; i < merges->size(); ++i) {
    const Json& e = (*merges)[i];
    std::string a, b;
    if (e.is_string()) {
      const std::string line = e.get<std::string>();
      if (line.rfind("#version", 0) == 0) continue;
      const size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
        return DataLoss(where, ".merges[", i, "]: \"", line,
                        "\" is not two tokens separated by one space");
      }
      a = line.substr(0, space);
      b = line.substr(space + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    } else {
      return DataLoss(where, ".merges[", i, "]: expected \"a b\" or [\"a\", \"b\"]");
    }
    auto ia = m->token_to_id(a);
    auto ib = m->token_to_id(b);
    for (const auto& [name, id] : {std::pair{&a, ia}, std::pair{&b, ib}}) {
      if (!id) {
        return DataLoss(where, ".merges[", i, "]: \"", a, " ", b, "\" names \"", *name,
                        "\", which is not in the vocabulary");
      }
    }
    if (b.size() < prefix_len) {
      return DataLoss(where, ".merges[", i, "]: \"", b, "\" is shorter than the subword prefix");
    }
    const std::string joined = a + b.substr(prefix_len);
    auto inew = m->token_to_id(joined);
    if (!inew) {
      return DataLoss(where, ".merges[", i, "]: the merge of \"", a, " ", b, "\", \"", joined,
                      "\", is not in the vocabulary");
    }
    m->merges_[pair_key(*ia, *ib)] = {rank++, *inew};
  }
  return std::unique_ptr<Model>(std::move(m));
}

}  // namespace

StatusOr<std::unique_ptr<Model>> parse_bpe(const Json& j, const std::string& where) {
  return BpeModel::parse(j, where);
}

}  // namespace ax::data::hf
