// A small SentencePiece model for the tests that tokenize (trained once per test process).
#pragma once

#include <string>

namespace ax::data::testing {

// A 400-piece model ("bpe" or "unigram") trained on sample_english(40); the path of its .model.
const std::string& small_model(const std::string& type = "bpe");

}  // namespace ax::data::testing
