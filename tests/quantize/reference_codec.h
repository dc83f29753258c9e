// Float64 reference of the TernGrad codec for the tests: written for clarity,
// independently of the fast paths (no SIMD, no canonical summation order,
// double-precision probabilities), so agreement means the fast paths compute
// what the spec says rather than what they happen to compute.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "terngrad/quantize/philox.h"
#include "terngrad/quantize/ternary_math.h"

namespace tg_test {

struct RefStats {
  double mean = 0, stddev = 0, max_abs = 0;
};

inline RefStats ref_stats(const std::vector<float>& x) {
  RefStats r;
  if (x.empty()) return r;
  long double sum = 0;
  for (float v : x) sum += v;
  const long double mean = sum / x.size();
  long double ss = 0;
  for (float v : x) ss += (v - mean) * (v - mean);  // two-pass: no cancellation
  r.mean = static_cast<double>(mean);
  r.stddev = std::sqrt(static_cast<double>(ss / x.size()));
  for (float v : x) r.max_abs = std::max(r.max_abs, std::fabs(static_cast<double>(v)));
  return r;
}

// The random word element i draws: Philox word i%4 of counter (i/4, step, tensor id).
inline uint32_t ref_random_word(uint64_t seed, uint32_t step, uint32_t tensor_id, uint64_t i) {
  using terngrad::quantize::philox4x32_10;
  const uint64_t k = i / 4;
  const auto r = philox4x32_10({{static_cast<uint32_t>(k), static_cast<uint32_t>(k >> 32), step, tensor_id}},
                               {{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}});
  return r.v[i % 4];
}

// The 24-bit integer u element i compares against p * 2^24 (FORMAT.md step 3),
// from the element's position alone: version 1, the top 24 bits of its word;
// version 2, 256 h + 128 for its 16-bit half h of Philox4x32-7.
inline double ref_uniform24(uint64_t seed, uint32_t step, uint32_t tensor_id, uint64_t i,
                            terngrad::quantize::RandomStream stream) {
  if (stream == terngrad::quantize::RandomStream::kPhilox10Word32)
    return ref_random_word(seed, step, tensor_id, i) >> 8;
  const uint64_t k = i / 8;
  const auto r = terngrad::quantize::philox4x32_7(
      {{static_cast<uint32_t>(k), static_cast<uint32_t>(k >> 32), step, tensor_id}},
      {{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}});
  const uint32_t h = (r.v[(i % 8) / 2] >> (16 * (i % 2))) & 0xFFFFu;
  return 256.0 * h + 128.0;
}

// Exact keep probability of element x under scale s, in double.
inline double ref_keep_probability(float x, double s) {
  if (s <= 0) return 0.0;
  return std::min(std::fabs(static_cast<double>(x)), s) / s;
}

// Gradient-like test data: mostly normal, a few heavy-tailed outliers.
inline std::vector<float> gradient_like(size_t n, uint32_t seed, float sigma = 1e-3f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, sigma);
  std::uniform_real_distribution<float> unif(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = unif(gen) < 0.001f ? normal(gen) * 20.0f : normal(gen);
  return x;
}

}  // namespace tg_test
