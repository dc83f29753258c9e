// The qsgd codec against a scalar float64 reference written from
// comm/codecs/FORMATS.md ("## qsgd"): bytes at every SIMD level, slicing
// invariance, unbiasedness, round trips, malformed payloads, specs.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>

#include "../../comm/codecs/qsgd_internal.h"
#include "codec_test_util.h"
#include "terngrad/quantize/cpu_features.h"
#include "terngrad/quantize/format.h"
#include "terngrad/quantize/philox.h"

namespace tc = terngrad::comm;
namespace tq = terngrad::quantize;
using namespace codec_test;

namespace {

// ---------------------------------------------------------------- reference
struct Ref {
  uint32_t S, B;
  tq::RandomStream stream = tq::RandomStream::kPhilox7Half16;
  uint32_t w() const { return 1 + std::bit_width(S); }
  uint64_t slots(uint64_t n) const { return n == 0 ? 0 : (n + B - 4 + B - 1) / B; }
  size_t bytes(uint64_t n) const { return 32 + 4 * slots(n) + (n * w() + 7) / 8; }

  // FORMATS.md step 1: 16 float64 lanes, fold 8, 4, 2, 1; sqrt; float32, saturated.
  static float norm(std::span<const float> b) {
    double lane[16] = {};
    for (size_t m = 0; m < b.size(); ++m) lane[m % 16] += static_cast<double>(b[m]) * b[m];
    for (int o = 8; o >= 1; o /= 2)
      for (int l = 0; l < o; ++l) lane[l] += lane[l + o];
    const double r = std::sqrt(lane[0]);
    return r > std::numeric_limits<float>::max() ? std::numeric_limits<float>::max() : static_cast<float>(r);
  }
  // FORMATS.md step 2: the word whose top 24 bits are element i's random integer u.
  uint32_t word(uint64_t i, const tc::EncodeContext& c) const {
    const tq::Philox4x32Key key{{uint32_t(c.seed), uint32_t(c.seed >> 32)}};
    if (stream == tq::RandomStream::kPhilox10Word32) {
      const uint64_t k = i / 4;
      return tq::philox4x32_10({{uint32_t(k), uint32_t(k >> 32), c.step, c.tensor_id}}, key).v[i % 4];
    }
    const uint64_t k = i / 8;  // version 2: 16-bit half i % 8 of a Philox4x32-7 block, u = 256 h + 128
    const uint32_t w = tq::philox4x32_7({{uint32_t(k), uint32_t(k >> 32), c.step, c.tensor_id}}, key).v[i % 8 / 2];
    const uint32_t h = i % 2 == 0 ? (w & 0xFFFFu) : (w >> 16);
    return (h << 16) | 0x8000u;
  }
  // Level of |g| in a bucket of norm `norm`: float64 arithmetic rounded to
  // float32 after each operation (exactly the float32 operations).
  uint32_t level(float g, float norm, uint32_t word) const {
    const double div = norm > 0 ? norm : 1.0;
    const float q = static_cast<float>(std::fabs(static_cast<double>(g)) / div);
    const float r = static_cast<float>(static_cast<double>(q) * S);
    const double l = std::floor(static_cast<double>(r));
    const double frac = static_cast<double>(r) - l;
    return static_cast<uint32_t>(l) + (static_cast<double>(word >> 8) < frac * 16777216.0 ? 1 : 0);
  }
  std::vector<uint8_t> encode(std::span<const float> g, uint64_t begin, uint64_t n, const tc::EncodeContext& c) const {
    std::vector<uint8_t> out(bytes(n), 0);
    const uint64_t first = begin % B, used = n == 0 ? 0 : (first + n + B - 1) / B;
    tq::store_le32(out.data(), 0x53514754u);
    out[4] = static_cast<uint8_t>(stream);
    out[5] = static_cast<uint8_t>(w());
    out[6] = S & 0xFF;
    out[7] = S >> 8;
    tq::store_le32(out.data() + 8, B);
    tq::store_le32(out.data() + 12, static_cast<uint32_t>(first));
    tq::store_le64(out.data() + 16, n);
    tq::store_le32(out.data() + 28, tq::crc32_ieee(out.data(), 28));
    std::vector<float> norms;
    for (uint64_t j = 0; j < used; ++j) {
      const uint64_t b0 = (begin / B + j) * B, b1 = std::min<uint64_t>(b0 + B, g.size());
      norms.push_back(norm(g.subspan(b0, b1 - b0)));
      tq::store_le32(out.data() + 32 + 4 * j, std::bit_cast<uint32_t>(norms.back()));
    }
    uint8_t* body = out.data() + 32 + 4 * slots(n);
    for (uint64_t e = 0; e < n; ++e) {
      const uint64_t i = begin + e;
      const uint32_t lv = level(g[i], norms[i / B - begin / B], word(i, c));
      const uint32_t f = (lv << 1) | (lv != 0 && std::signbit(g[i]) ? 1 : 0);
      for (uint32_t b = 0; b < w(); ++b)
        if (f >> b & 1) body[(e * w() + b) / 8] |= uint8_t(1u << ((e * w() + b) % 8));
    }
    return out;
  }
  // Decoded value: float32(norm * l / S), negated when the sign bit is set.
  std::vector<float> decode(std::span<const float> g, uint64_t begin, uint64_t n, const tc::EncodeContext& c) const {
    std::vector<float> v(n);
    for (uint64_t e = 0; e < n; ++e) {
      const uint64_t i = begin + e, b0 = i / B * B;
      const float nm = norm(g.subspan(b0, std::min<uint64_t>(b0 + B, g.size()) - b0));
      const uint32_t lv = level(g[i], nm, word(i, c));
      const float x = static_cast<float>(static_cast<double>(nm) * lv / S);
      v[e] = lv != 0 && std::signbit(g[i]) ? -x : x;
    }
    return v;
  }
};

tc::EncodeContext ctx(uint64_t seed, uint32_t step = 5, uint32_t tid = 9) {
  tc::EncodeContext c;
  c.seed = seed;
  c.step = step;
  c.tensor_id = tid;
  return c;
}

std::unique_ptr<tc::GradientCodec> qsgd(uint32_t S, uint32_t B,
                                        tq::RandomStream stream = tq::RandomStream::kPhilox7Half16) {
  return tc::make_codec("qsgd:levels=" + std::to_string(S) + ",bucket=" + std::to_string(B) +
                        (stream == tq::RandomStream::kPhilox10Word32 ? ",stream=philox10" : ""));
}

constexpr tq::RandomStream kStreams[] = {tq::RandomStream::kPhilox7Half16, tq::RandomStream::kPhilox10Word32};
const char* stream_name(tq::RandomStream s) {
  return s == tq::RandomStream::kPhilox10Word32 ? "philox10 (version 1)" : "philox7x16 (version 2)";
}

struct LevelGuard {
  tq::SimdLevel saved = tq::cpu_simd_level();
  ~LevelGuard() { tq::set_cpu_simd_level(saved); }
};

void expect_rejected_saying(const tc::GradientCodec& c, std::span<const uint8_t> p, size_t n, const std::string& what) {
  expect_rejected_saying_on_decode(c, p, n, what);
  EXPECT_ANY_THROW(c.validate(p, n));
}

void refresh_crc(std::vector<uint8_t>& p) { tq::store_le32(p.data() + 28, tq::crc32_ieee(p.data(), 28)); }

}  // namespace

