// An independent reader of TensorBoard event files for the tests: TFRecord framing with its own
// CRC-32C, events parsed by classes that protoc generated from tb_event.proto. It shares no code
// with ax's writer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tb_event.pb.h"

namespace ax_test {

// Bit-at-a-time CRC-32C (the writer uses a table).
uint32_t crc32c_bitwise(const void* data, size_t size);

// Every event in the file; false with *error set on a short read, a CRC mismatch or an event
// that does not parse.
bool read_events(const std::string& path, std::vector<tensorboard::Event>* events,
                 std::string* error);

}  // namespace ax_test
