// The fp16 codec against a float64 reference: round to nearest even,
// subnormals, saturation, exact decode of every binary16 pattern.
#include <algorithm>
#include <cmath>
#include <limits>

#include "codec_test_util.h"

namespace tc = terngrad::comm;
using namespace codec_test;

namespace {

// Value of a binary16 bit pattern from its definition, in float64.
double half_value(uint16_t h) {
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  const int e = (h >> 10) & 0x1F;
  const int m = h & 0x3FF;
  if (e == 31) return m ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
  if (e == 0) return sign * std::ldexp(m, -24);
  return sign * std::ldexp(1024 + m, e - 25);
}

// Reference conversion: the nearest finite binary16 (ties to the even
// pattern), so values beyond 65504 saturate, as the codec documents.
uint16_t reference_half(float x) {
  static const std::vector<double> positive = [] {
    std::vector<double> v;
    for (uint16_t h = 0; h <= 0x7BFF; ++h) v.push_back(half_value(h));
    return v;
  }();
  const double a = std::fabs(static_cast<double>(x));
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  auto it = std::lower_bound(positive.begin(), positive.end(), a);
  if (it == positive.end()) return sign | 0x7BFF;
  auto hi = static_cast<uint16_t>(it - positive.begin());
  if (positive[hi] == a || hi == 0) return sign | hi;
  const uint16_t lo = hi - 1;
  const double dlo = a - positive[lo], dhi = positive[hi] - a;  // exact in float64
  if (dlo < dhi) return sign | lo;
  if (dhi < dlo) return sign | hi;
  return sign | ((lo & 1) ? hi : lo);
}

std::vector<uint16_t> encode_halves(tc::GradientCodec& codec, const std::vector<float>& x) {
  const auto p = encode(codec, x);
  const size_t header = p.size() - 2 * x.size();
  std::vector<uint16_t> h(x.size());
  for (size_t i = 0; i < x.size(); ++i) h[i] = static_cast<uint16_t>(p[header + 2 * i] | (p[header + 2 * i + 1] << 8));
  return h;
}

void expect_matches_reference(tc::GradientCodec& codec, const std::vector<float>& x) {
  const auto h = encode_halves(codec, x);
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(h[i], reference_half(x[i])) << "x = " << x[i] << " (bits 0x" << std::hex
                                          << std::bit_cast<uint32_t>(x[i]) << ")";
}

}  // namespace

TEST(Fp16Codec, PayloadIsHeaderPlusTwoBytesPerElement) {
  auto codec = tc::make_codec("fp16");
  EXPECT_EQ(codec->payload_bytes(0), 16u);
  EXPECT_EQ(codec->payload_bytes(5), 26u);
}

TEST(Fp16Codec, HalfwayPointsRoundToEven) {
  auto codec = tc::make_codec("fp16");
  std::vector<float> x;
  // Every midpoint between neighbouring finite halves (exact in float: 12
  // significant bits), and the floats just either side of it.
  for (uint16_t h = 0; h < 0x7BFF; ++h) {
    const auto mid = static_cast<float>((half_value(h) + half_value(h + 1)) / 2);
    ASSERT_EQ(static_cast<double>(mid), (half_value(h) + half_value(h + 1)) / 2);
    for (float v : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
      x.push_back(v);
      x.push_back(-v);
    }
  }
  expect_matches_reference(*codec, x);
  // Spot checks written out: 1 + 2^-11 is halfway between 1 and 1 + 2^-10.
  const auto h = encode_halves(*codec, {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 0x1p-25f, 3 * 0x1p-25f, 2049.0f, 2051.0f});
  EXPECT_EQ(h, (std::vector<uint16_t>{0x3C00, 0x3C02, 0x0000, 0x0002, 0x6800, 0x6802}));
}

TEST(Fp16Codec, SubnormalsAndTinyValues) {
  auto codec = tc::make_codec("fp16");
  std::vector<float> x{0.0f, -0.0f, 0x1p-24f, 0x1p-14f, 0x1p-14f - 0x1p-24f, 0x1p-26f, 0x1p-25f,
                       std::nextafter(0x1p-25f, 1.0f), std::numeric_limits<float>::denorm_min(), 1e-30f};
  for (uint16_t m = 1; m < 0x400; ++m) x.push_back(static_cast<float>(half_value(m)));
  expect_matches_reference(*codec, x);
  const auto h = encode_halves(*codec, {0x1p-24f, -0.0f, 0x1p-25f, std::nextafter(0x1p-25f, 1.0f)});
  EXPECT_EQ(h, (std::vector<uint16_t>{0x0001, 0x8000, 0x0000, 0x0001}));
}

TEST(Fp16Codec, SampledFloatsMatchReference) {
  auto codec = tc::make_codec("fp16");
  std::vector<float> x;
  for (uint64_t bits = 0; bits <= 0xFFFFFFFFu; bits += 4093) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(bits));
    if (std::isfinite(f)) x.push_back(f);
  }
  const auto g = normal_floats(100000, 7, 0.01f);
  x.insert(x.end(), g.begin(), g.end());
  expect_matches_reference(*codec, x);
}

