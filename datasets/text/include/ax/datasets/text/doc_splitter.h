// How `ax-data tokenize` cuts a long document into pieces that are encoded one at a time (in
// parallel) and joined: SentencePiece needs about 100 bytes of memory per byte of text it encodes
// at once, and slows down as the text grows. docs/tokenization.md describes the seams.
//
// A document of at most max_bytes is one piece. A longer one is cut into pieces of max_bytes / 2
// to max_bytes bytes (the last may be shorter), each cut the last of these within its window:
//   1. a single space between two other characters (neither a space): the seam the tokenizer
//      encodes exactly as the whole text when its model allows (Tokenizer::seam_style);
//   2. after any ASCII white space character;
//   3. any UTF-8 character boundary (text without white space).
// The cuts depend only on the document's bytes and max_bytes, never on how it was read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ax::data {

// What happens to the space at a seam of kind 1.
enum class SeamStyle {
  kDropSpace,        // left out: the next piece's dummy prefix "▁" stands for it
  kSpaceToNext,      // starts the next piece
  kSpaceToPrevious,  // ends the previous piece (models that treat white space as a suffix)
};

class DocSplitter {
 public:
  // max_bytes >= 16.
  DocSplitter(size_t max_bytes, SeamStyle style);

  // The next bytes of the current document (valid UTF-8, cut anywhere between characters).
  // Appends the pieces now complete to out; with `last` the document ends and the rest follows.
  void add(std::string_view text, bool last, std::vector<std::string>* out);

  // Over every document so far: cuts made, by kind (1, 2, 3 above).
  uint64_t space_seams() const { return seams_[0]; }
  uint64_t white_space_seams() const { return seams_[1]; }
  uint64_t character_seams() const { return seams_[2]; }

 private:
  // Cuts one piece off the front of the pending text (which holds more than max_bytes).
  void cut(std::vector<std::string>* out);

  size_t max_bytes_;
  SeamStyle style_;
  std::string pending_;  // text not yet in a piece starts at pending_[start_]
  size_t start_ = 0;
  uint64_t seams_[3] = {0, 0, 0};
};

}  // namespace ax::data