TEST(QsgdCodec, BytesMatchTheFloat64ReferenceAtEverySimdLevel) {
  LevelGuard guard;
  for (tq::RandomStream stream : kStreams)
  for (auto [S, B] : {std::pair{127u, 512u}, {1u, 4u}, {15u, 64u}, {5u, 36u}, {32767u, 128u}, {255u, 1000u}}) {
    SCOPED_TRACE(stream_name(stream));
    const Ref ref{S, B, stream};
    auto codec = qsgd(S, B, stream);
    for (size_t n : {size_t{0}, size_t{1}, size_t{3}, size_t{4}, size_t{129}, size_t{1031}, size_t{5000}}) {
      auto g = normal_floats(n, n + S, 0.3f);
      if (n > 100) {
        std::fill(g.begin() + 40, g.begin() + 80, 0.0f);  // an all-zero bucket for small B
        g[90] = -0.0f;
        g[91] = 1e-42f;  // denormal
      }
      const auto c = ctx(0x1234567890ull + n, 3, S);
      const auto want = ref.encode(g, 0, n, c);
      ASSERT_EQ(codec->payload_bytes(n), want.size());
      for (tq::SimdLevel lv : tq::supported_simd_levels()) {
        SCOPED_TRACE(std::string(tq::simd_level_name(lv)) + " S=" + std::to_string(S) + " B=" +
                     std::to_string(B) + " n=" + std::to_string(n));
        tq::set_cpu_simd_level(lv);
        ASSERT_EQ(encode(*codec, g, c), want);
      }
      std::vector<float> out(n);
      codec->decode(want, out);
      const auto dec = ref.decode(g, 0, n, c);
      for (size_t i = 0; i < n; ++i) ASSERT_TRUE(same_bits(out[i], dec[i])) << i << " " << out[i] << " " << dec[i];
    }
  }
}

