#include "ax/trainer/eval/task_metrics.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "ax/common/check.h"
#include "ax/datasets/text/text_source.h"  // append_utf8
#include "python_unicode.h"

namespace ax::train {
namespace {

// --- UTF-8 ------------------------------------------------------------------------------------

// Code points of UTF-8 text; a byte that does not start a valid sequence becomes U+FFFD.
std::u32string decode_utf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    const int len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    char32_t c = len == 1 ? b : len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
    bool ok = len > 0 && i + static_cast<size_t>(len) <= s.size();
    for (int k = 1; ok && k < len; ++k) {
      const auto t = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
      ok = (t & 0xC0) == 0x80;
      c = (c << 6) | (t & 0x3F);
    }
    if (!ok) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    out.push_back(c);
    i += static_cast<size_t>(len);
  }
  return out;
}

// --- the character classes of Python's str methods and re --------------------------------------

bool in(char32_t c, char32_t lo, char32_t hi) { return c >= lo && c <= hi; }

// str.isspace(), what str.split() splits on.
bool is_space(char32_t c) {
  return in(c, 0x09, 0x0D) || in(c, 0x1C, 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         in(c, 0x2000, 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// Python's string.punctuation: the 32 ASCII punctuation characters.
bool is_ascii_punctuation(char32_t c) {
  return in(c, 0x21, 0x2F) || in(c, 0x3A, 0x40) || in(c, 0x5B, 0x60) || in(c, 0x7B, 0x7E);
}

// The entry of a sorted table whose range may hold c.
template <typename T, size_t N>
const T* find_range(const T (&table)[N], char32_t c) {
  const T* it =
      std::upper_bound(table, table + N, c, [](char32_t v, const T& e) { return v < e.lo; });
  if (it == table) return nullptr;
  --it;
  return c <= it->hi ? it : nullptr;
}

// re's \w for str patterns: str.isalnum() or '_'.
bool is_word(char32_t c) {
  if (c < 0x80) return in(c, '0', '9') || in(c, 'a', 'z') || in(c, 'A', 'Z') || c == '_';
  return find_range(python_unicode::kAlnum, c) != nullptr;
}

// str.lower(), one code point at a time (so without the final-sigma rule).
void append_lower(char32_t c, std::u32string* out) {
  if (c < 0x80) {
    out->push_back(in(c, 'A', 'Z') ? c + 0x20 : c);
    return;
  }
  if (c == 0x130) {  // İ: i and a combining dot above
    out->push_back('i');
    out->push_back(0x307);
    return;
  }
  const python_unicode::LowerRun* run = find_range(python_unicode::kLower, c);
  const bool maps = run != nullptr && (c - run->lo) % static_cast<char32_t>(run->stride) == 0;
  out->push_back(maps ? static_cast<char32_t>(static_cast<int32_t>(c) + run->delta) : c);
}

// The words of normalize_answer's output.
std::vector<std::string> normalized_words(std::string_view text) {
  // lower, then remove punctuation
  std::u32string s;
  for (char32_t c : decode_utf8(text)) {
    std::u32string lower;
    append_lower(c, &lower);
    for (char32_t l : lower) {
      if (!is_ascii_punctuation(l)) s.push_back(l);
    }
  }
  // re.sub(r'\b(a|an|the)\b', ' ', s): left to right, the boundaries judged on s itself, the
  // alternatives tried in order.
  auto word_at = [&](size_t i) { return i < s.size() && is_word(s[i]); };
  auto matches = [&](size_t i, std::u32string_view w) {
    return s.compare(i, w.size(), w) == 0 && !word_at(i + w.size());
  };
  std::u32string t;
  for (size_t i = 0; i < s.size();) {
    size_t len = 0;
    if (i == 0 || !is_word(s[i - 1])) {
      for (std::u32string_view w : {U"a", U"an", U"the"}) {
        if (matches(i, w)) {
          len = w.size();
          break;
        }
      }
    }
    if (len > 0) {
      t.push_back(' ');
      i += len;
    } else {
      t.push_back(s[i++]);
    }
  }
  // ' '.join(s.split())
  std::vector<std::string> words;
  std::string word;
  for (char32_t c : t) {
    if (is_space(c)) {
      if (!word.empty()) words.push_back(std::move(word));
      word.clear();
    } else {
      data::append_utf8(c, &word);
    }
  }
  if (!word.empty()) words.push_back(std::move(word));
  return words;
}

double percent(int64_t part, int64_t whole) {
  return whole > 0 ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0.0;
}

}  // namespace

// --- accuracy ---------------------------------------------------------------------------------

void AccuracySums::add(std::string_view prediction, std::string_view target) {
  correct += prediction == target ? 1 : 0;
  ++total;
}

AccuracySums& AccuracySums::operator+=(const AccuracySums& other) {
  correct += other.correct;
  total += other.total;
  return *this;
}

double AccuracySums::accuracy() const { return percent(correct, total); }

// --- SQuAD ------------------------------------------------------------------------------------

std::string squad_normalize_answer(std::string_view text) {
  std::string out;
  for (const std::string& w : normalized_words(text)) {
    if (!out.empty()) out.push_back(' ');
    out += w;
  }
  return out;
}

bool squad_exact_match(std::string_view prediction, std::string_view ground_truth) {
  return squad_normalize_answer(prediction) == squad_normalize_answer(ground_truth);
}

double squad_f1(std::string_view prediction, std::string_view ground_truth) {
  const std::vector<std::string> pred = normalized_words(prediction);
  const std::vector<std::string> truth = normalized_words(ground_truth);
  std::map<std::string, int64_t> counts;  // Counter(pred) & Counter(truth)
  for (const std::string& w : pred) ++counts[w];
  int64_t common = 0;
  for (const std::string& w : truth) {
    auto it = counts.find(w);
    if (it != counts.end() && it->second > 0) {
      --it->second;
      ++common;
    }
  }
  if (common == 0) return 0.0;
  return 2.0 * static_cast<double>(common) / static_cast<double>(pred.size() + truth.size());
}

void SquadSums::add(std::string_view prediction, std::span<const std::string> ground_truths) {
  bool exact = false;
  double best_f1 = 0;
  for (const std::string& truth : ground_truths) {
    exact = exact || squad_exact_match(prediction, truth);
    best_f1 = std::max(best_f1, squad_f1(prediction, truth));
  }
  exact_match += exact ? 1 : 0;
  f1 += std::llround(best_f1 / kF1Unit);
  ++count;
}

SquadSums& SquadSums::operator+=(const SquadSums& other) {
  exact_match += other.exact_match;
  f1 += other.f1;
  count += other.count;
  return *this;
}

SquadScores SquadSums::finalize() const {
  SquadScores s;
  s.count = count;
  s.exact_match = percent(exact_match, count);
  s.f1 = count > 0 ? 100.0 * static_cast<double>(f1) * kF1Unit / static_cast<double>(count) : 0;
  return s;
}

// --- Lambada ----------------------------------------------------------------------------------

bool last_word_correct(std::span<const int32_t> target, std::span<const int32_t> greedy) {
  AX_CHECK_EQ(target.size(), greedy.size());
  return !target.empty() && std::equal(target.begin(), target.end(), greedy.begin());
}

void LambadaSums::add(std::span<const int32_t> target, std::span<const int32_t> greedy,
                      double word_nll) {
  correct += last_word_correct(target, greedy) ? 1 : 0;
  ++count;
  tokens += static_cast<int64_t>(target.size());
  nll += std::llround(word_nll / kNllUnit);
}

LambadaSums& LambadaSums::operator+=(const LambadaSums& other) {
  correct += other.correct;
  count += other.count;
  tokens += other.tokens;
  nll += other.nll;
  return *this;
}

LambadaScores LambadaSums::finalize() const {
  LambadaScores s;
  s.count = count;
  s.accuracy = percent(correct, count);
  const double total_nll = static_cast<double>(nll) * kNllUnit;
  s.doc_perplexity = perplexity(total_nll, count);
  s.token_perplexity = perplexity(total_nll, tokens);
  return s;
}

double perplexity(double nll, int64_t tokens) {
  return tokens > 0 ? std::exp(nll / static_cast<double>(tokens)) : 0.0;
}

}  // namespace ax::train
