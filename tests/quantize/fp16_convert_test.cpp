// The fp16 conversion gives the same bits on every SIMD level: a payload
// must not depend on which CPU encoded it. Every supported level is compared
// with the portable scalar functions, which are checked against the
// element-wise from_float / to_float.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "terngrad/quantize/cpu_features.h"
#include "terngrad/quantize/fp16.h"

namespace tq = terngrad::quantize;
namespace fp16 = terngrad::quantize::fp16;

namespace {

// Restores the level in use when a test ends; for_each_level runs f under
// the portable kernels first, then every other supported level.
class Fp16Paths : public ::testing::Test {
 protected:
  void SetUp() override { saved_ = tq::cpu_simd_level(); }
  void TearDown() override { tq::set_cpu_simd_level(saved_); }

  static void for_each_level(const std::function<void(tq::SimdLevel)>& f) {
    for (tq::SimdLevel level : tq::supported_simd_levels()) {
      tq::set_cpu_simd_level(level);
      f(level);
    }
  }

  static std::vector<uint8_t> encode_all(const std::vector<float>& x) {
    std::vector<uint8_t> out(2 * x.size());
    fp16::encode(x.data(), x.size(), out.data());
    return out;
  }

 private:
  tq::SimdLevel saved_ = tq::SimdLevel::kPortable;
};

}  // namespace

TEST_F(Fp16Paths, EncodeGivesTheSameBits) {
  std::vector<float> x;
  // Every float whose top 20 bits are a given pattern and whose low 12 bits
  // sit at or around the rounding point (bit 12 and below decide RNE),
  // for every sign/exponent: halfway cases, subnormals, the saturation band,
  // Inf and NaNs with assorted payloads.
  for (uint32_t hi = 0; hi < (1u << 9); ++hi) {        // sign + exponent
    for (uint32_t m : {0u, 1u, 0x3FFu, 0x155u, 0x2AAu}) {  // a few half mantissas
      const uint32_t base = (hi << 23) | (m << 13);
      for (uint32_t low : {0u, 1u, 0xFFFu, 0x1000u, 0x1001u, 0x1FFFu, 0x0800u})
        x.push_back(std::bit_cast<float>(base | low));
    }
  }
  std::mt19937 rng(11);
  for (int i = 0; i < 400000; ++i) x.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  x.push_back(std::numeric_limits<float>::infinity());
  x.push_back(-std::numeric_limits<float>::infinity());
  x.push_back(std::numeric_limits<float>::signaling_NaN());
  x.push_back(std::bit_cast<float>(0xFF800001u));  // signaling NaN, payload only in the lowest bit
  x.push_back(65520.0f);
  x.push_back(-65519.996f);

  tq::set_cpu_simd_level(tq::SimdLevel::kPortable);
  const auto portable = encode_all(x);
  for (size_t i = 0; i < x.size(); ++i) {
    const uint16_t b = static_cast<uint16_t>(portable[2 * i] | (portable[2 * i + 1] << 8));
    ASSERT_EQ(b, fp16::from_float(x[i])) << "float bits 0x" << std::hex << std::bit_cast<uint32_t>(x[i]);
  }
  for_each_level([&](tq::SimdLevel level) {
    const auto simd = encode_all(x);
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(simd[2 * i], portable[2 * i]) << tq::simd_level_name(level) << " float bits 0x" << std::hex
                                              << std::bit_cast<uint32_t>(x[i]);
      ASSERT_EQ(simd[2 * i + 1], portable[2 * i + 1]) << tq::simd_level_name(level) << " float bits 0x"
                                                      << std::hex << std::bit_cast<uint32_t>(x[i]);
    }
  });
}

TEST_F(Fp16Paths, DecodeGivesTheSameBitsForEveryHalf) {
  std::vector<uint8_t> in(2 * 65536);
  for (uint32_t h = 0; h < 65536; ++h) {
    in[2 * h] = static_cast<uint8_t>(h);
    in[2 * h + 1] = static_cast<uint8_t>(h >> 8);
  }
  std::vector<float> b(65536), acc_b(65536, 0.75f);
  tq::set_cpu_simd_level(tq::SimdLevel::kPortable);
  fp16::decode(in.data(), 65536, b.data());
  fp16::decode_accumulate(in.data(), 65536, acc_b.data());
  for (uint32_t h = 0; h < 65536; ++h)
    ASSERT_EQ(std::bit_cast<uint32_t>(b[h]), std::bit_cast<uint32_t>(fp16::to_float(static_cast<uint16_t>(h))));
  for_each_level([&](tq::SimdLevel level) {
    // n = 65535 too: the vector loops stop short and the scalar tail runs.
    for (size_t n : {size_t{65536}, size_t{65535}}) {
      std::vector<float> a(n), acc_a(n, 0.75f);
      fp16::decode(in.data(), n, a.data());
      fp16::decode_accumulate(in.data(), n, acc_a.data());
      for (uint32_t h = 0; h < n; ++h) {
        ASSERT_EQ(std::bit_cast<uint32_t>(a[h]), std::bit_cast<uint32_t>(b[h]))
            << tq::simd_level_name(level) << " half 0x" << std::hex << h;
        ASSERT_EQ(std::bit_cast<uint32_t>(acc_a[h]), std::bit_cast<uint32_t>(acc_b[h]))
            << tq::simd_level_name(level) << " half 0x" << std::hex << h;
      }
    }
  });
}