// The encoder's division (a correctly rounded reciprocal and one FMA
// correction on x86, the divide where conditions fail) equals the IEEE
// division at every level: every significand of |g| in two binades against
// norms with special significands (1, all ones, 1.5, ...) and random ones,
// inside the fast range [2^-100, 2^100] and outside, |g| from the norm down
// to subnormals.
TEST(QsgdDivision, EqualsTheIeeeDivisionAtEveryLevel) {
  LevelGuard guard;
  std::mt19937 rng(7);
  std::vector<float> divs;
  for (uint32_t sig : {0u, 0x7FFFFFu, 0x400000u, 1u, 0x7FFFFEu, 0x2AAAABu, 0x3504F3u})
    divs.push_back(std::bit_cast<float>(0x3F800000u | sig));
  for (int i = 0; i < 12; ++i) divs.push_back(std::bit_cast<float>(static_cast<uint32_t>(0x3F800000u | (rng() & 0x7FFFFFu))));
  const size_t base = divs.size();
  for (size_t i = 0; i < base; ++i)
    for (float scale : {0x1p90f, 0x1p-90f, 0x1p-101f, 0x1p101f, 0x1p126f, 0x1p-126f}) divs.push_back(divs[i] * scale);
  std::vector<float> a(size_t{1} << 23), got(a.size());
  for (tq::SimdLevel lv : tq::supported_simd_levels()) {
    tq::set_cpu_simd_level(lv);
    size_t checked = 0;
    for (size_t d = 0; d < divs.size(); ++d) {
      const float div = divs[d];
      // All significands of the binade just below div (first 19 divs), else 2^16 random |g| <= div over all binades.
      size_t n = 0;
      if (d < base) {
        for (uint32_t m = 0; m < (1u << 23); ++m) a[n++] = std::bit_cast<float>(0x3F000000u | m) * (div >= 1.0f ? 1.0f : 0.5f);
      } else {
        for (; n < (size_t{1} << 16); ++n) {
          const float r = std::ldexp(std::bit_cast<float>(static_cast<uint32_t>(0x3F800000u | (rng() & 0x7FFFFFu))) * 0.5f, -static_cast<int>(rng() % 280));
          a[n] = n % 97 == 0 ? 0.0f : r * div;  // may be subnormal or zero
        }
      }
      terngrad::comm::detail::qsgd_quotients(a.data(), n, div, got.data());
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(a[i] / div))
            << tq::simd_level_name(lv) << " " << a[i] << " / " << div;
      checked += n;
    }
    EXPECT_GT(checked, size_t{100000000});
  }
}

