// What the shard reader, writer and index share inside the shards layer: the header frame's size,
// the seek table's descriptor and the hexadecimal form of hashes in messages and index.json.
#pragma once

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <string>

#include "ax/datasets/shards/shard_format.h"

namespace ax::data::internal {

// The header's skippable frame: magic and size (8 bytes), then the payload.
inline constexpr uint64_t kHeaderFrameBytes = 8 + kHeaderPayloadBytes;
// The seek table's descriptor byte: bit 7, entries carry checksums.
inline constexpr uint8_t kSeekDescriptor = 0x80;

// 16 lowercase hexadecimal digits.
inline std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016" PRIx64, v);
  return buf;
}

}  // namespace ax::data::internal
