// CRC-32C (Castagnoli), the checksum of TFRecord framing. Private to the metrics writers.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ax::train {

uint32_t crc32c(const void* data, size_t size);
// TFRecord stores ((crc >> 15) | (crc << 17)) + 0xa282ead8, so that a CRC of data that itself
// contains CRCs does not checksum to a fixed point.
uint32_t crc32c_masked(const void* data, size_t size);

}  // namespace ax::train