// Version 2's fused x86 kernels compute a level from r = q * levels < 128 as
// (ceil(r * 2^16 - 1/2) + 65535 - h) >> 16 instead of the reference's
// trunc(r) + (256 h + 128 < frac * 2^24) (qsgd_codec.cpp, level_of_halves16).
// Every half h against r at its tie (256 h + 128 == frac * 2^24) in a spread
// of integer parts up to 127, the floats on both sides of it, and random r;
// then r spread over every binade below 128 (subnormals, 0, the float below
// 128) against random halves: every level computes the reference's level.
TEST(QsgdRounding, VersionTwoLevelsEqualTheReferenceAtEveryLevel) {
  LevelGuard guard;
  std::mt19937 rng(17);
  std::vector<float> r;
  std::vector<uint16_t> h;
  auto add = [&](float v, uint32_t hv) {
    r.push_back(v);
    h.push_back(static_cast<uint16_t>(hv));
  };
  for (uint32_t hv = 0; hv < 65536; ++hv) {
    // The tie is exact only where r's ulp allows it: l = 0 always, then
    // integer parts whose ulp (2^-17 below 2^6) keeps 17 fraction bits.
    const float frac = static_cast<float>(2 * hv + 1) * 0x1p-17f;
    for (uint32_t l : {0u, 1u + hv % 63}) {
      const float tie = static_cast<float>(l) + frac;
      for (float v : {tie, std::nextafter(tie, 0.0f), std::nextafter(tie, 128.0f)}) add(v, hv);
    }
    add(std::bit_cast<float>(static_cast<uint32_t>(rng() % 0x43000000u)), hv);  // [0, 128)
  }
  for (int e = -149; e < 7; ++e)
    for (int k = 0; k < 64; ++k)
      add(k == 0 ? std::ldexp(1.0f, e)
                 : std::min(std::nextafter(128.0f, 0.0f),
                            std::ldexp(1.0f + static_cast<float>(rng() % (1u << 23)) * 0x1p-23f, e)),
          rng());
  for (float v : {0.0f, std::nextafter(128.0f, 0.0f), 127.0f, 1.0f, 0.5f, std::nextafter(1.0f, 0.0f), 0x1p-17f,
                  0x1p-18f})
    for (uint32_t hv : {0u, 1u, 32767u, 32768u, 65535u}) add(v, hv);
  std::vector<uint32_t> level(r.size());
  for (tq::SimdLevel lv : tq::supported_simd_levels()) {
    tq::set_cpu_simd_level(lv);
    std::fill(level.begin(), level.end(), 1000u);
    terngrad::comm::detail::qsgd_levels_of_halves(r.data(), h.data(), r.size(), level.data());
    size_t ups = 0;
    for (size_t i = 0; i < r.size(); ++i) {
      const uint32_t l = static_cast<uint32_t>(r[i]);
      const float frac = r[i] - static_cast<float>(l);
      const bool up = static_cast<float>(256 * static_cast<int32_t>(h[i]) + 128) < frac * 16777216.0f;
      ASSERT_EQ(level[i], l + (up ? 1u : 0u)) << tq::simd_level_name(lv) << ": r " << r[i] << " (bits 0x" << std::hex
                                              << std::bit_cast<uint32_t>(r[i]) << std::dec << "), h " << h[i];
      ups += up;
    }
    EXPECT_GT(ups, r.size() / 8);  // both outcomes occur
    EXPECT_LT(ups, r.size() - r.size() / 8);
  }
}

// The x86 kernels divide |g| / norm without a divide (a correctly rounded
// reciprocal and one FMA correction, qsgd_codec.cpp), falling back to the
// divide for buckets whose norm lies outside [2^-100, 2^100] and for vectors
// holding tiny elements. Values spread over the whole float range (log-
// uniform exponents, subnormals, zeros, both signs), buckets of 4 to 64, the
// byte-aligned widths the fused kernels pack (2, 4, 8 bits) and one they do
// not: every level gives the float64 reference's bytes.
TEST(QsgdCodec, BytesMatchTheReferenceAcrossTheFloatRange) {
  LevelGuard guard;
  std::mt19937 rng(2026);
  std::vector<float> g(60000);
  for (size_t i = 0; i < g.size(); ++i) {
    const int e = static_cast<int>(rng() % 250) - 140;  // 2^-140 (subnormal) .. 2^109
    float v = std::ldexp(1.0f + static_cast<float>(rng() % (1u << 23)) * 0x1p-23f, e);
    if (rng() % 2) v = -v;
    if (rng() % 17 == 0) v = 0.0f;
    g[i] = v;
  }
  // Runs of buckets sharing one binade, so that norms fall inside and outside the fast range.
  for (size_t i = 0; i < g.size(); i += 1000) {
    const int e = static_cast<int>(rng() % 250) - 140;
    for (size_t j = i; j < std::min(g.size(), i + 300); ++j) g[j] = std::ldexp(std::fabs(g[j]) >= 1.0f ? 1.5f : 1.25f, e) * (j % 3 ? 1.0f : -0.7f);
  }
  for (tq::RandomStream stream : kStreams)
  for (auto [S, B] : {std::pair{127u, 64u}, {1u, 16u}, {7u, 32u}, {15u, 4u}}) {
    const Ref ref{S, B, stream};
    auto codec = qsgd(S, B, stream);
    const auto c = ctx(0xABCDEFull + S, 11, B);
    const auto want = ref.encode(g, 0, g.size(), c);
    for (tq::SimdLevel lv : tq::supported_simd_levels()) {
      tq::set_cpu_simd_level(lv);
      ASSERT_EQ(encode(*codec, g, c), want) << tq::simd_level_name(lv) << " S=" << S << " B=" << B << " "
                                            << stream_name(stream);
    }
  }
}

