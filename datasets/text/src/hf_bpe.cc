// The BPE model of tokenizer.json (the crate's models/bpe/): the vocabulary, the merges in either
// form ("a b" strings or ["a", "b"] pairs), unk_token and fuse_unk, byte_fallback (<0xNN> pieces),
// ignore_merges (a piece in the vocabulary is one token as it is), continuing_subword_prefix and
// end_of_word_suffix. The merge loop is the crate's: a heap of candidate pairs ordered by
// (rank, position), O(n log n) in the length of a piece; and, as the crate has, a cache of the
// ids of the words already seen. Dropout above 0 is refused (it makes encoding random).
#include <algorithm>
#include <atomic>
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

// The merges: (left id, right id) -> (rank, merged id), open addressing with linear probing.
// std::unordered_map's buckets cost a pointer chase and a division per lookup, and the merge loop
// looks up every adjacent pair.
class BpePairTable {
 public:
  struct Entry {
    uint32_t rank;
    uint32_t new_id;
  };
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    slots_.assign(cap, Slot{});
    mask_ = cap - 1;
  }
  // A later merge of the same pair replaces an earlier one, as the crate's HashMap::collect does.
  void set(uint32_t a, uint32_t b, Entry e) {
    const uint64_t key = pair_key(a, b);
    for (size_t i = mix(key) & mask_;; i = (i + 1) & mask_) {
      Slot& slot = slots_[i];
      if (!slot.used || slot.key == key) {
        if (!slot.used) ++size_;
        slot = {key, e, true};
        return;
      }
    }
  }
  const Entry* find(uint32_t a, uint32_t b) const {
    const uint64_t key = pair_key(a, b);
    for (size_t i = mix(key) & mask_;; i = (i + 1) & mask_) {
      const Slot& slot = slots_[i];
      if (!slot.used) return nullptr;
      if (slot.key == key) return &slot.entry;
    }
  }

 private:
  struct Slot {
    uint64_t key = 0;
    Entry entry{};
    bool used = false;
  };
  static size_t mix(uint64_t k) {
    k *= 0x9E3779B97F4A7C15ull;
    return static_cast<size_t>(k ^ (k >> 29));
  }
  std::vector<Slot> slots_{Slot{}};
  size_t mask_ = 0;
  size_t size_ = 0;
};

// The word cache (the crate's Cache in models/bpe/model.rs): the ids of pieces already seen, so
// a frequent word is merged once. One per thread and model (encode runs on many threads at once
// and takes no lock); a few models per thread, the least recently made-room-for replaced. Bounded:
// pieces of at most kBpeCacheMaxBytes bytes, at most kBpeCacheEntries of them, emptied when full
// (at most a few MB per thread). Merging is deterministic (dropout is refused), so the cache
// changes no id.
constexpr size_t kBpeCacheMaxBytes = 64;
constexpr size_t kBpeCacheEntries = 16384;
constexpr size_t kBpeCacheSlots = 4;
// A thread keeps buffers for words of up to this many characters between calls.
constexpr size_t kBpeKeptSymbols = 1 << 16;

struct BpeWordCache {
  uint64_t owner = 0;  // the model's serial (never reused, unlike its address)
  std::unordered_map<std::string, std::u32string, StringHash, std::equal_to<>> map;
};

BpeWordCache& bpe_word_cache(uint64_t owner) {
  thread_local std::array<BpeWordCache, kBpeCacheSlots> caches;
  thread_local size_t next = 0;
  for (BpeWordCache& c : caches) {
    if (c.owner == owner) return c;
  }
  BpeWordCache& c = caches[next++ % kBpeCacheSlots];
  c.owner = owner;
  c.map = {};
  return c;
}

std::atomic<uint64_t> bpe_model_serial{0};

class BpeModel : public Model {
 public:
  BpeModel() : serial_(++bpe_model_serial) {}

