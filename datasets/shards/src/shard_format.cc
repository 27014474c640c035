#include "ax/datasets/shards/shard_format.h"

#include <xxhash.h>

namespace ax::data {

uint32_t checksum32(const void* data, size_t size) {
  return static_cast<uint32_t>(XXH64(data, size, 0));
}

uint64_t hash64(const void* data, size_t size) { return XXH64(data, size, 0); }

}  // namespace ax::data