TEST(QsgdCodec, HugeAndTinyValues) {
  const Ref ref{7, 8};
  auto codec = qsgd(7, 8);
  std::vector<float> g = {3e38f, -3e38f, 3e38f, 1.0f, 1e-45f, -1e-45f, 0.0f, 2e-45f, 5.0f, -7.0f, 0.0f, 0.0f};
  const auto c = ctx(77);
  const auto p = encode(*codec, g, c);
  EXPECT_EQ(p, ref.encode(g, 0, g.size(), c));
  EXPECT_EQ(tq::load_le32(p.data() + 32), std::bit_cast<uint32_t>(std::numeric_limits<float>::max()));
  std::vector<float> out(g.size());
  codec->decode(p, out);
  for (float x : out) EXPECT_TRUE(std::isfinite(x));
}

TEST(QsgdCodec, SlicesOfAnyAlignedCutDecodeToTheWholeDecoding) {
  LevelGuard guard;
  std::mt19937_64 rng(3);
  for (tq::RandomStream stream : kStreams)
  for (auto [S, B] : {std::pair{127u, 512u}, {3u, 12u}, {15u, 64u}, {2047u, 100u}}) {
    SCOPED_TRACE(stream_name(stream));
    auto codec = qsgd(S, B, stream);
    const Ref ref{S, B, stream};
    const size_t n = 3001;
    const auto g = normal_floats(n, S * 7 + B);
    const auto c = ctx(99, 11, 4);
    std::vector<float> whole(n);
    codec->decode(encode(*codec, g, c), whole);
    for (int trial = 0; trial < 20; ++trial) {
      auto [slices, bufs, outs] =
          random_slicing(*codec, n, 1 + trial % 5, rng, trial == 0 ? std::optional<uint64_t>(B + 4) : std::nullopt);
      for (tq::SimdLevel lv : tq::supported_simd_levels()) {
        tq::set_cpu_simd_level(lv);
        codec->encode_slices(g, c, slices, outs);
        for (size_t k = 0; k < slices.size(); ++k) {
          ASSERT_EQ(bufs[k], ref.encode(g, slices[k].begin, slices[k].count, c)) << k;
          std::vector<float> part(slices[k].count);
          codec->decode(bufs[k], part);
          for (size_t e = 0; e < part.size(); ++e)
            ASSERT_TRUE(same_bits(part[e], whole[slices[k].begin + e])) << slices[k].begin + e;
        }
      }
    }
  }
}

// E[decode] = g. 2000 seeds per element; z = (mean - g) / (sd / sqrt(2000))
// with sd the exact per-draw standard deviation (norm/S)*sqrt(p(1-p)). The
// mean of 2000 Bernoulli draws is close to normal; |z| < 5.5 has a two-sided
// false-alarm rate of about 4e-8 per element, 3e-5 for the 768 elements
// below (the seeds are fixed, so the test is deterministic anyway). Elements
// with p = 0 (exact levels) must decode exactly every time.
TEST(QsgdCodec, UnbiasedOverManySeeds) {
  constexpr int kSeeds = 2000;
  for (tq::RandomStream stream : kStreams)
  for (auto [S, B] : {std::pair{1u, 64u}, {4u, 32u}, {127u, 256u}}) {
    SCOPED_TRACE(stream_name(stream));
    auto codec = qsgd(S, B, stream);
    const size_t n = 256;
    auto g = normal_floats(n, 1000 + S, 2.0f);
    g[7] = 0.0f;
    std::vector<double> sum(n, 0.0);
    std::vector<float> out(n);
    for (int s = 0; s < kSeeds; ++s) {
      codec->decode(encode(*codec, g, ctx(0xC0FFEEull * (s + 1), 1, 2)), out);
      for (size_t i = 0; i < n; ++i) sum[i] += out[i];
    }
    double max_z = 0;
    for (size_t i = 0; i < n; ++i) {
      const size_t b0 = i / B * B;
      const double nm = Ref::norm(std::span<const float>(g).subspan(b0, std::min<size_t>(B, n - b0)));
      const double unit = nm / S, r = std::fabs(g[i]) / nm * S, p = r - std::floor(r);
      const double mean = sum[i] / kSeeds, sd = unit * std::sqrt(p * (1 - p));
      if (sd == 0) {
        ASSERT_NEAR(mean, g[i], 1e-6 * std::fabs(g[i])) << i;
        continue;
      }
      const double z = (mean - g[i]) / (sd / std::sqrt(double(kSeeds)));
      max_z = std::max(max_z, std::fabs(z));
      ASSERT_LT(std::fabs(z), 5.5) << "S=" << S << " element " << i << " g=" << g[i] << " mean=" << mean;
    }
    EXPECT_GT(max_z, 0.5);  // the draws do vary
  }
}

