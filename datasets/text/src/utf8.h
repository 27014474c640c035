// UTF-8 byte classes the text layer's splitters share.
#pragma once

namespace ax::data::internal {

// A continuation byte (10xxxxxx): never the first byte of a character.
inline bool is_continuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

}  // namespace ax::data::internal
