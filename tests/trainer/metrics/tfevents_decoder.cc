#include "tfevents_decoder.h"

#include <fstream>
#include <iterator>

namespace ax_test {
namespace {

uint32_t masked(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

uint64_t little_endian(const std::string& bytes, size_t pos, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(bytes[pos + i]);
  return v;
}

}  // namespace

uint32_t crc32c_bitwise(const void* data, size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) {
    crc ^= p[i];
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}

bool read_events(const std::string& path, std::vector<tensorboard::Event>* events,
                 std::string* error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = "cannot open " + path;
    return false;
  }
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  events->clear();
  size_t pos = 0;
  while (pos < bytes.size()) {
    std::string where =
        "record " + std::to_string(events->size()) + " at byte " + std::to_string(pos) + ": ";
    if (bytes.size() - pos < 12) {
      *error = where + "truncated header";
      return false;
    }
    uint64_t length = little_endian(bytes, pos, 8);
    if (masked(crc32c_bitwise(bytes.data() + pos, 8)) != little_endian(bytes, pos + 8, 4)) {
      *error = where + "length CRC mismatch";
      return false;
    }
    pos += 12;
    if (bytes.size() - pos < length + 4) {
      *error = where + "truncated data";
      return false;
    }
    if (masked(crc32c_bitwise(bytes.data() + pos, length)) !=
        little_endian(bytes, pos + length, 4)) {
      *error = where + "data CRC mismatch";
      return false;
    }
    tensorboard::Event event;
    if (!event.ParseFromArray(bytes.data() + pos, static_cast<int>(length))) {
      *error = where + "not a tensorboard Event";
      return false;
    }
    events->push_back(std::move(event));
    pos += length + 4;
  }
  return true;
}

}  // namespace ax_test