TEST(Fp16Codec, OverflowSaturatesToMaxFinite) {
  auto codec = tc::make_codec("fp16");
  // IEEE rounding overflows to infinity from 65520 (the midpoint above
  // 65504); the codec saturates instead. Below 65520 both round to 65504.
  const auto h = encode_halves(*codec, {65504.0f, std::nextafter(65520.0f, 0.0f), 65520.0f, 1e6f, std::numeric_limits<float>::max(),
                                        -65520.0f, -3e38f, 65503.0f, 65488.0f, 65487.996f});
  EXPECT_EQ(h, (std::vector<uint16_t>{0x7BFF, 0x7BFF, 0x7BFF, 0x7BFF, 0x7BFF, 0xFBFF, 0xFBFF, 0x7BFF, 0x7BFE,
                                      0x7BFE}));
  std::vector<float> out(1);
  codec->decode(encode(*codec, std::vector<float>{1e9f}), out);
  EXPECT_EQ(out[0], 65504.0f);
}

// The codec transmits what it is given, like fp32: +-Inf stays +-Inf and NaN
// stays NaN (only finite overflow saturates). Detecting a diverged step is
// the trainer's job, not the wire format's.
TEST(Fp16Codec, NonFiniteValuesPassThrough) {
  auto codec = tc::make_codec("fp16");
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> g{1.0f, inf, -inf, std::numeric_limits<float>::quiet_NaN(),
                             -std::numeric_limits<float>::quiet_NaN(), std::bit_cast<float>(0x7F812345u), -2.0f};
  const auto h = encode_halves(*codec, g);
  EXPECT_EQ(h[0], 0x3C00);
  EXPECT_EQ(h[1], 0x7C00);
  EXPECT_EQ(h[2], 0xFC00);
  for (size_t i : {3, 4, 5}) {
    EXPECT_EQ(h[i] & 0x7C00, 0x7C00) << i;  // all-ones exponent
    EXPECT_NE(h[i] & 0x03FF, 0) << i;       // nonzero mantissa: NaN, not Inf
  }
  EXPECT_EQ(h[4] & 0x8000, 0x8000);
  EXPECT_EQ(h[6], 0xC000);
  std::vector<float> out(g.size());
  codec->decode(encode(*codec, g), out);
  EXPECT_EQ(out[1], inf);
  EXPECT_EQ(out[2], -inf);
  for (size_t i : {3, 4, 5}) EXPECT_TRUE(std::isnan(out[i])) << i;
  EXPECT_EQ(out[6], -2.0f);
}

TEST(Fp16Codec, DecodesEveryPatternExactly) {
  auto codec = tc::make_codec("fp16");
  auto payload = encode(*codec, std::vector<float>(65536, 0.0f));
  const size_t header = payload.size() - 2 * 65536;
  for (uint32_t h = 0; h < 65536; ++h) {
    payload[header + 2 * h] = static_cast<uint8_t>(h);
    payload[header + 2 * h + 1] = static_cast<uint8_t>(h >> 8);
  }
  std::vector<float> out(65536);
  codec->decode(payload, out);
  for (uint32_t h = 0; h < 65536; ++h) {
    const double want = half_value(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(out[h])) << h;
    } else {
      ASSERT_EQ(static_cast<double>(out[h]), want) << h;
      ASSERT_EQ(std::signbit(out[h]), (h & 0x8000) != 0) << h;
    }
  }
  // Finite halves survive an encode/decode round trip unchanged.
  std::vector<float> finite;
  for (uint32_t h = 0; h < 65536; ++h)
    if (std::isfinite(out[h])) finite.push_back(out[h]);
  std::vector<float> back(finite.size());
  codec->decode(encode(*codec, finite), back);
  for (size_t i = 0; i < finite.size(); ++i) ASSERT_TRUE(same_bits(back[i], finite[i])) << finite[i];
}

TEST(Fp16Codec, DecodeAccumulateAdds) {
  auto codec = tc::make_codec("fp16");
  const std::vector<float> a{1.0f, -2.5f, 0.5f}, b{0.25f, 2.5f, 1024.0f};
  std::vector<float> sum{10.0f, 10.0f, 10.0f};
  codec->decode_accumulate(encode(*codec, a), sum);
  codec->decode_accumulate(encode(*codec, b), sum);
  EXPECT_EQ(sum, (std::vector<float>{11.25f, 10.0f, 1034.5f}));
}

TEST(Fp16Codec, MalformedPayloadsAreRejectedWithOutputUntouched) {
  auto codec = tc::make_codec("fp16");
  const auto good = encode(*codec, normal_floats(9, 8));
  auto mutate = [&](auto f) {
    auto p = good;
    f(p);
    return p;
  };
  expect_rejected(*codec, std::span(good).first(10), 9);
  expect_rejected(*codec, std::span(good).first(good.size() - 1), 9);
  expect_rejected(*codec, mutate([](auto& p) { p.push_back(0); }), 9);
  expect_rejected(*codec, mutate([](auto& p) { p[3] ^= 0x10; }), 9);
  expect_rejected(*codec, mutate([](auto& p) { p[5] = 1; }), 9);
  expect_rejected(*codec, mutate([](auto& p) { p[12] = 1; }), 9);
  expect_rejected(*codec, good, 8);
  expect_rejected(*codec, encode(*tc::make_codec("fp32"), normal_floats(9, 8)), 9);
}
