// Helpers shared by the codec tests.
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "terngrad/comm/gradient_codec.h"

namespace codec_test {

inline std::vector<float> normal_floats(size_t n, uint64_t seed, float sigma = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

inline std::vector<uint8_t> encode(terngrad::comm::GradientCodec& c, std::span<const float> g,
                                   const terngrad::comm::EncodeContext& ctx = {}) {
  std::vector<uint8_t> out(c.payload_bytes(g.size()));
  EXPECT_EQ(c.encode(g, ctx, out), out.size());
  return out;
}

inline bool same_bits(float a, float b) { return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b); }

// Both decode and decode_accumulate must reject the payload and leave out untouched.
inline void expect_rejected(const terngrad::comm::GradientCodec& c, std::span<const uint8_t> payload,
                            size_t out_size) {
  std::vector<float> out(out_size, 12.5f);
  EXPECT_ANY_THROW(c.decode(payload, out));
  for (float x : out) ASSERT_EQ(x, 12.5f);
  EXPECT_ANY_THROW(c.decode_accumulate(payload, out));
  for (float x : out) ASSERT_EQ(x, 12.5f);
}

}  // namespace codec_test
