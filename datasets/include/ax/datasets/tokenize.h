// `ax-data tokenize`: text sources → tokens (all cores, one shared tokenizer, output order equal to
// input order whatever the thread count) → shard set. EOS is appended to every document.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ax/common/status.h"
#include "ax/datasets/dataset_index.h"
#include "ax/datasets/text_source.h"

namespace ax::data {

struct TokenizeOptions {
  std::vector<std::string> inputs;
  std::string tokenizer_path;
  std::string output_dir;
  TextSourceOptions source;  // source.seq2seq selects --format seq2seq
  int threads = 0;           // 0 = all cores
  uint64_t shard_tokens = uint64_t{64} << 20;
  int zstd_level = 3;
  bool overwrite = false;          // replace a complete output directory
  double progress_seconds = 10.0;  // 0 = no progress lines
};

// Fails with AlreadyExists when output_dir holds a complete shard set and overwrite is off.
// An interrupted earlier run (temporary files, shards without an index) is cleaned and redone.
StatusOr<DatasetIndex> tokenize(const TokenizeOptions& options);

}  // namespace ax::data
