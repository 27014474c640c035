// The TCP store's wire format, shared by its server (store_tcp_server.cc) and client
// (store_tcp.cc); docs/bootstrap.md has the byte layout. Frames are u32 little-endian length +
// body; strings are u32 length + bytes.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace ax::train::comm::wire {

using Clock = std::chrono::steady_clock;

// Requests after the handshake, and the first byte of the client's half of the handshake
// (kHello). kRank is every client's first request once admitted: the rank it says it is, which
// the server records when that connection closes (kStoreFirstGoneKey).
// kGetMany waits for all its keys, like kWait, and returns their values, like kGet: an
// all-gather's read of every rank's value in one request (store_all_gather).
enum Op : uint8_t {
  kSet = 1,
  kGet = 2,
  kAdd = 3,
  kWait = 4,
  kHello = 5,
  kErase = 6,
  kRank = 7,
  kGetMany = 8
};
// First byte of every reply.
enum Reply : uint8_t { kOk = 0, kTimeout = 1, kError = 2, kRefused = 3, kFull = 4 };

constexpr uint32_t kMaxFrame = 256u << 20;
// The server's greeting: magic + version, then its nonce.
constexpr std::string_view kGreetingMagic = "AXS1";
constexpr size_t kNonceBytes = 32;
constexpr size_t kProofBytes = 32;  // HMAC-SHA256
constexpr size_t kGreetingBytes = 4 + kNonceBytes;
constexpr size_t kHelloBytes = 1 + kNonceBytes + kProofBytes;

inline void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
inline void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
inline void put_str(std::string& out, std::string_view s) {
  put_u32(out, static_cast<uint32_t>(s.size()));
  out.append(s);
}
inline std::string frame(std::string_view body) {
  std::string out;
  put_u32(out, static_cast<uint32_t>(body.size()));
  out.append(body);
  return out;
}

// Reads a body front to back; any overrun marks it bad.
class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}
  uint64_t u(int bytes) {
    if (pos_ + static_cast<size_t>(bytes) > data_.size()) {
      bad_ = true;
      return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) {
      v |= static_cast<uint64_t>(static_cast<uint8_t>(data_[pos_ + i])) << (8 * i);
    }
    pos_ += static_cast<size_t>(bytes);
    return v;
  }
  std::string str() {
    uint64_t n = u(4);
    return bytes(static_cast<size_t>(n));
  }
  std::string bytes(size_t n) {
    if (bad_ || pos_ + n > data_.size()) {
      bad_ = true;
      return {};
    }
    std::string s(data_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  bool ok() const { return !bad_; }

 private:
  std::string_view data_;
  size_t pos_ = 0;
  bool bad_ = false;
};

inline int64_t remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return std::max<int64_t>(0, left.count());
}

}  // namespace ax::train::comm::wire