TEST(QsgdCodec, DecodeAccumulateAndDefaultAggregate) {
  auto codec = qsgd(15, 64);
  const auto g1 = normal_floats(300, 1), g2 = normal_floats(300, 2);
  const auto p1 = encode(*codec, g1, ctx(1)), p2 = encode(*codec, g2, ctx(2));
  std::vector<float> d1(300), d2(300), acc(300, 0.5f);
  codec->decode(p1, d1);
  codec->decode(p2, d2);
  codec->decode_accumulate(p1, acc);
  for (size_t i = 0; i < 300; ++i) ASSERT_EQ(acc[i], 0.5f + d1[i]);
  codec->validate(p1, 300);
  EXPECT_FALSE(codec->sums_without_decoding());
  std::vector<uint8_t> agg;
  const std::span<const uint8_t> ps[2] = {p1, p2};
  codec->aggregate(ps, 300, agg);
  std::vector<float> sum(300);
  codec->decode_aggregate(agg, sum);
  for (size_t i = 0; i < 300; ++i) ASSERT_EQ(sum[i], (0.0f + d1[i]) + d2[i]);
}

TEST(QsgdCodec, NonFiniteInputsNamed) {
  auto codec = qsgd(127, 16);
  auto g = normal_floats(100, 3);
  g[37] = NAN;
  std::vector<uint8_t> out(codec->payload_bytes(100));
  try {
    codec->encode(g, {}, out);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("element 37 is NaN"), std::string::npos) << e.what();
  }
  g[37] = -INFINITY;
  EXPECT_THROW(codec->encode(g, {}, out), std::invalid_argument);
}

TEST(QsgdCodec, MalformedPayloadsAreRejectedNamingTheProblem) {
  const uint32_t S = 5, B = 8;  // 4 bits per element: level 6, 7 are invalid
  auto codec = qsgd(S, B);
  const size_t n = 22;  // from element 8: buckets 1..3 (3 used), 4 slots; 88 bits
  auto g = normal_floats(40, 4);
  std::fill(g.begin() + 16, g.begin() + 24, 0.0f);  // bucket 2: norm 0
  std::vector<uint8_t> good(codec->payload_bytes(n));
  const tc::ElementRange r{8, n};
  const std::span<uint8_t> outs[1] = {good};
  codec->encode_slices(g, ctx(5), std::span(&r, 1), outs);
  ASSERT_EQ(good.size(), 32 + 4 * 4 + 11u);
  ASSERT_EQ(tq::load_le32(good.data() + 12), 0u);
  codec->validate(good, n);
  const size_t norms = 32, body = 32 + 16;

  auto bad = good;
  bad[0] ^= 1;
  expect_rejected_saying(*codec, bad, n, "bad magic");
  for (uint8_t version : {0, 3, 255}) {
    bad = good;
    bad[4] = version;
    refresh_crc(bad);
    expect_rejected_saying(*codec, bad, n, "unsupported format version " + std::to_string(version));
  }
  bad = good;
  bad[17] ^= 1;
  expect_rejected_saying(*codec, bad, n, "CRC");
  bad = good;
  bad[6] = 6;
  refresh_crc(bad);
  expect_rejected_saying(*codec, bad, n, "levels=6");
  bad = good;
  bad[5] = 5;
  refresh_crc(bad);
  expect_rejected_saying(*codec, bad, n, "bits per element");
  bad = good;
  tq::store_le32(bad.data() + 8, 12);
  refresh_crc(bad);
  expect_rejected_saying(*codec, bad, n, "bucket=12");
  bad = good;
  tq::store_le32(bad.data() + 12, 6);
  refresh_crc(bad);
  expect_rejected_saying(*codec, bad, n, "first bucket offset");
  bad = good;
  bad[25] = 1;
  refresh_crc(bad);
  expect_rejected_saying(*codec, bad, n, "reserved");
  expect_rejected_saying(*codec, std::span(good).first(good.size() - 1), n, "take exactly");
  bad = good;
  bad.push_back(0);
  expect_rejected_saying(*codec, bad, n, "take exactly");
  bad = good;
  tq::store_le64(bad.data() + 16, n + 1);
  refresh_crc(bad);
  expect_rejected_saying(*codec, bad, n, "take exactly");
  expect_rejected_saying(*codec, good, n - 1, "output has");
  for (auto [bits, what] : {std::pair{0x7FC00000u, "NaN"}, {0x7F800000u, "infinite"}, {0xBF800000u, "negative"},
                            {0x80000000u, "negative"}}) {
    bad = good;
    tq::store_le32(bad.data() + norms + 4, bits);
    expect_rejected_saying(*codec, bad, n, what);
  }
  bad = good;
  tq::store_le32(bad.data() + norms + 12, 0x3F800000u);  // the unused fourth slot
  expect_rejected_saying(*codec, bad, n, "unused norm slot 3");
  bad = good;
  bad[body] = static_cast<uint8_t>((bad[body] & 0xF0) | (7 << 1));  // element 0: level 7 > 5
  expect_rejected_saying(*codec, bad, n, "above levels=5");
  bad = good;
  bad[body] = static_cast<uint8_t>((bad[body] & 0xF0) | 1);  // level 0 with the sign bit
  expect_rejected_saying(*codec, bad, n, "negative zero");
  bad = good;
  bad[body + 5] = static_cast<uint8_t>((bad[body + 5] & 0xF0) | 2);  // element 10 (absolute 18, bucket 2), level 1
  expect_rejected_saying(*codec, bad, n, "norm is 0");
  // 88 bits fill 11 bytes exactly: the padding check needs an odd count.
  {
    std::vector<uint8_t> p21(codec->payload_bytes(21));
    const tc::ElementRange r21{8, 21};
    const std::span<uint8_t> o21[1] = {p21};
    codec->encode_slices(g, ctx(5), std::span(&r21, 1), o21);
    codec->validate(p21, 21);
    p21.back() |= 0x80;
    expect_rejected_saying(*codec, p21, 21, "padding");
  }
  expect_rejected_saying(*qsgd(5, 16), good, n, "bucket=8");
  expect_rejected(*codec, encode(*tc::make_codec("fp32"), std::span<const float>(g).first(n)), n);
}

