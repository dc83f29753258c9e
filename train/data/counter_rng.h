// Small deterministic random streams for the data pipeline (internal).
//
// Every random choice of the input pipeline (shuffles, crops, flips,
// synthetic pixels) is a pure function of a 64-bit seed derived from
// (run seed, step, worker, example slot). SplitMix64 is used instead of
// std::mt19937_64 + std::uniform_*_distribution because the standard
// distributions are not specified bit-for-bit: a checkpoint resumed with a
// different standard library would otherwise draw different augmentations.
#pragma once

#include <cstdint>

namespace terngrad::train::detail {

// SplitMix64's finalizer: a bijective 64-bit mix.
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Seed of a sub-stream: distinct (a, b) pairs give unrelated streams.
inline uint64_t derive_seed(uint64_t a, uint64_t b) { return mix64(a + 0x9E3779B97F4A7C15ull * (b + 1)); }

class CounterRng {
 public:
  explicit CounterRng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    state_ += 0x9E3779B97F4A7C15ull;
    return mix64(state_);
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform01() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform01(); }
  // Uniform integer in [0, n), unbiased (rejection of the short last interval).
  uint64_t below(uint64_t n) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t r;
    do r = next();
    while (r >= limit);
    return r % n;
  }

 private:
  uint64_t state_;
};

}  // namespace terngrad::train::detail
