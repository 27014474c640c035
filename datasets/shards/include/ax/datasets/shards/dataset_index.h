// index.json: the description of a shard set, written last (temporary name + rename), so a
// directory with an index.json is complete. Layout in docs/shard-format.md.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ax/common/status.h"
#include "ax/datasets/shards/shard_format.h"

namespace ax::data {

struct ShardEntry {
  std::string file;  // relative to the directory, e.g. "shard-00000.axs"
  uint64_t num_tokens = 0;
  uint64_t num_docs = 0;
  uint64_t bytes = 0;  // file size
  uint64_t xxh64 = 0;  // XXH64 of the whole file
};

struct TokenizerInfo {
  uint64_t hash = 0;  // XXH64 of the tokenizer file's bytes (.model or tokenizer.json)
  uint32_t vocab_size = 0;
  int32_t eos_id = -1;
  int32_t pad_id = -1;
  std::string model_file;  // the name it was read from (informational)
  // "sentencepiece" or "tokenizer.json" (Tokenizer::kind()); empty in an index written before
  // ax recorded it.
  std::string kind;
};

struct DatasetIndex {
  int format_version = kIndexFormatVersion;
  ShardKind kind = ShardKind::kLm;
  TokenizerInfo tokenizer;
  uint32_t frame_tokens = kMaxFrameTokens;
  uint64_t num_tokens = 0;
  uint64_t num_docs = 0;
  std::vector<ShardEntry> shards;
  // Provenance and counts: input files, skipped, truncated and split documents, documents per
  // meta.pile_set_name. Informational; readers do not depend on it.
  std::vector<std::string> inputs;
  uint64_t skipped_empty = 0;
  uint64_t skipped_bad = 0;
  uint64_t skipped_long = 0;    // over --max-doc-bytes, skipped
  uint64_t truncated_long = 0;  // over --max-doc-bytes, truncated
  uint64_t split_docs = 0;      // encoded in pieces (longer than split_bytes)
  std::map<std::string, uint64_t> docs_per_set;
};

// Reads and validates DIR/index.json (format version, counts add up, files named as shards).
StatusOr<DatasetIndex> read_dataset_index(const std::string& dir);
// Writes DIR/index.json atomically (DIR/index.json.tmp, fsync, rename).
Status write_dataset_index(const std::string& dir, const DatasetIndex& index);

}  // namespace ax::data
