// The on-disk layout of one token shard (`shard-NNNNN.axs`). docs/shard-format.md describes it
// byte by byte; this header is the single source of its constants. All integers little-endian.
//
//   [header]      zstd skippable frame, magic kHeaderMagic, 56-byte payload (ShardHeader)
//   [data frames] num_frames independent zstd frames; frame i holds tokens
//                 [i*frame_tokens, min((i+1)*frame_tokens, num_tokens)) as uint32, with zstd's
//                 content size and content checksum set
//   [doc table]   zstd skippable frame, magic kDocTableMagic: u64 num_docs, u32 checksum (low 32
//                 bits of XXH64 of the raw table), u32 zero, then one zstd frame holding num_docs
//                 u64 document end offsets (exclusive, increasing, the last == num_tokens)
//   [seek table]  zstd skippable frame in the zstd seekable format v0.1 (magic 0x184D2A5E):
//                 per data frame {u32 compressed size, u32 raw size, u32 low 32 bits of XXH64 of
//                 the raw bytes}, then the 9-byte footer {u32 num_frames, u8 0x80, u32 0x8F92EAB1}
//
// Skippable frames are ignored by plain zstd, so `zstd -dc shard-00000.axs` prints exactly the
// uint32 token stream.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ax::data {

inline constexpr uint32_t kHeaderMagic = 0x184D2A5A;    // skippable frame, nibble A
inline constexpr uint32_t kDocTableMagic = 0x184D2A5B;  // skippable frame, nibble B
inline constexpr uint32_t kSeekTableMagic = 0x184D2A5E;
inline constexpr uint32_t kSeekableFooterMagic = 0x8F92EAB1;
inline constexpr char kShardMagic[8] = {'A', 'X', 'S', 'H', 'A', 'R', 'D', '\0'};
inline constexpr uint32_t kShardVersion = 1;
inline constexpr uint32_t kHeaderPayloadBytes = 56;
// A data frame holds at most 1 MiB of raw tokens.
inline constexpr uint32_t kMaxFrameTokens = 262144;
inline constexpr const char* kShardSuffix = ".axs";
inline constexpr const char* kIndexFile = "index.json";
inline constexpr int kIndexFormatVersion = 1;

// What the documents of a shard set are.
enum class ShardKind : uint32_t {
  kLm = 0,       // documents for language modelling, EOS appended to each
  kSeq2Seq = 1,  // documents in pairs: example i = (doc 2i inputs, doc 2i+1 targets), EOS on both
};

// The header payload, in file order (56 bytes, no padding).
struct ShardHeader {
  char magic[8];          // kShardMagic
  uint32_t version;       // kShardVersion
  uint32_t kind;          // ShardKind
  uint32_t token_bytes;   // 4: uint32 tokens
  uint32_t frame_tokens;  // tokens per data frame (the last may hold fewer)
  uint64_t num_tokens;
  uint64_t num_docs;
  uint64_t tokenizer_hash;  // XXH64 (seed 0) of the tokenizer's .model file bytes
  uint32_t num_frames;
  uint32_t header_checksum;  // low 32 bits of XXH64 of the 52 bytes before this field
};
static_assert(sizeof(ShardHeader) == kHeaderPayloadBytes);

// Low 32 bits of XXH64 with seed 0: the checksum used everywhere in the format.
uint32_t checksum32(const void* data, size_t size);
uint64_t hash64(const void* data, size_t size);

}  // namespace ax::data
