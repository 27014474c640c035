// ax's own random numbers: SplitMix64 (Steele, Lea, Flood 2014) for uniform 64-bit values,
// Lemire's unbiased bounded draw, Box-Muller for normals, FNV-1a to turn names into seeds. Small,
// fast, and the same sequence with every compiler, standard library, platform and thread count
// (std::shuffle and the <random> distributions are implementation-defined): initial weights,
// the data order (docs/data-order.md) and T5's span corruption depend only on their seeds.
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

namespace ax {

inline constexpr uint64_t kSplitMixGolden = 0x9e3779b97f4a7c15ULL;

// The SplitMix64 output function of state x (x + golden, mixed): a good 64-bit hash.
inline uint64_t mix64(uint64_t x) {
  x += kSplitMixGolden;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t next() {
    const uint64_t z = state_;
    state_ += kSplitMixGolden;
    return mix64(z);
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  // Uniform in [0, n) for n >= 1, unbiased (Lemire 2019, "Fast random integer generation in an
  // interval").
  uint64_t below(uint64_t n) {
    unsigned __int128 m = static_cast<unsigned __int128>(next()) * n;
    auto low = static_cast<uint64_t>(m);
    if (low < n) {
      const uint64_t threshold = (0 - n) % n;
      while (low < threshold) {
        m = static_cast<unsigned __int128>(next()) * n;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }
  // Two independent N(0, 1) values (Box-Muller).
  void normal_pair(double* z0, double* z1) {
    const double u1 = 1.0 - uniform();  // (0, 1]: log() stays finite
    const double u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double a = 2.0 * 3.14159265358979323846 * u2;
    *z0 = r * std::cos(a);
    *z1 = r * std::sin(a);
  }
  uint64_t state() const { return state_; }
  // Skips n outputs of next() (the stream is a counter: O(1)). normal_pair() uses two.
  void skip(uint64_t n) { state_ += n * kSplitMixGolden; }

 private:
  uint64_t state_;
};

// FNV-1a of a name, to give every parameter its own stream.
inline uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

}  // namespace ax
