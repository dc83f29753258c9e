// The fp16 codec's two conversion paths, F16C and portable, must give the
// same bits for every input: a payload must not depend on which CPU encoded
// it. The other fp16 tests go through whichever path is active (F16C on most
// x86 machines, where the portable code then only handles the last n % 8
// elements); these compare the paths directly. Skipped where the CPU has no
// F16C, since the portable path is then the only one and is covered above.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

// A private header of terngrad_comm_codecs (the switch between the paths is
// not part of the public codec interface), reached by path from this folder.
#include "../../comm/codecs/fp16_convert.h"
#include "terngrad/comm/gradient_codec.h"

namespace fp16 = terngrad::comm::fp16;

namespace {

// Restores the path in use when a test ends, whatever it switched to.
class Fp16Paths : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fp16::simd_available()) GTEST_SKIP() << "no F16C on this CPU: only the portable path exists";
    saved_ = fp16::simd_active();
  }
  void TearDown() override {
    if (fp16::simd_available()) fp16::set_simd(saved_);
  }

  static std::vector<uint8_t> encode_with(bool simd, const std::vector<float>& x) {
    fp16::set_simd(simd);
    std::vector<uint8_t> out(2 * x.size());
    fp16::encode(x.data(), x.size(), out.data());
    return out;
  }

 private:
  bool saved_ = true;
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

  const auto simd = encode_with(true, x), portable = encode_with(false, x);
  for (size_t i = 0; i < x.size(); ++i) {
    const uint16_t a = static_cast<uint16_t>(simd[2 * i] | (simd[2 * i + 1] << 8));
    const uint16_t b = static_cast<uint16_t>(portable[2 * i] | (portable[2 * i + 1] << 8));
    ASSERT_EQ(a, b) << "float bits 0x" << std::hex << std::bit_cast<uint32_t>(x[i]);
    ASSERT_EQ(b, fp16::from_float(x[i]));
  }
}

TEST_F(Fp16Paths, DecodeGivesTheSameBitsForEveryHalf) {
  std::vector<uint8_t> in(2 * 65536);
  for (uint32_t h = 0; h < 65536; ++h) {
    in[2 * h] = static_cast<uint8_t>(h);
    in[2 * h + 1] = static_cast<uint8_t>(h >> 8);
  }
  std::vector<float> a(65536), b(65536), acc_a(65536, 0.75f), acc_b(65536, 0.75f);
  fp16::set_simd(true);
  fp16::decode(in.data(), 65536, a.data());
  fp16::decode_accumulate(in.data(), 65536, acc_a.data());
  fp16::set_simd(false);
  fp16::decode(in.data(), 65536, b.data());
  fp16::decode_accumulate(in.data(), 65536, acc_b.data());
  for (uint32_t h = 0; h < 65536; ++h) {
    ASSERT_EQ(std::bit_cast<uint32_t>(a[h]), std::bit_cast<uint32_t>(b[h])) << "half 0x" << std::hex << h;
    ASSERT_EQ(std::bit_cast<uint32_t>(b[h]), std::bit_cast<uint32_t>(fp16::to_float(static_cast<uint16_t>(h))));
    ASSERT_EQ(std::bit_cast<uint32_t>(acc_a[h]), std::bit_cast<uint32_t>(acc_b[h])) << "half 0x" << std::hex << h;
  }
}

TEST_F(Fp16Paths, CodecPayloadDoesNotDependOnThePath) {
  auto codec = terngrad::comm::make_codec("fp16");
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.0f, 30.0f);
  std::vector<float> g(1003);  // not a multiple of 8: both the vector loop and the tail run
  for (float& v : g) v = d(rng);
  std::vector<uint8_t> p1(codec->payload_bytes(g.size())), p2(p1.size());
  fp16::set_simd(true);
  codec->encode(g, {}, p1);
  fp16::set_simd(false);
  codec->encode(g, {}, p2);
  EXPECT_EQ(p1, p2);
}
