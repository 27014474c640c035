// `ax-data tokenize`: text sources → tokens (all cores, one shared tokenizer, output order equal to
// input order whatever the thread count) → shard set. EOS is appended to every document.
// Documents longer than split_bytes are encoded in pieces (DocSplitter), so memory stays bounded
// by the threads and the chunk size whatever the input (docs/tokenization.md).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "ax/common/status.h"
#include "ax/datasets/shards/dataset_index.h"
#include "ax/datasets/text/text_source.h"

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
  // Longer documents are cut into pieces of split_bytes / 2 .. split_bytes (DocSplitter).
  size_t split_bytes = kDefaultSplitBytes;
  // Written with "<bytes read> <total bytes>" about once a second when set (job progress).
  std::string progress_file;
  // Set (by a signal handler) to stop early: tokenize then fails with kAborted.
  const std::atomic<bool>* stop = nullptr;

  // SentencePiece slows down per byte as the text it encodes at once grows (best of 7, CPU time,
  // KJV text, 8k BPE: 2.9 MB/s in 4 KiB pieces, 2.65 in 16 KiB, 1.85 in 64 KiB, 3.05 as verses):
  // 4 KiB keeps a long document near the speed of ordinary text (docs/tokenization.md).
  static constexpr size_t kDefaultSplitBytes = size_t{4} << 10;
};
inline constexpr size_t kMinSplitBytes = 256;

// Fails with AlreadyExists when output_dir holds a complete shard set and overwrite is off.
// An interrupted earlier run (temporary files, shards without an index) is cleaned and redone.
StatusOr<DatasetIndex> tokenize(const TokenizeOptions& options);

}  // namespace ax::data