  Status tokenize(std::string_view piece, std::vector<uint32_t>* out) const override {
    if (piece.empty()) return Status::Ok();
    if (ignore_merges_) {
      auto it = vocab_.find(piece);
      if (it != vocab_.end()) {
        out->push_back(it->second);
        return Status::Ok();
      }
    }
    if (piece.size() > kBpeCacheMaxBytes) return merge_word(piece, out);
    BpeWordCache& cache = bpe_word_cache(serial_);
    if (auto hit = cache.map.find(piece); hit != cache.map.end()) {
      out->insert(out->end(), hit->second.begin(), hit->second.end());
      return Status::Ok();
    }
    const size_t before = out->size();
    AX_RETURN_IF_ERROR(merge_word(piece, out));
    if (cache.map.size() >= kBpeCacheEntries) cache.map.clear();
    cache.map.emplace(std::string(piece),
                      std::u32string(out->begin() + static_cast<ptrdiff_t>(before), out->end()));
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
    int32_t prev;
    int32_t next;
    uint32_t len;  // bytes; 0 once merged into the symbol before it
  };
  struct Merge {
    uint32_t pos;
    uint32_t rank;
    uint32_t new_id;
    // The top of the heap is the lowest rank, then the lowest position.
    bool operator<(const Merge& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  // Buffers reused from piece to piece on each thread.
  struct Scratch {
    std::vector<Symbol> symbols;
    std::vector<Merge> heap;
    std::string s;
  };
  static Scratch& scratch() {
    thread_local Scratch s;
    return s;
  }

  // The id of one character as a symbol: a table for the characters below U+0800 when there is
  // no prefix or suffix to add (every byte-level character is one), the vocabulary otherwise.
  std::optional<uint32_t> char_id(std::string_view piece, size_t start, size_t end,
                                  std::string* s) const {
    if (plain_chars_) {
      const auto b0 = static_cast<unsigned char>(piece[start]);
      if (b0 < 0x80) return char_ids_[b0];
      if (end - start == 2) {
        const uint32_t cp =
            ((b0 & 0x1Fu) << 6) | (static_cast<unsigned char>(piece[start + 1]) & 0x3Fu);
        return char_ids_[cp];
      }
      auto it = vocab_.find(piece.substr(start, end - start));
      if (it == vocab_.end()) return std::nullopt;
      return it->second;
    }
    s->clear();
    if (start > 0 && prefix_) s->append(*prefix_);
    s->append(piece.substr(start, end - start));
    if (end >= piece.size() && suffix_) s->append(*suffix_);
    auto it = vocab_.find(*s);
    if (it == vocab_.end()) return std::nullopt;
    return it->second;
  }

  // The crate's merge_word and Word::merge_all: one symbol per character (unknown characters as
  // byte_fallback pieces or the unknown token), then the merges by rank.
  Status merge_word(std::string_view piece, std::vector<uint32_t>* out) const {
    if (piece.size() >= 0x7FFFFFFF)
      return InvalidArgument("BPE: a piece of ", piece.size(), " bytes");
    Scratch& scr = scratch();
    std::vector<Symbol>& symbols = scr.symbols;
    symbols.clear();
    symbols.reserve(piece.size());
    // A pending run of unknown characters: its id and bytes.
    bool unk = false;
    uint32_t unk_run_id = 0;
    uint32_t unk_run_len = 0;
    auto add = [&](uint32_t id, uint32_t len) {
      const auto index = static_cast<int32_t>(symbols.size());
      symbols.push_back({id, index - 1, index + 1, len});
    };
    size_t pos = 0;
    while (pos < piece.size()) {
      const size_t start = pos;
      pos = std::min(piece.size(), pos + char_len(static_cast<unsigned char>(piece[pos])));
      const auto byte_len = static_cast<uint32_t>(pos - start);
      if (std::optional<uint32_t> id = char_id(piece, start, pos, &scr.s)) {
        if (unk) {
          add(unk_run_id, unk_run_len);
          unk = false;
        }
        add(*id, byte_len);
        continue;
      }
      if (byte_fallback_) {
        // The character with its prefix and suffix, as the crate looks it up.
        std::string& s = scr.s;
        s.clear();
        if (start > 0 && prefix_) s += *prefix_;
        s.append(piece.substr(start, byte_len));
        if (pos >= piece.size() && suffix_) s += *suffix_;
        bool all = true;
        for (char c : s) all = all && byte_ids_[static_cast<unsigned char>(c)].has_value();
        if (all) {
          for (char c : s) add(*byte_ids_[static_cast<unsigned char>(c)], 1);
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
    if (symbols.empty()) return Status::Ok();
    symbols.back().next = -1;
    if (symbols.size() > 1) merge_all(&symbols, &scr.heap);
    for (const Symbol& sym : symbols) {
      if (sym.len != 0) out->push_back(sym.id);
    }
    // A huge word's buffers are not kept for the rest of the thread's life.
    if (symbols.capacity() > kBpeKeptSymbols) {
      symbols = {};
      scr.heap = {};
    }
    return Status::Ok();
  }

  // The crate's Word::merge_all: a heap of candidate pairs ordered by (rank, position), entries
  // that no longer match their pair skipped. O(n log n) in the number of symbols, so a 1 MB run of
  // one letter costs no more per byte than a word.
  void merge_all(std::vector<Symbol>* symbols_ptr, std::vector<Merge>* heap) const {
    std::vector<Symbol>& symbols = *symbols_ptr;
    heap->clear();
    heap->reserve(symbols.size());
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      if (const auto* m = merges_.find(symbols[i].id, symbols[i + 1].id)) {
        heap->push_back({static_cast<uint32_t>(i), m->rank, m->new_id});
      }
    }
    std::make_heap(heap->begin(), heap->end());
    auto push = [&](uint32_t pos, const BpePairTable::Entry& m) {
      heap->push_back({pos, m.rank, m.new_id});
      std::push_heap(heap->begin(), heap->end());
    };
    while (!heap->empty()) {
      std::pop_heap(heap->begin(), heap->end());
      const Merge top = heap->back();
      heap->pop_back();
      Symbol& cur = symbols[top.pos];
      if (cur.len == 0 || cur.next == -1) continue;
      const auto next_pos = static_cast<size_t>(cur.next);
      const Symbol right = symbols[next_pos];
      const auto* target = merges_.find(cur.id, right.id);
      if (target == nullptr || target->new_id != top.new_id) continue;  // an expired entry
      cur.id = top.new_id;
      cur.len += right.len;
      cur.next = right.next;
      symbols[next_pos].len = 0;
      if (right.next > -1 && static_cast<size_t>(right.next) < symbols.size()) {
        symbols[static_cast<size_t>(right.next)].prev = static_cast<int32_t>(top.pos);
      }
      if (cur.prev >= 0) {
        const auto prev = static_cast<uint32_t>(cur.prev);
        if (const auto* m = merges_.find(symbols[prev].id, cur.id)) push(prev, *m);
      }
      if (cur.next >= 0 && static_cast<size_t>(cur.next) < symbols.size()) {
        if (const auto* m = merges_.find(cur.id, symbols[static_cast<size_t>(cur.next)].id)) {
          push(top.pos, *m);
        }
      }
    }
  }

  const uint64_t serial_;
  Vocab vocab_;
  std::unordered_map<uint32_t, std::string> vocab_r_;
  BpePairTable merges_;
  std::array<std::optional<uint32_t>, 256> byte_ids_{};  // <0xNN> pieces
  // char_ids_[cp]: the id of the one-character token U+cp (cp < 0x800), when plain_chars_ (no
  // continuing_subword_prefix or end_of_word_suffix to add to it).
  std::vector<std::optional<uint32_t>> char_ids_;
  bool plain_chars_ = false;
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
  m->plain_chars_ = (!m->prefix_ || m->prefix_->empty()) && (!m->suffix_ || m->suffix_->empty());
  if (m->plain_chars_) {
    m->char_ids_.resize(0x800);
    std::string c;
    for (char32_t cp = 0; cp < 0x800; ++cp) {
      c.clear();
      append_utf8(cp, &c);
      m->char_ids_[cp] = m->token_to_id(c);
    }
  }
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
    m->merges_.set(*ia, *ib, {rank++, *inew});
  }
  return std::unique_ptr<Model>(std::move(m));
}

}  // namespace

StatusOr<std::unique_ptr<Model>> parse_bpe(const Json& j, const std::string& where) {
  return BpeModel::parse(j, where);
}

}  // namespace ax::data::hf
