// Counter-based random numbers: a value is a pure function of (seed, stream, index), so results
// do not depend on threads or on where a run was resumed. splitmix64 mixing (Steele et al. 2014).
#pragma once

#include <cmath>
#include <cstdint>

namespace memo {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Hash of several counters into one 64-bit value.
inline uint64_t mix(uint64_t a, uint64_t b) { return splitmix64(a ^ splitmix64(b)); }

// Uniform double in (0, 1) from 53 random bits, never 0 (safe for log).
inline double unit_open(uint64_t bits) { return (double(bits >> 11) + 0.5) * 0x1.0p-53; }

// A stream of standard normal values (Box-Muller), index by index.
class NormalStream {
 public:
  NormalStream(uint64_t seed, uint64_t stream) : key_(mix(seed, stream)) {}
  double next() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = unit_open(mix(key_, counter_++));
    const double u2 = unit_open(mix(key_, counter_++));
    const double r = std::sqrt(-2.0 * std::log(u1));
    constexpr double kTwoPi = 6.283185307179586476925;
    spare_ = r * std::sin(kTwoPi * u2);
    has_spare_ = true;
    return r * std::cos(kTwoPi * u2);
  }

 private:
  uint64_t key_;
  uint64_t counter_ = 0;
  double spare_ = 0.0;
  bool has_spare_ = false;
};

}  // namespace memo
