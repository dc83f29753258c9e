// Helpers shared by the codec tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <string>
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

// The payload: the capacity's bytes, cut to what encode() reports it used
// (all of them for fixed-size codecs).
inline std::vector<uint8_t> encode(terngrad::comm::GradientCodec& c, std::span<const float> g,
                                   const terngrad::comm::EncodeContext& ctx = {}) {
  std::vector<uint8_t> out(c.payload_bytes(g.size()));
  const size_t used = c.encode(g, ctx, out);
  if (c.variable_size())
    EXPECT_LE(used, out.size());
  else
    EXPECT_EQ(used, out.size());
  out.resize(std::min(used, out.size()));
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

// expect_rejected(), and decode's message names the problem (contains `what`).
inline void expect_rejected_saying_on_decode(const terngrad::comm::GradientCodec& c, std::span<const uint8_t> payload,
                                             size_t n, const std::string& what) {
  expect_rejected(c, payload, n);
  std::vector<float> out(n);
  try {
    c.decode(payload, out);
    ADD_FAILURE() << "accepted; expected a message with \"" << what << "\"";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

// A random cut of n elements into slices at multiples of 4 (pieces random
// cut points, plus `extra` if given), with a payload buffer per slice sized
// by the codec: what the slicing-invariance tests encode into.
struct RandomSlicing {
  std::vector<terngrad::comm::ElementRange> slices;
  std::vector<std::vector<uint8_t>> bufs;
  std::vector<std::span<uint8_t>> outs;  // views of bufs
};
inline RandomSlicing random_slicing(const terngrad::comm::GradientCodec& c, uint64_t n, int pieces,
                                    std::mt19937_64& rng, std::optional<uint64_t> extra = std::nullopt) {
  std::vector<uint64_t> cuts = {0, n};
  for (int k = 0; k < pieces; ++k) cuts.push_back(rng() % (n / 4 + 1) * 4);
  if (extra) cuts.push_back(*extra);
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  RandomSlicing s;
  for (size_t k = 0; k + 1 < cuts.size(); ++k) {
    s.slices.push_back({cuts[k], cuts[k + 1] - cuts[k]});
    s.bufs.emplace_back(c.payload_bytes(s.slices.back().count));
  }
  s.outs.assign(s.bufs.begin(), s.bufs.end());
  return s;
}

}  // namespace codec_test
