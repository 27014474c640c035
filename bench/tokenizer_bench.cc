// ax-tokenizer-bench TOKENIZER TEXT [--doc-bytes N] [--seconds S]: encoding speed of one ax
// tokenizer (a tokenizer.json or a SentencePiece .model) on one thread. TEXT is cut into
// documents of whole lines, each at least --doc-bytes (8192) long; the documents are encoded one
// call each, passes repeated until --seconds (3) of CPU time have gone, and the fastest pass is
// reported. bench/tokenizer_bench.sh runs it beside tiktoken (bench/tiktoken_peer.js) on the
// same documents; docs/benchmarks-data.md "Byte-level BPE against tiktoken".
//
// Prints one line of JSON: {"mb": ..., "tokens": ..., "checksum": ..., "seconds": ...,
// "mb_per_s": ..., "load_s": ...}; checksum is the sum over tokens of (id * (position + 1))
// mod 2^32 per document, summed mod 2^32 — the same as tiktoken_peer.js computes, so equal
// checksums say both sides made the same ids.
#include <time.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "ax/common/file_io.h"
#include "ax/common/strings.h"
#include "ax/datasets/text/tokenizer.h"

namespace {

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Whole lines, each document at least `doc_bytes` long (the last one may be shorter).
std::vector<std::string> documents(const std::string& text, size_t doc_bytes) {
  std::vector<std::string> docs;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = start;
    while (end < text.size() && end - start < doc_bytes) {
      const size_t nl = text.find('\n', end);
      end = nl == std::string::npos ? text.size() : nl + 1;
    }
    docs.push_back(text.substr(start, end - start));
    start = end;
  }
  return docs;
}

int usage() {
  std::cerr << "usage: ax-tokenizer-bench TOKENIZER TEXT [--doc-bytes N] [--seconds S]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return usage();
  const std::string tokenizer_path = argv[1];
  const std::string text_path = argv[2];
  size_t doc_bytes = 8192;
  double seconds = 3.0;
  for (int i = 3; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--doc-bytes") {
      doc_bytes = std::strtoull(argv[i + 1], nullptr, 10);
    } else if (flag == "--seconds") {
      seconds = std::strtod(argv[i + 1], nullptr);
    } else {
      return usage();
    }
  }
  const double load_start = cpu_seconds();
  auto tok = ax::data::Tokenizer::load(tokenizer_path);
  if (!tok.ok()) {
    std::cerr << "ax-tokenizer-bench: " << tok.status().to_string() << "\n";
    return 1;
  }
  const double load_s = cpu_seconds() - load_start;
  auto text = ax::read_file(text_path);
  if (!text.ok()) {
    std::cerr << "ax-tokenizer-bench: " << text.status().to_string() << "\n";
    return 1;
  }
  const std::vector<std::string> docs = documents(*text, doc_bytes);
  const double mb = static_cast<double>(text->size()) / 1e6;

  std::vector<uint32_t> ids;
  double best = 1e300, spent = 0;
  uint64_t tokens = 0;
  uint32_t checksum = 0;
  int passes = 0;
  while (passes < 2 || spent < seconds) {
    tokens = 0;
    checksum = 0;
    const double t0 = cpu_seconds();
    for (const std::string& doc : docs) {
      ids.clear();
      ax::Status st = (*tok)->encode(doc, &ids);
      if (!st.ok()) {
        std::cerr << "ax-tokenizer-bench: " << st.to_string() << "\n";
        return 1;
      }
      uint32_t sum = 0;
      for (size_t k = 0; k < ids.size(); ++k) sum += ids[k] * static_cast<uint32_t>(k + 1);
      checksum += sum;
      tokens += ids.size();
    }
    const double dt = cpu_seconds() - t0;
    best = std::min(best, dt);
    spent += dt;
    ++passes;
  }
  std::printf(
      "{\"mb\": %.3f, \"docs\": %zu, \"tokens\": %llu, \"checksum\": %u, \"passes\": %d, "
      "\"seconds\": %.4f, \"mb_per_s\": %.3f, \"load_s\": %.3f}\n",
      mb, docs.size(), static_cast<unsigned long long>(tokens), checksum, passes, best, mb / best,
      load_s);
  return 0;
}
