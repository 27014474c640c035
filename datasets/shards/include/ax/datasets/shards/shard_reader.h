// Reads token shards: memory-mapped files, random access by frame (only the
// frames a read touches are decompressed, with a small cache), every
// decompressed frame checked against its checksum. Every error names the file
// and, where it applies, the frame.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ax/common/status.h"
#include "ax/datasets/shards/dataset_index.h"

namespace ax::data {

class FrameCache;

// Decoded frames a ShardSet keeps by default: every frame one shuffle window of
// the loaders can touch (64 blocks, each about one frame plus the next for its
// boundary token; docs/data-order.md), so each frame is decompressed about once
// per window. At most 136 MiB, allocated as frames are first read.
inline constexpr size_t kDefaultSetCacheFrames = 136;

class ShardReader {
 public:
  // Validates header, doc table and seek table (not the data frames: see
  // verify()).
  static StatusOr<std::unique_ptr<ShardReader>> open(const std::string& path,
                                                     size_t cache_frames = 4);
  ~ShardReader();

  const ShardHeader& header() const;
  uint64_t num_tokens() const;
  uint64_t num_docs() const;
  uint32_t num_frames() const;
  // End offsets (exclusive) of every document, num_docs() entries.
  std::span<const uint64_t> doc_ends() const;

  // Copies tokens [begin, begin + out.size()) into out. Safe to call from
  // several threads.
  Status read(uint64_t begin, std::span<uint32_t> out) const;
  // Decodes every frame and checks every checksum and count.
  Status verify() const;

 private:
  friend class ShardSet;
  class Impl;
  // Opens a shard that keeps its decoded frames in `cache` under `cache_id` (a
  // set's shared one).
  static StatusOr<std::unique_ptr<ShardReader>> open_with_cache(const std::string& path,
                                                                std::shared_ptr<FrameCache> cache,
                                                                uint32_t cache_id);
  explicit ShardReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A whole directory: index.json plus its shards, seen as one token stream
// (shards concatenated in index order) and one document list.
class ShardSet {
 public:
  // Opens DIR. When expected_tokenizer_hash is given and differs from the
  // index's, fails with FailedPrecondition naming both. Checks every shard
  // against its index entry (size, counts). All shards share one cache of
  // `cache_frames` decoded frames (1 MiB each at most).
  static StatusOr<std::shared_ptr<ShardSet>> open(
      const std::string& dir, std::optional<uint64_t> expected_tokenizer_hash = std::nullopt,
      size_t cache_frames = kDefaultSetCacheFrames);
  ~ShardSet();

  const DatasetIndex& index() const;
  uint64_t num_tokens() const;
  uint64_t num_docs() const;
  const ShardReader& shard(size_t i) const;
  size_t num_shards() const;

  // Tokens [begin, begin + out.size()) of the concatenated stream; may cross
  // shard boundaries.
  Status read(uint64_t begin, std::span<uint32_t> out) const;
  // Document d of the whole set as [begin, end) offsets in the concatenated
  // stream.
  std::pair<uint64_t, uint64_t> doc_range(uint64_t d) const;
  // verify() on every shard, plus the whole-file XXH64 and sizes recorded in
  // index.json.
  Status verify() const;

 private:
  class Impl;
  explicit ShardSet(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ax::data
