// Writes token shards. Files are written under "<name>.tmp", fsynced and renamed only when
// complete, so a crash never leaves a file that looks like a finished shard.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ax/common/status.h"
#include "ax/datasets/shards/dataset_index.h"

namespace ax::data {

struct ShardWriterOptions {
  ShardKind kind = ShardKind::kLm;
  uint64_t tokenizer_hash = 0;
  uint32_t frame_tokens = kMaxFrameTokens;
  int zstd_level = 3;
};

// One shard file.
class ShardWriter {
 public:
  static StatusOr<std::unique_ptr<ShardWriter>> create(const std::string& path,
                                                       const ShardWriterOptions& options);
  ~ShardWriter();  // an unfinished writer removes its temporary file

  // Appends one document (its tokens, EOS already included by the caller).
  Status add_document(std::span<const uint32_t> tokens);
  // Appends the next tokens of the current document, which ends with this call when
  // end_of_document is set: a long document arrives in pieces without being held whole.
  Status add_tokens(std::span<const uint32_t> tokens, bool end_of_document);
  // Writes the doc table, seek table and header, fsyncs and renames to the final path.
  // Returns the entry for index.json.
  StatusOr<ShardEntry> finish();

  uint64_t num_tokens() const;
  uint64_t num_docs() const;

 private:
  class Impl;
  explicit ShardWriter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A directory of shards: starts a new shard once the current one holds at least shard_tokens
// tokens (documents never span shards), and writes index.json on finish().
struct ShardSetWriterOptions {
  ShardWriterOptions shard;
  uint64_t shard_tokens = uint64_t{64} << 20;  // 64 Mi tokens = 256 MiB raw
  TokenizerInfo tokenizer;
};

class ShardSetWriter {
 public:
  // DIR must exist. Leftover "*.tmp" files and shards not listed in an index are removed.
  static StatusOr<std::unique_ptr<ShardSetWriter>> create(const std::string& dir,
                                                          const ShardSetWriterOptions& options);
  ~ShardSetWriter();
  Status add_document(std::span<const uint32_t> tokens);
  // As ShardWriter::add_tokens; a new shard starts only at a document's end.
  Status add_tokens(std::span<const uint32_t> tokens, bool end_of_document);
  // Provenance copied into index.json.
  DatasetIndex& index_extras();
  StatusOr<DatasetIndex> finish();

 private:
  class Impl;
  explicit ShardSetWriter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ax::data
