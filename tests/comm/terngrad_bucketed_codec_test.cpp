// "terngrad:...,bucket=B" against a scalar float64 reference written from
// quantize/FORMAT.md ("Bucketed ternary payload"): bytes at every SIMD level,
// slicing invariance, unbiasedness, zero buckets, aggregation, malformed
// payloads, specs, and the worked example of the format page.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>

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
  uint32_t B;
  float clip;
  uint8_t version = 2;  // the random stream (FORMAT.md step 3); the codec's default is 2

  uint64_t slots(uint64_t n) const { return n == 0 ? 0 : (n + B - 4 + B - 1) / B; }
  size_t bytes(uint64_t n) const { return 48 + 4 * slots(n) + (n + 3) / 4; }

  // FORMAT.md step 1 of codec 1: float64 sums, chunks of 4096, lane l of a
  // chunk adds elements l, l+32, ...; lanes fold 16, 8, 4, 2, 1; the chunk
  // results go to lane c % 32 and fold the same way.
  static double fold(double* lane) {
    for (int o = 16; o >= 1; o /= 2)
      for (int l = 0; l < o; ++l) lane[l] += lane[l + o];
    return lane[0];
  }
  static double sigma(std::span<const float> g) {
    const size_t n = g.size();
    if (n == 0) return 0.0;
    double chunk_sum[32] = {}, chunk_sq[32] = {};
    for (size_t c = 0; c * 4096 < n; ++c) {
      double s[32] = {}, q[32] = {};
      for (size_t e = c * 4096; e < std::min(n, (c + 1) * 4096); ++e) {
        s[(e - c * 4096) % 32] += g[e];
        q[(e - c * 4096) % 32] += static_cast<double>(g[e]) * g[e];
      }
      chunk_sum[c % 32] += fold(s);
      chunk_sq[c % 32] += fold(q);
    }
    const double mean = fold(chunk_sum) / n;
    const double var = std::fma(-mean, mean, fold(chunk_sq) / n);
    return std::sqrt(std::max(var, 0.0));
  }
  // Step 2: the bucket's max|g|, clipped at c * sigma of the whole variable.
  float scale(std::span<const float> bucket, double sig) const {
    float m = 0.0f;
    for (float x : bucket) m = std::max(m, std::fabs(x));
    if (m == 0.0f) return 0.0f;
    if (clip > 0.0f) {
      const double c = static_cast<double>(clip) * sig;
      if (c < m && static_cast<float>(c) > 0.0f) return static_cast<float>(c);
    }
    return m;
  }
  // The word whose top 24 bits are element i's u: version 1, word i % 4 of
  // Philox4x32-10 at block i / 4; version 2, half i % 8 of Philox4x32-7 at
  // block i / 8 as h << 16 | 0x8000 (u = 256 h + 128).
  uint32_t word(uint64_t i, const tc::EncodeContext& c) const {
    const uint64_t k = version == 1 ? i / 4 : i / 8;
    const tq::Philox4x32Counter ctr{{uint32_t(k), uint32_t(k >> 32), c.step, c.tensor_id}};
    const tq::Philox4x32Key key{{uint32_t(c.seed), uint32_t(c.seed >> 32)}};
    if (version == 1) return tq::philox4x32_10(ctr, key).v[i % 4];
    const uint32_t h = (tq::philox4x32_7(ctr, key).v[(i % 8) / 2] >> (16 * (i % 2))) & 0xFFFFu;
    return h << 16 | 0x8000u;
  }
  // Step 4 with every float32 operation done in float64 and rounded (the
  // products of two floats are exact in float64, so this is the float32 op).
  static uint32_t code(float g, float s, uint32_t w) {
    if (s == 0.0f) return 0;
    const float a = std::min(std::fabs(g), s);
    const double pre = s < 0x1p-64f ? 0x1p64 : 1.0;
    const float inv24 = static_cast<float>(static_cast<double>(static_cast<float>(1.0 / (s * pre))) * 0x1p24);
    const float t = static_cast<float>(static_cast<double>(static_cast<float>(a * pre)) * inv24);
    const bool keep = a > 0.0f && (a >= s || static_cast<double>(w >> 8) < t);
    return keep ? (std::signbit(g) ? 2u : 1u) : 0u;
  }
  std::vector<uint8_t> encode(std::span<const float> g, uint64_t begin, uint64_t n, const tc::EncodeContext& c) const {
    std::vector<uint8_t> out(bytes(n), 0);
    const uint64_t first = begin % B, used = n == 0 ? 0 : (first + n + B - 1) / B;
    tq::store_le32(out.data(), 0x44524754u);  // "TGRD"
    out[4] = version;
    out[5] = 3;
    out[6] = 0;
    out[7] = 48;
    tq::store_le64(out.data() + 8, n);
    tq::store_le32(out.data() + 16, B);
    tq::store_le32(out.data() + 20, c.tensor_id);
    tq::store_le64(out.data() + 24, c.seed);
    tq::store_le32(out.data() + 32, c.step);
    tq::store_le32(out.data() + 36, static_cast<uint32_t>(first));
    tq::store_le32(out.data() + 44, tq::crc32_ieee(out.data(), 44));
    const double sig = sigma(g);
    std::vector<float> scales;
    for (uint64_t j = 0; j < used; ++j) {
      const uint64_t b0 = (begin / B + j) * B, b1 = std::min<uint64_t>(b0 + B, g.size());
      scales.push_back(scale(g.subspan(b0, b1 - b0), sig));
      tq::store_le32(out.data() + 48 + 4 * j, std::bit_cast<uint32_t>(scales.back()));
    }
    uint8_t* body = out.data() + 48 + 4 * slots(n);
    for (uint64_t e = 0; e < n; ++e) {
      const uint64_t i = begin + e;
      body[e / 4] |= static_cast<uint8_t>(code(g[i], scales[i / B - begin / B], word(i, c)) << (2 * (e % 4)));
    }
    return out;
  }
  std::vector<float> decode(std::span<const float> g, const tc::EncodeContext& c) const {
    const double sig = sigma(g);
    std::vector<float> v(g.size());
    for (size_t i = 0; i < g.size(); ++i) {
      const size_t b0 = i / B * B;
      const float s = scale(g.subspan(b0, std::min<size_t>(b0 + B, g.size()) - b0), sig);
      const uint32_t k = code(g[i], s, word(i, c));
      v[i] = k == 0 ? 0.0f : k == 1 ? s : -s;
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

std::string spec_of(uint32_t B, float clip) {
  return "terngrad:clip=" + std::to_string(clip) + ",bucket=" + std::to_string(B);
}

struct LevelGuard {
  tq::SimdLevel saved = tq::cpu_simd_level();
  ~LevelGuard() { tq::set_cpu_simd_level(saved); }
};

void expect_rejected_saying(const tc::GradientCodec& c, std::span<const uint8_t> p, size_t n, const std::string& what) {
  expect_rejected_saying_on_decode(c, p, n, what);
  EXPECT_ANY_THROW(c.validate(p, n));
  std::vector<uint8_t> agg;
  const std::span<const uint8_t> one[1] = {p};
  EXPECT_ANY_THROW(c.aggregate(one, n, agg));
}

void refresh_crc(std::vector<uint8_t>& p) { tq::store_le32(p.data() + 44, tq::crc32_ieee(p.data(), 44)); }

}  // namespace

TEST(TernGradBucketed, BytesMatchTheFloat64ReferenceAtEverySimdLevel) {
  LevelGuard guard;
  for (auto [B, clip] : {std::pair{512u, 2.5f}, {4u, 0.0f}, {64u, 2.5f}, {36u, 1.0f}, {128u, 0.0f}, {1000u, 2.5f}}) {
    const Ref ref{B, clip};
    auto codec = tc::make_codec(spec_of(B, clip));
    for (size_t n : {size_t{0}, size_t{1}, size_t{3}, size_t{4}, size_t{129}, size_t{1031}, size_t{5000}, size_t{70001}}) {
      auto g = normal_floats(n, n + B, 0.3f);
      if (n > 100) {
        std::fill(g.begin() + 40, g.begin() + 80, 0.0f);  // an all-zero bucket for small B
        g[90] = -0.0f;
        g[91] = 1e-42f;  // denormal
        g[97] = 40.0f;   // an outlier: clipped where clip > 0
      }
      if (n > 4096) {
        for (size_t i = 4000; i < 4100; ++i) g[i] *= 1e-30f;  // scales below 2^-64 (the pre factor)
      }
      const auto c = ctx(0x1234567890ull + n, 3, B);
      const auto want = ref.encode(g, 0, n, c);
      ASSERT_EQ(codec->payload_bytes(n), want.size());
      for (tq::SimdLevel lv : tq::supported_simd_levels()) {
        SCOPED_TRACE(std::string(tq::simd_level_name(lv)) + " B=" + std::to_string(B) + " clip=" +
                     std::to_string(clip) + " n=" + std::to_string(n));
        tq::set_cpu_simd_level(lv);
        ASSERT_EQ(encode(*codec, g, c), want);
        std::vector<float> out(n);
        codec->decode(want, out);
        const auto dec = ref.decode(g, c);
        for (size_t i = 0; i < n; ++i) ASSERT_TRUE(same_bits(out[i], dec[i])) << i << " " << out[i] << " " << dec[i];
      }
    }
  }
}

TEST(TernGradBucketed, ClipUsesTheWholeVariablesSigma) {
  const size_t n = 1024;
  auto g = normal_floats(n, 8, 1.0f);
  g[5] = 100.0f;  // bucket 0 holds an outlier
  for (size_t i = 512; i < 1024; ++i) g[i] *= 0.01f;  // bucket 1 is small
  auto codec = tc::make_codec("terngrad:bucket=512");  // clip 2.5
  const auto p = encode(*codec, g, ctx(1));
  const float sig = static_cast<float>(Ref::sigma(g));
  const float s0 = std::bit_cast<float>(tq::load_le32(p.data() + 48));
  const float s1 = std::bit_cast<float>(tq::load_le32(p.data() + 52));
  EXPECT_FLOAT_EQ(s0, 2.5f * sig);  // clipped at 2.5 sigma, not 100
  float m1 = 0.0f;
  for (size_t i = 512; i < 1024; ++i) m1 = std::max(m1, std::fabs(g[i]));
  EXPECT_EQ(s1, m1);  // below 2.5 sigma: its own max
}

TEST(TernGradBucketed, SlicesOfAnyAlignedCutGiveTheWholeBytesAndValues) {
  LevelGuard guard;
  std::mt19937_64 rng(3);
  for (auto [B, clip] : {std::pair{512u, 2.5f}, {12u, 0.0f}, {64u, 2.5f}, {100u, 1.5f}}) {
    auto codec = tc::make_codec(spec_of(B, clip));
    const Ref ref{B, clip};
    const size_t n = 3001;
    const auto g = normal_floats(n, B * 7 + 1);
    const auto c = ctx(99, 11, 4);
    std::vector<float> whole(n);
    codec->decode(encode(*codec, g, c), whole);
    for (int trial = 0; trial < 20; ++trial) {
      auto [slices, bufs, outs] =
          random_slicing(*codec, n, 1 + trial % 5, rng, trial == 0 ? std::optional<uint64_t>(B + 4) : std::nullopt);  // trial 0: also inside bucket 1
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

// E[decode] = g with clip 0. 2000 seeds per element; each draw is +-s_b with
// probability p = |g|/s_b, else 0, so sd = s_b * sqrt(p(1-p)) and
// z = (mean - g) / (sd / sqrt(2000)); |z| < 5.5 has a false-alarm rate of
// about 4e-8 per element (the seeds are fixed: deterministic anyway). The
// bucket's max (p = 1) and zeros (p = 0) decode exactly every time.
TEST(TernGradBucketed, UnbiasedPerElementOverManySeeds) {
  constexpr int kSeeds = 2000;
  for (uint32_t B : {4u, 32u, 256u}) {
    auto codec = tc::make_codec(spec_of(B, 0.0f));
    const size_t n = 256;
    auto g = normal_floats(n, 1000 + B, 2.0f);
    g[7] = 0.0f;
    for (size_t i = 64; i < 72; ++i) g[i] *= 1e-3f;  // a quiet stretch: its own small scale where B < 64
    std::vector<double> sum(n, 0.0);
    std::vector<float> out(n);
    for (int s = 0; s < kSeeds; ++s) {
      codec->decode(encode(*codec, g, ctx(0xC0FFEEull * (s + 1), 1, 2)), out);
      for (size_t i = 0; i < n; ++i) sum[i] += out[i];
    }
    double max_z = 0;
    for (size_t i = 0; i < n; ++i) {
      const size_t b0 = i / B * B;
      double sb = 0;
      for (size_t k = b0; k < std::min<size_t>(b0 + B, n); ++k) sb = std::max(sb, double(std::fabs(g[k])));
      const double p = std::fabs(g[i]) / sb, mean = sum[i] / kSeeds, sd = sb * std::sqrt(p * (1 - p));
      if (sd == 0) {
        ASSERT_NEAR(mean, g[i], 1e-6 * std::fabs(g[i])) << i;
        continue;
      }
      const double z = (mean - g[i]) / (sd / std::sqrt(double(kSeeds)));
      max_z = std::max(max_z, std::fabs(z));
      ASSERT_LT(std::fabs(z), 5.5) << "B=" << B << " element " << i << " g=" << g[i] << " mean=" << mean;
    }
    EXPECT_GT(max_z, 0.5);  // the draws do vary
  }
}

TEST(TernGradBucketed, ZeroBucketsHaveScaleZeroAndDecodeToZero) {
  auto codec = tc::make_codec("terngrad:clip=2.5,bucket=8");
  std::vector<float> g = normal_floats(30, 5);
  std::fill(g.begin() + 8, g.begin() + 16, 0.0f);
  g[12] = -0.0f;
  const auto p = encode(*codec, g, ctx(3));
  EXPECT_EQ(tq::load_le32(p.data() + 48 + 4), 0u);  // bucket 1: +0.0
  const size_t body = 48 + 4 * 4;
  EXPECT_EQ(p[body + 2], 0);
  EXPECT_EQ(p[body + 3], 0);
  std::vector<float> out(30, 9.0f);
  codec->decode(p, out);
  for (size_t i = 8; i < 16; ++i) EXPECT_TRUE(same_bits(out[i], 0.0f)) << i;

  const std::vector<float> zeros(100, 0.0f);  // all buckets zero
  const auto pz = encode(*codec, zeros, ctx(3));
  std::vector<float> outz(100, 9.0f);
  codec->decode(pz, outz);
  for (float x : outz) ASSERT_TRUE(same_bits(x, 0.0f));
}

TEST(TernGradBucketed, AggregateIsTheFloat32SumOfTheDecodes) {
  auto codec = tc::make_codec("terngrad:bucket=64");
  EXPECT_FALSE(codec->sums_without_decoding());
  EXPECT_FALSE(codec->wants_shared_scale());
  const size_t n = 1001;
  std::vector<std::vector<uint8_t>> payloads;
  std::vector<float> ordered(n, 0.0f);
  for (int w = 0; w < 3; ++w) {
    payloads.push_back(encode(*codec, normal_floats(n, 40 + w, 0.1f * (w + 1)), ctx(100 + w)));
    std::vector<float> d(n);
    codec->decode(payloads.back(), d);
    for (size_t i = 0; i < n; ++i) ordered[i] += d[i];
  }
  std::vector<float> acc(n, 0.5f), d0(n);
  codec->decode(payloads[0], d0);
  codec->decode_accumulate(payloads[0], acc);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(acc[i], 0.5f + d0[i]);

  std::vector<std::span<const uint8_t>> views(payloads.begin(), payloads.end());
  std::vector<uint8_t> agg;
  codec->aggregate(views, n, agg);
  EXPECT_EQ(agg.size(), 4 * n + 16) << "an fp32 payload";
  std::vector<float> out(n);
  codec->decode_aggregate(agg, out);
  for (size_t i = 0; i < n; ++i) ASSERT_TRUE(same_bits(out[i], ordered[i])) << i;

  // One payload is its own exact sum: returned as it is.
  codec->aggregate(std::span(views).first(1), n, agg);
  EXPECT_EQ(agg, payloads[0]);
  codec->decode_aggregate(agg, out);
  for (size_t i = 0; i < n; ++i) ASSERT_TRUE(same_bits(out[i], d0[i])) << i;
}

TEST(TernGradBucketed, NonFiniteInputIsNamedAndNothingIsWritten) {
  auto codec = tc::make_codec("terngrad:bucket=16");
  auto g = normal_floats(100, 3);
  g[37] = NAN;
  std::vector<uint8_t> out(codec->payload_bytes(100), 0xAB);
  try {
    codec->encode(g, {}, out);
    FAIL();
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("element 37 of 100 is NaN"), std::string::npos) << e.what();
  }
  for (uint8_t b : out) ASSERT_EQ(b, 0xAB);
  g[37] = -INFINITY;
  EXPECT_ANY_THROW(codec->encode(g, {}, out));
}

TEST(TernGradBucketed, MalformedPayloadsAreRejectedNamingTheProblem) {
  const uint32_t B = 8;
  auto codec = tc::make_codec("terngrad:clip=0,bucket=8");
  const size_t n = 22;  // from element 8: buckets 1..3 used, 4 slots, 6 body bytes
  auto g = normal_floats(40, 4);
  std::fill(g.begin() + 16, g.begin() + 24, 0.0f);  // bucket 2: scale 0
  std::vector<uint8_t> good(codec->payload_bytes(n));
  const tc::ElementRange r{8, n};
  const std::span<uint8_t> outs[1] = {good};
  codec->encode_slices(g, ctx(5), std::span(&r, 1), outs);
  ASSERT_EQ(good.size(), 48 + 4 * 4 + 6u);
  ASSERT_EQ(tq::load_le32(good.data() + 36), 0u);
  codec->validate(good, n);
  const size_t scales = 48, body = 48 + 16;
  ASSERT_EQ(tq::load_le32(good.data() + scales + 4), 0u);

  auto bad = good;
  bad[0] ^= 1;
  expect_rejected_saying(*codec, bad, n, "bad magic");
  bad = good;
  bad[4] = 3;
  refresh_crc(bad);
  expect_rejected_saying(*codec, bad, n, "version 3");
  bad = good;
  bad[5] = 1;
  refresh_crc(bad);
  expect_rejected_saying(*codec, bad, n, "codec id 1");
  bad = good;
  bad[7] = 40;
  refresh_crc(bad);
  expect_rejected_saying(*codec, bad, n, "header size field 40");
  bad = good;
  bad[6] = 1;
  refresh_crc(bad);
  expect_rejected_saying(*codec, bad, n, "flags 1");
  bad = good;
  bad[21] ^= 1;
  expect_rejected_saying(*codec, bad, n, "CRC");
  bad = good;
  bad[41] = 1;
  refresh_crc(bad);
  expect_rejected_saying(*codec, bad, n, "reserved bytes 40-43");
  for (uint32_t b : {0u, 6u, 12u, 0x80000000u}) {
    bad = good;
    tq::store_le32(bad.data() + 16, b);
    refresh_crc(bad);
    expect_rejected_saying(*codec, bad, n, "bucket size " + std::to_string(b));
  }
  for (uint32_t first : {2u, 8u, 12u}) {
    bad = good;
    tq::store_le32(bad.data() + 36, first);
    refresh_crc(bad);
    expect_rejected_saying(*codec, bad, n, "first bucket offset " + std::to_string(first));
  }
  expect_rejected_saying(*codec, std::span(good).first(good.size() - 1), n, "take exactly");
  expect_rejected_saying(*codec, std::span(good).first(47), n, "shorter than the 48-byte header");
  bad = good;
  bad.push_back(0);
  expect_rejected_saying(*codec, bad, n, "take exactly");
  bad = good;
  tq::store_le64(bad.data() + 8, n + 3);
  refresh_crc(bad);
  expect_rejected_saying(*codec, bad, n, "take exactly");
  bad = good;
  tq::store_le64(bad.data() + 8, n + 1);  // the same length: the output size disagrees
  refresh_crc(bad);
  expect_rejected_saying(*codec, bad, n, "the payload holds 23");
  bad = good;
  tq::store_le64(bad.data() + 8, ~uint64_t{0});
  refresh_crc(bad);
  expect_rejected_saying(*codec, bad, n, "implausibly large");
  for (auto [bits, what] : {std::pair{0x7FC00000u, "NaN"}, {0x7F800000u, "infinite"}, {0xBF800000u, "negative"},
                            {0x80000000u, "negative"}}) {
    bad = good;
    tq::store_le32(bad.data() + scales, bits);
    expect_rejected_saying(*codec, bad, n, std::string("scale 0 is ") + what);
  }
  bad = good;
  tq::store_le32(bad.data() + scales + 12, 0x3F800000u);  // slot 3 is unused (3 buckets touched)
  expect_rejected_saying(*codec, bad, n, "unused scale slot 3");
  bad = good;
  bad[body] |= 0x03;
  expect_rejected_saying(*codec, bad, n, "reserved code 0b11");
  bad = good;
  bad[body + 5] |= 0x40;  // element 23 does not exist (n = 22)
  expect_rejected_saying(*codec, bad, n, "padding");
  bad = good;
  bad[body + 2] = 0x01;  // slice elements 8..15 = bucket 2, whose scale is 0
  expect_rejected_saying(*codec, bad, n, "whose scale is 0");
  // The output size, another bucket size's codec, and a plain terngrad payload.
  std::vector<float> wrong(n + 1, 12.5f);
  EXPECT_ANY_THROW(codec->decode(good, wrong));
  for (float x : wrong) ASSERT_EQ(x, 12.5f);
  EXPECT_ANY_THROW(codec->validate(good, n + 1));
  expect_rejected_saying(*tc::make_codec("terngrad:clip=0,bucket=16"), good, n, "decoder's bucket=16");
  expect_rejected_saying(*codec, encode(*tc::make_codec("terngrad:share_scale=0"), g), g.size(), "codec id 1");
  (void)B;
}

TEST(TernGradBucketed, SpecsRoundTripAndBadOnesAreRefused) {
  auto c = tc::make_codec("terngrad:bucket=512");
  EXPECT_EQ(c->spec(), "terngrad:clip=2.5,share_scale=0,bucket=512");
  EXPECT_EQ(tc::make_codec(c->spec())->spec(), c->spec());
  EXPECT_EQ(tc::make_codec(c->config())->spec(), c->spec());
  EXPECT_EQ(tc::make_codec("terngrad")->spec(), "terngrad:clip=2.5,share_scale=1");  // bucket printed only if nonzero
  EXPECT_EQ(tc::make_codec("terngrad:clip=0,bucket=4")->spec(), "terngrad:clip=0,share_scale=0,bucket=4");
  EXPECT_EQ(tc::make_codec("ef(terngrad:bucket=512)")->spec(), "ef(terngrad:clip=2.5,share_scale=0,bucket=512)");
  for (const char* bad : {"terngrad:bucket=6", "terngrad:bucket=2", "terngrad:bucket=2147483648",
                          "terngrad:bucket=512,share_scale=1", "terngrad:bucket=-4"}) {
    try {
      tc::make_codec(bad);
      ADD_FAILURE() << bad << " accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("bucket"), std::string::npos) << bad << ": " << e.what();
    }
  }
  tc::CodecConfig shared{tc::TernGradParams{2.5f, true, 512}, std::nullopt};
  EXPECT_THROW(tc::make_codec(shared), std::invalid_argument);
  // Sizes: a function of n and B only.
  EXPECT_EQ(c->payload_bytes(0), 48u);
  EXPECT_EQ(c->payload_bytes(1), 48u + 4 + 1);
  EXPECT_EQ(c->payload_bytes(512), 48u + 8 + 128);  // 512 elements can straddle two buckets
  EXPECT_EQ(c->payload_bytes(4), 48u + 4 + 1);
  EXPECT_EQ(c->payload_bytes(8), 48u + 8 + 2);  // at offset 508, 8 elements touch two buckets
  EXPECT_EQ(c->payload_bytes(509), 48u + 8 + 128);
}

// quantize/FORMAT.md's worked example, byte for byte.
TEST(TernGradBucketed, WorkedExampleOfTheFormatPage) {
  const std::vector<float> g = {0.5f, -1.0f, 0.25f, 0.0f, -0.125f, 2.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  auto codec = tc::make_codec("terngrad:clip=0,bucket=4,stream=philox10");  // the page's example is version 1
  const auto p = encode(*codec, g, ctx(42, 7, 3));
  EXPECT_EQ(p, (Ref{4, 0.0f, 1}.encode(g, 0, g.size(), ctx(42, 7, 3))));
  const std::vector<uint8_t> want = {
      0x54, 0x47, 0x52, 0x44, 0x01, 0x03, 0x00, 0x30,  // "TGRD", version 1, codec 3, flags 0, header 48
      0x0a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // n = 10
      0x04, 0x00, 0x00, 0x00,                          // B = 4
      0x03, 0x00, 0x00, 0x00,                          // tensor id 3
      0x2a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // seed 42
      0x07, 0x00, 0x00, 0x00,                          // step 7
      0x00, 0x00, 0x00, 0x00,                          // first bucket offset 0
      0x00, 0x00, 0x00, 0x00,                          // reserved
      0x76, 0x4a, 0x3f, 0xf9,                          // CRC-32 of the 44 bytes above = 0xf93f4a76
      0x00, 0x00, 0x80, 0x3f,                          // s_0 = 1.0
      0x00, 0x00, 0x00, 0x40,                          // s_1 = 2.0
      0x00, 0x00, 0x00, 0x00,                          // s_2 = 0 (an all-zero bucket)
      0x09, 0x04, 0x00,                                // body: [+s0, -s0, 0, 0], [0, +s1, 0, 0], [0, 0, pad, pad]
  };
  EXPECT_EQ(p, want);
  std::vector<float> out(g.size());
  codec->decode(p, out);
  EXPECT_EQ(out, (std::vector<float>{1.0f, -1.0f, 0.0f, 0.0f, 0.0f, 2.0f, 0.0f, 0.0f, 0.0f, 0.0f}));
}
