// Writes the fuzzer's seed corpus into DIR: small valid shards of several shapes (frame sizes,
// kinds, document lengths, an empty shard), each a few KB so the fuzzer mutates them quickly.
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "ax/datasets/shards/shard_writer.h"

namespace {

struct Seed {
  uint32_t frame_tokens;
  ax::data::ShardKind kind;
  int docs;
  int max_len;
  uint32_t vocab;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const std::vector<Seed> seeds = {
      {1, ax::data::ShardKind::kLm, 3, 4, 100},
      {3, ax::data::ShardKind::kLm, 5, 9, 50000},
      {16, ax::data::ShardKind::kLm, 20, 40, 300},
      {64, ax::data::ShardKind::kSeq2Seq, 10, 50, 32000},
      {256, ax::data::ShardKind::kLm, 8, 200, 8},
      {1000, ax::data::ShardKind::kLm, 2, 600, 50000},
      {7, ax::data::ShardKind::kSeq2Seq, 0, 1, 10},
  };
  std::mt19937 rng(1);
  for (size_t i = 0; i < seeds.size(); ++i) {
    const Seed& s = seeds[i];
    ax::data::ShardWriterOptions options;
    options.kind = s.kind;
    options.frame_tokens = s.frame_tokens;
    options.tokenizer_hash = rng();
    const std::string path = dir + "/seed-" + std::to_string(i) + ".axs";
    auto writer = ax::data::ShardWriter::create(path, options);
    if (!writer.ok()) {
      std::fprintf(stderr, "%s\n", writer.status().to_string().c_str());
      return 1;
    }
    for (int d = 0; d < s.docs; ++d) {
      std::vector<uint32_t> doc(1 + rng() % s.max_len);
      for (uint32_t& t : doc) t = rng() % s.vocab;
      doc.back() = 1;
      ax::Status st = (*writer)->add_document(doc);
      if (!st.ok()) {
        std::fprintf(stderr, "%s\n", st.to_string().c_str());
        return 1;
      }
    }
    auto entry = (*writer)->finish();
    if (!entry.ok()) {
      std::fprintf(stderr, "%s\n", entry.status().to_string().c_str());
      return 1;
    }
  }
  return 0;
}