// Payloads of both versions decode with either stream's codec: the version
// names the stream that drew the levels, and the decoder needs only the
// levels. A version-1 payload is the bytes of qsgd before version 2.
TEST(QsgdCodec, PayloadsOfEitherVersionDecode) {
  const size_t n = 777;
  const auto g = normal_floats(n, 21);
  const auto c = ctx(0x5EEDull, 4, 6);
  for (tq::RandomStream made_by : kStreams) {
    const Ref ref{15, 64, made_by};
    const auto payload = encode(*qsgd(15, 64, made_by), g, c);
    ASSERT_EQ(payload[4], static_cast<uint8_t>(made_by));
    ASSERT_EQ(payload, ref.encode(g, 0, n, c));
    const auto want = ref.decode(g, 0, n, c);
    for (tq::RandomStream decoder : kStreams) {
      std::vector<float> out(n);
      qsgd(15, 64, decoder)->decode(payload, out);
      for (size_t i = 0; i < n; ++i)
        ASSERT_TRUE(same_bits(out[i], want[i])) << stream_name(made_by) << " decoded by " << stream_name(decoder);
    }
  }
  // The streams do differ (else the version would name nothing).
  EXPECT_NE(encode(*qsgd(15, 64, kStreams[0]), g, c), encode(*qsgd(15, 64, kStreams[1]), g, c));
}

// Version 2's bias bound (FORMATS.md step 3): with u = 256 h + 128 over the
// 2^16 halves h, P(level = l + 1) = #{h : u < frac * 2^24} / 2^16 is frac
// rounded to a multiple of 2^-16, so it is within 2^-17 of frac (plus the
// float32 rounding of frac * 2^24, exact here: frac has at most 24 bits).
// Counted exactly for every frac on a 2^-20 grid and near the cell edges.
TEST(QsgdCodec, VersionTwoRoundsUpWithinTwoToMinus17OfTheFraction) {
  std::vector<float> fracs;
  for (uint32_t k = 0; k < (1u << 20); k += 7) fracs.push_back(static_cast<float>(k) * 0x1p-20f);
  for (uint32_t h = 0; h < (1u << 16); h += 251)
    for (int d : {-1, 0, 1}) fracs.push_back(std::clamp((static_cast<float>(h) + 0.5f) * 0x1p-16f + d * 0x1p-24f, 0.0f, 0.99999994f));
  double worst = 0;
  for (float frac : fracs) {
    const float t = frac * 16777216.0f;
    // #{h : 256 h + 128 < t}: the kernels' comparison, counted in closed form and checked at the edge.
    const double hs = std::clamp(std::ceil((static_cast<double>(t) - 128.0) / 256.0), 0.0, 65536.0);
    ASSERT_TRUE(hs == 0 || 256.0 * (hs - 1) + 128.0 < t) << frac;
    ASSERT_TRUE(hs == 65536 || !(256.0 * hs + 128.0 < t)) << frac;
    const double bias = std::fabs(hs / 65536.0 - static_cast<double>(frac));
    worst = std::max(worst, bias);
    ASSERT_LE(bias, 0x1p-17) << "frac " << frac;
  }
  EXPECT_GT(worst, 0x1p-18);  // the bound is reached, not loose by orders of magnitude
}

