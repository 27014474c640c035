// Task metrics of the fine-tuning and zero-shot evaluations (docs/evaluation.md): MNLI accuracy,
// SQuAD v1.1 exact match and F1 with the official answer normalisation, Lambada last-word
// accuracy and perplexity. Pure functions of strings and token ids; no model.
//
// Each metric accumulates into a *Sums struct whose fields are all integers, so sums add in any
// order to the same bits: a sharded evaluation adds every rank's sums (operator+=, or an
// all-reduce of the fields) and gets exactly the numbers of one process. Real-valued parts (an
// F1 score, a log-likelihood) are held in fixed point; the rounding is per example and far below
// what any reported digit shows.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ax::train {

// Fixed-point units of the real-valued sums: F1 in [0, 1] (2^-40 each), log-likelihoods in
// nats (2^-24 each; a sum overflows only beyond 5e11 nats).
inline constexpr double kF1Unit = 1.0 / static_cast<double>(int64_t{1} << 40);
inline constexpr double kNllUnit = 1.0 / static_cast<double>(int64_t{1} << 24);

// --- accuracy (MNLI and other label-word tasks) ----------------------------------------------

// A prediction is right when it is exactly the target string (T5's label words: "entailment",
// "neutral", "contradiction"); anything else, an empty or unknown word included, is wrong.
struct AccuracySums {
  int64_t correct = 0;
  int64_t total = 0;

  void add(std::string_view prediction, std::string_view target);
  AccuracySums& operator+=(const AccuracySums& other);
  double accuracy() const;  // percent; 0 when empty
};

// --- SQuAD v1.1 -------------------------------------------------------------------------------

// The official evaluation script's normalize_answer: lower case, remove ASCII punctuation
// (Python's string.punctuation, nothing else), remove the words a, an, the (regex
// \b(a|an|the)\b on the text so far, so "theater" keeps its "the"), and join the white-space
// separated words with single spaces. Text is UTF-8. Lower case, \w and white space are those of
// Python 3.11 (Unicode 14; tables generated from its unicodedata by python_unicode.py): compared
// with Python once for every code point and 30,000 random strings, the one difference is a
// capital sigma at a word's end, which becomes σ where Python writes ς.
std::string squad_normalize_answer(std::string_view text);

// normalize(prediction) == normalize(ground_truth).
bool squad_exact_match(std::string_view prediction, std::string_view ground_truth);

// Token-level F1 of the normalised words (a multiset overlap): 2·common / (|pred| + |truth|),
// 0 when nothing is in common, also when both normalise to nothing (as the v1.1 script does).
double squad_f1(std::string_view prediction, std::string_view ground_truth);

struct SquadScores {
  double exact_match = 0;  // percent
  double f1 = 0;           // percent
  int64_t count = 0;
};

// Exact match and F1 each take the best over the question's ground-truth answers; a question
// without any answers scores 0 on both.
struct SquadSums {
  int64_t exact_match = 0;  // questions matched exactly
  int64_t f1 = 0;           // sum of the best F1 per question, in kF1Unit
  int64_t count = 0;

  void add(std::string_view prediction, std::span<const std::string> ground_truths);
  SquadSums& operator+=(const SquadSums& other);
  SquadScores finalize() const;
};

// --- Lambada ----------------------------------------------------------------------------------

// True when every token of the target word was the greedy (argmax) choice at its position:
// greedy[i] is the argmax of the model's prediction for the position of target[i]. An empty
// target is never right. The spans must be of equal length.
bool last_word_correct(std::span<const int32_t> target, std::span<const int32_t> greedy);

struct LambadaScores {
  double accuracy = 0;  // percent of texts whose last word is the greedy continuation
  // exp(mean over texts of the word's summed NLL): lm-evaluation-harness's lambada perplexity.
  double doc_perplexity = 0;
  double token_perplexity = 0;  // exp(summed NLL / target tokens)
  int64_t count = 0;
};

struct LambadaSums {
  int64_t correct = 0;
  int64_t count = 0;
  int64_t tokens = 0;  // target tokens
  int64_t nll = 0;     // summed negative log-likelihood of the target tokens, in kNllUnit

  // One text: its last word's tokens, the greedy choices at their positions, and the word's
  // summed NLL in nats (minus the log-probabilities of its tokens).
  void add(std::span<const int32_t> target, std::span<const int32_t> greedy, double word_nll);
  LambadaSums& operator+=(const LambadaSums& other);
  LambadaScores finalize() const;
};

// --- perplexity -------------------------------------------------------------------------------

// exp(nll / tokens) for a summed NLL in nats; 0 tokens gives 0 (nothing measured).
double perplexity(double nll, int64_t tokens);

}  // namespace ax::train
