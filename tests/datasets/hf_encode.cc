// hf_encode TOKENIZER_JSON < texts.jsonl > ids.jsonl: each input line {"text": "..."} becomes
// one output line {"ids": [...], "decoded": "..."} (HfTokenizer's encode, without special tokens,
// and its decode of those ids). The side of ax in hf_tokenizer/compare_full.sh, which compares
// it with the Rust tokenizers crate on megabytes of text.
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ax/datasets/text/hf_tokenizer.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: hf_encode TOKENIZER_JSON < texts.jsonl > ids.jsonl\n";
    return 2;
  }
  auto tok = ax::data::HfTokenizer::load(argv[1]);
  if (!tok.ok()) {
    std::cerr << "hf_encode: " << tok.status().to_string() << "\n";
    return 1;
  }
  std::ios::sync_with_stdio(false);
  std::string line;
  std::vector<uint32_t> ids;
  size_t n = 0;
  while (std::getline(std::cin, line)) {
    ++n;
    const std::string text = nlohmann::json::parse(line).at("text").get<std::string>();
    ids.clear();
    ax::Status st = (*tok)->encode(text, &ids);
    if (!st.ok()) {
      std::cerr << "hf_encode: line " << n << ": " << st.to_string() << "\n";
      return 1;
    }
    auto decoded = (*tok)->decode(ids);
    if (!decoded.ok()) {
      std::cerr << "hf_encode: line " << n << ": " << decoded.status().to_string() << "\n";
      return 1;
    }
    nlohmann::json out = {{"ids", ids}, {"decoded", *decoded}};
    std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }
  return 0;
}