TEST(QsgdCodec, SpecsAndPayloadSizes) {
  for (const char* s : {"qsgd", "qsgd:levels=1,bucket=4", "qsgd:bucket=64,levels=15",
                        "qsgd:levels=15,bucket=64,stream=philox10", "qsgd:stream=philox7x16"}) {
    auto c = tc::make_codec(s);
    EXPECT_EQ(tc::make_codec(c->spec())->spec(), c->spec());
    EXPECT_EQ(c->config(), tc::parse_codec_config(s));
  }
  EXPECT_EQ(tc::make_codec("qsgd")->spec(), "qsgd:levels=127,bucket=512");
  auto c = tc::make_codec(tc::CodecConfig{tc::QsgdParams{.levels = 15, .bucket = 64}, std::nullopt});
  EXPECT_EQ(c->spec(), "qsgd:levels=15,bucket=64");
  EXPECT_EQ(tc::make_codec("qsgd:stream=philox10")->spec(), "qsgd:levels=127,bucket=512,stream=philox10");
  EXPECT_EQ(tc::make_codec("qsgd:stream=philox7x16")->spec(), "qsgd:levels=127,bucket=512");
  EXPECT_THROW(tc::make_codec("qsgd:stream=philox9"), std::invalid_argument);
  EXPECT_THROW(tc::make_codec("qsgd:levels=0"), std::invalid_argument);
  EXPECT_THROW(tc::make_codec("qsgd:bucket=6"), std::invalid_argument);
  // 5 bits per element (S = 15); slots: the most buckets n elements starting
  // at a multiple of 4 touch.
  EXPECT_EQ(c->payload_bytes(0), 32u);
  EXPECT_EQ(c->payload_bytes(1), 32u + 4 + 1);
  EXPECT_EQ(c->payload_bytes(4), 32u + 4 + 3);
  EXPECT_EQ(c->payload_bytes(5), 32u + 8 + 4);  // from offset 60: two buckets
  EXPECT_EQ(c->payload_bytes(64), 32u + 8 + 40);
  EXPECT_EQ(c->payload_bytes(68), 32u + 8 + 43);
  EXPECT_EQ(c->payload_bytes(69), 32u + 12 + 44);
}

// Why ef(qsgd:levels=7) diverged in the codec grid (experiments/results/
// codecs): with few levels QSGD's variance exceeds the gradient's own norm
// (omega ~ sqrt(bucket) / levels > 1), so the error-feedback recursion
// e <- p - C(p), p = g + e, grows without bound; with many levels it stays
// small. The same recursion the ef() wrapper runs, over Gaussian gradients.
TEST(QsgdCodec, UnderErrorFeedbackFewLevelsGrowTheResidualManyLevelsDoNot) {
  constexpr size_t kN = 8192;
  const auto residual_rms = [&](const char* spec) {
    auto c = tc::make_codec(spec);
    std::vector<float> e(kN, 0.0f), p(kN), sent(kN);
    for (uint32_t step = 0; step < 40; ++step) {
      const std::vector<float> g = normal_floats(kN, 1000 + step);
      for (size_t i = 0; i < kN; ++i) p[i] = g[i] + e[i];
      tc::EncodeContext ctx;
      ctx.step = step;
      ctx.seed = 3;
      c->decode(encode(*c, p, ctx), sent);
      for (size_t i = 0; i < kN; ++i) e[i] = p[i] - sent[i];
    }
    double ss = 0;
    for (float v : e) ss += static_cast<double>(v) * v;
    return std::sqrt(ss / kN);  // in units of the gradient's sigma (1)
  };
  const double few = residual_rms("qsgd:levels=7,bucket=512");
  const double many = residual_rms("qsgd:levels=127,bucket=512");
  EXPECT_LT(many, 0.5);
  EXPECT_GT(few, 20.0);
  std::printf("error-feedback residual rms after 40 steps: levels=7 %.3g, levels=127 %.3g\n", few, many);
}
