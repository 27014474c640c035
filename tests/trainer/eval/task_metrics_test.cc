// The task metrics against cases computed by hand (and, for the normalisation, by the official
// SQuAD v1.1 script's normalize_answer run on the same strings).
#include "ax/trainer/eval/task_metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace ax::train {
namespace {

TEST(Accuracy, ExactLabelWordOnly) {
  AccuracySums sums;
  sums.add("entailment", "entailment");
  sums.add("neutral", "neutral");
  sums.add("Entailment", "entailment");  // case differs
  sums.add(" neutral", "neutral");       // a space differs
  sums.add("", "contradiction");         // nothing decoded
  sums.add("maybe", "contradiction");    // not a label word
  sums.add("contradiction", "neutral");
  sums.add("contradiction", "contradiction");
  EXPECT_EQ(sums.correct, 3);
  EXPECT_EQ(sums.total, 8);
  EXPECT_DOUBLE_EQ(sums.accuracy(), 37.5);
  EXPECT_EQ(AccuracySums{}.accuracy(), 0.0);
}

TEST(Accuracy, ShardSumsAddUp) {
  AccuracySums a, b;
  a.add("neutral", "neutral");
  b.add("neutral", "entailment");
  b.add("entailment", "entailment");
  a += b;
  EXPECT_EQ(a.correct, 2);
  EXPECT_EQ(a.total, 3);
}

struct NormCase {
  const char* in;
  const char* out;
};

TEST(SquadNormalize, OfficialScriptCases) {
  const NormCase cases[] = {
      {"The Theater", "theater"},        // "the" inside a word stays
      {"  a  ", ""},                     // only an article
      {"A", ""},                         // upper case first, then the article goes
      {"an", ""},                        // the second alternative
      {"and", "and"},                    // "an" followed by a letter is no article
      {"another", "another"},            //
      {"thea", "thea"},                  //
      {"the1", "the1"},                  // a digit is a word character
      {"a-the", "athe"},                 // punctuation goes before the articles
      {"Hello, World!", "hello world"},  //
      {"3.14", "314"},                   // punctuation inside numbers
      {"1,000", "1000"},                 //
      {"$5", "5"},                       //
      {"U.S.", "us"},                    //
      {"don't", "dont"},                 //
      {"a_b", "ab"},                     // '_' is in string.punctuation
      {"an apple and a pear", "apple and pear"},
      {"the\u2014the", "\u2014"},  // an em dash is no ASCII punctuation, but
                                   // it ends a word
      {"\u201cThe\u201d answer", "\u201c \u201d answer"},  // curly quotes stay
      {"\u00e9the", "\u00e9the"},                          // é is a letter: no boundary
      {"caf\u00e9 the", "caf\u00e9"},                      //
      {"th\u00e9\u00e2tre", "th\u00e9\u00e2tre"},          //
      {"\u00c9COLE", "\u00e9cole"},                        // Latin-1 capitals
      {"\u00c0 la carte", "\u00e0 la carte"},              //
      {"\u0130stanbul", "i\u0307stanbul"},                 // İ lowers to two code points
      {"\u0391\u0398\u0397\u039d\u0391", "\u03b1\u03b8\u03b7\u03bd\u03b1"},  // Greek
      {"10\u00a0km", "10 km"},                                               // no-break space
      {"x\u2009y", "x y"},                                                   // thin space
      {"\tthe  big\n\ncat ", "big cat"},
      // The Unicode tables (python_unicode.h): lower case beyond Latin-1 and Greek, \w.
      {"\u0181ig", "\u0253ig"},                // Latin Extended-B
      {"\u216b", "\u217b"},                    // Roman numeral twelve
      {"\u24b6", "\u24d0"},                    // circled A
      {"\U00010400", "\U00010428"},            // Deseret, four UTF-8 bytes
      {"the\u0301", "\u0301"},                 // a combining mark is no word character
      {"\u00b2the", "\u00b2the"},              // superscript two is a digit
      {"\u0661the", "\u0661the"},              // Arabic-Indic one
      {"\u4e00the", "\u4e00the"},              // a CJK ideograph is a letter
      {"\ue000the", "\ue000"},                 // private use is not
      {"the\u00a0end", "end"},                 //
      {"x\u03a3 \u03a3x", "x\u03c3 \u03c3x"},  // Python gives "x\u03c2 \u03c3x" (final sigma)
  };
  for (const NormCase& c : cases) {
    EXPECT_EQ(squad_normalize_answer(c.in), c.out) << c.in;
  }
}

TEST(SquadNormalize, InvalidUtf8BecomesReplacementCharacters) {
  EXPECT_EQ(squad_normalize_answer("x\xff"
                                   "y"),
            "x\uFFFDy");
}

TEST(SquadF1, TokenOverlap) {
  // pred [cat, sat], truth [cat, sat, on, mat]: P = 1, R = 1/2.
  EXPECT_DOUBLE_EQ(squad_f1("the cat sat", "a cat sat on the mat"), 2.0 / 3.0);
  // A multiset overlap: min(2, 1) dogs + min(1, 2) cats = 2 of 3 and 3.
  EXPECT_DOUBLE_EQ(squad_f1("dog dog cat", "dog cat cat"), 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(squad_f1("Denver Broncos", "the denver broncos."), 1.0);
  EXPECT_DOUBLE_EQ(squad_f1("", "Denver"), 0.0);
  EXPECT_DOUBLE_EQ(squad_f1("Denver", ""), 0.0);
  // Both normalise to nothing: exact, yet F1 0 (v1.1's script; v2.0 would give 1).
  EXPECT_TRUE(squad_exact_match("the", "a"));
  EXPECT_DOUBLE_EQ(squad_f1("the", "a"), 0.0);
  EXPECT_FALSE(squad_exact_match("", "Denver"));
}

TEST(SquadSums, BestOverGroundTruths) {
  SquadSums sums;
  const std::vector<std::string> broncos = {"Denver Broncos", "The Denver Broncos", "Broncos"};
  sums.add("denver broncos!", broncos);  // EM 1, F1 1
  const std::vector<std::string> two = {"Denver Broncos", "Broncos"};
  sums.add("Broncos team", two);  // EM 0, F1 max(1/2, 2/3)
  sums.add("", two);              // empty prediction: 0, 0
  const std::vector<std::string> none;
  sums.add("anything", none);  // no ground truth: 0, 0
  const SquadScores s = sums.finalize();
  EXPECT_EQ(s.count, 4);
  EXPECT_DOUBLE_EQ(s.exact_match, 25.0);
  EXPECT_NEAR(s.f1, 100.0 * (1.0 + 2.0 / 3.0) / 4.0, 1e-9);
  EXPECT_EQ(sums.exact_match, 1);
  EXPECT_EQ(SquadSums{}.finalize().f1, 0.0);
}

TEST(SquadSums, ShardsGiveTheSameBitsInAnyOrder) {
  const std::vector<std::string> preds = {"a cat", "the dog sat", "two", "1,000 men", "x y z"};
  const std::vector<std::vector<std::string>> truths = {
      {"cat"}, {"dog sat down", "a dog"}, {"three"}, {"1000 men", "men"}, {"y z w"}};
  SquadSums whole;
  for (size_t i = 0; i < preds.size(); ++i) whole.add(preds[i], truths[i]);
  SquadSums even, odd;
  for (size_t i = 0; i < preds.size(); ++i) (i % 2 == 0 ? even : odd).add(preds[i], truths[i]);
  SquadSums merged = odd;
  merged += even;
  EXPECT_EQ(merged.exact_match, whole.exact_match);
  EXPECT_EQ(merged.f1, whole.f1);
  EXPECT_EQ(merged.count, whole.count);
  EXPECT_EQ(merged.finalize().f1, whole.finalize().f1);
}

TEST(Lambada, EveryTokenOfTheWordMustBeGreedy) {
  const std::vector<int32_t> word = {17, 4, 250};
  EXPECT_TRUE(last_word_correct(word, std::vector<int32_t>{17, 4, 250}));
  EXPECT_FALSE(last_word_correct(word, std::vector<int32_t>{17, 4, 251}));  // last token wrong
  EXPECT_FALSE(last_word_correct(word, std::vector<int32_t>{18, 4, 250}));  // first token wrong
  EXPECT_FALSE(last_word_correct({}, {}));
  EXPECT_DEATH(last_word_correct(word, std::vector<int32_t>{17, 4}), "");
}

TEST(Lambada, AccuracyAndBothPerplexities) {
  LambadaSums a, b;
  a.add(std::vector<int32_t>{5, 6}, std::vector<int32_t>{5, 6}, 2.0);  // right, 2 tokens
  b.add(std::vector<int32_t>{9}, std::vector<int32_t>{8}, 4.0);        // wrong, 1 token
  LambadaSums sums = a;
  sums += b;
  const LambadaScores s = sums.finalize();
  EXPECT_EQ(s.count, 2);
  EXPECT_EQ(sums.tokens, 3);
  EXPECT_DOUBLE_EQ(s.accuracy, 50.0);
  EXPECT_NEAR(s.doc_perplexity, std::exp(6.0 / 2.0), 1e-9);    // per text
  EXPECT_NEAR(s.token_perplexity, std::exp(6.0 / 3.0), 1e-9);  // per token
}

TEST(Perplexity, FromSummedNll) {
  EXPECT_NEAR(perplexity(10 * std::log(40.06), 10), 40.06, 1e-9);
  EXPECT_DOUBLE_EQ(perplexity(0, 5), 1.0);
  EXPECT_EQ(perplexity(3.0, 0), 0.0);
}

}  // namespace
}  // namespace ax::train
