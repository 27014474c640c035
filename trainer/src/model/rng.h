// The trainer's own random numbers: SplitMix64 (Steele, Lea, Flood 2014) for uniform 64-bit
// values and Box-Muller for normals. Small, fast, and the same sequence on every platform and
// thread count, so initial weights depend only on the seed and the parameter name.
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

namespace ax::train {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
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
  void skip(uint64_t n) { state_ += n * 0x9e3779b97f4a7c15ULL; }

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

}  // namespace ax::train
