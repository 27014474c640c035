#include "ax/datasets/text/doc_splitter.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "ax/datasets/text/text_source.h"
#include "test_util.h"

namespace ax::data {
namespace {

std::vector<std::string> split_all(std::string_view text, size_t max, SeamStyle style,
                                   DocSplitter* splitter = nullptr) {
  DocSplitter local(max, style);
  DocSplitter& s = splitter != nullptr ? *splitter : local;
  std::vector<std::string> out;
  s.add(text, /*last=*/true, &out);
  return out;
}

std::string join(const std::vector<std::string>& pieces, const std::string& sep = "") {
  std::string out;
  for (size_t i = 0; i < pieces.size(); ++i) out += (i > 0 ? sep : "") + pieces[i];
  return out;
}

const std::string& english() {
  static const std::string text = [] {
    std::string t = testing::sample_english(60);
    for (char& c : t) {
      if (c == '\n') c = ' ';
    }
    return t;
  }();
  return text;
}

TEST(DocSplitter, ShortDocumentIsOnePiece) {
  EXPECT_EQ(split_all("a short document", 64, SeamStyle::kDropSpace),
            std::vector<std::string>{"a short document"});
}

TEST(DocSplitter, CutsAtLoneSpacesWithinHalfToFullSize) {
  for (SeamStyle style :
       {SeamStyle::kDropSpace, SeamStyle::kSpaceToNext, SeamStyle::kSpaceToPrevious}) {
    DocSplitter splitter(500, style);
    const std::vector<std::string> pieces = split_all(english(), 500, style, &splitter);
    ASSERT_GT(pieces.size(), 20u);
    for (size_t i = 0; i + 1 < pieces.size(); ++i) {
      EXPECT_GE(pieces[i].size(), 249u) << i;
      EXPECT_LE(pieces[i].size(), 500u) << i;
    }
    EXPECT_EQ(splitter.space_seams(), pieces.size() - 1);
    EXPECT_EQ(splitter.white_space_seams() + splitter.character_seams(), 0u);
    // Where the space went: left out (the dummy prefix stands for it), or kept on one side.
    if (style == SeamStyle::kDropSpace) {
      EXPECT_EQ(join(pieces, " "), english());
      for (const std::string& p : pieces) EXPECT_NE(p.front(), ' ');
    } else {
      EXPECT_EQ(join(pieces), english());
      const bool next = style == SeamStyle::kSpaceToNext;
      for (size_t i = 1; i < pieces.size(); ++i) {
        EXPECT_EQ(next ? pieces[i].front() : pieces[i - 1].back(), ' ') << i;
      }
    }
  }
}

TEST(DocSplitter, SameCutsHoweverTheTextArrives) {
  const std::vector<std::string> whole = split_all(english(), 300, SeamStyle::kDropSpace);
  std::mt19937 rng(3);
  for (int trial = 0; trial < 20; ++trial) {
    DocSplitter splitter(300, SeamStyle::kDropSpace);
    std::vector<std::string> pieces;
    size_t at = 0;
    while (at < english().size()) {
      const size_t n = std::min<size_t>(english().size() - at, rng() % 700 + 1);
      splitter.add(std::string_view(english()).substr(at, n), at + n == english().size(), &pieces);
      at += n;
    }
    EXPECT_EQ(pieces, whole) << "trial " << trial;
  }
}

TEST(DocSplitter, FallsBackToWhiteSpaceThenCharacters) {
  // Only runs of two spaces and newlines: no lone space, so cuts come after white space.
  std::string runs;
  for (int i = 0; runs.size() < 2000; ++i) runs += "word" + std::to_string(i) + "\n\n  ";
  DocSplitter ws(100, SeamStyle::kDropSpace);
  const std::vector<std::string> ws_pieces = split_all(runs, 100, SeamStyle::kDropSpace, &ws);
  EXPECT_EQ(join(ws_pieces), runs);
  EXPECT_GT(ws.white_space_seams(), 15u);
  EXPECT_EQ(ws.space_seams() + ws.character_seams(), 0u);
  for (size_t i = 0; i + 1 < ws_pieces.size(); ++i) {
    EXPECT_NE(std::string(" \n").find(ws_pieces[i].back()), std::string::npos);
  }

  // Japanese without spaces: cuts between characters, never inside one.
  std::string cjk;
  while (cjk.size() < 3000) cjk += "東京の空は青いです。猫が寝ている。";
  DocSplitter chars(100, SeamStyle::kDropSpace);
  const std::vector<std::string> pieces = split_all(cjk, 100, SeamStyle::kDropSpace, &chars);
  EXPECT_EQ(join(pieces), cjk);
  EXPECT_EQ(chars.character_seams(), pieces.size() - 1);
  for (size_t i = 0; i < pieces.size(); ++i) {
    EXPECT_TRUE(is_valid_utf8(pieces[i]));
    EXPECT_LE(pieces[i].size(), 100u);
    if (i + 1 < pieces.size()) {
      EXPECT_GE(pieces[i].size(), 48u);
    }
  }
}

}  // namespace
}  // namespace ax::data
