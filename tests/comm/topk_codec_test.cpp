// The "topk" codec: selection against a full-sort reference, Elias-Fano
// edge cases, fp16 values, round trips, slices, malformed payloads.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "../../comm/codecs/sparse_internal.h"
#include "codec_test_util.h"
#include "terngrad/comm/gradient_codec.h"
#include "terngrad/quantize/format.h"
#include "terngrad/quantize/fp16.h"

namespace {

using namespace terngrad::comm;
using codec_test::encode;
#define expect_rejected(...) do { SCOPED_TRACE("rejection case"); codec_test::expect_rejected(__VA_ARGS__); } while (0)
using codec_test::normal_floats;

// Reference: a full sort by (|x| descending in float64, index ascending), the
// first k, indices ascending.
std::vector<uint32_t> reference_topk(const std::vector<float>& x, uint64_t k) {
  std::vector<uint32_t> order(x.size());
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    const double ma = std::fabs(static_cast<double>(x[a])), mb = std::fabs(static_cast<double>(x[b]));
    return ma != mb ? ma > mb : a < b;
  });
  order.resize(k);
  std::sort(order.begin(), order.end());
  return order;
}

uint64_t ref_k(uint64_t n, double ratio) {
  if (n == 0) return 0;
  return std::min<uint64_t>(n, std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(ratio * n))));
}

// Inputs with ties, zeros and sign-only differences.
std::vector<float> tricky(size_t n, uint64_t seed, int kind) {
  std::mt19937_64 rng(seed);
  std::vector<float> x(n);
  for (float& v : x) {
    switch (kind) {
      case 0: v = std::normal_distribution<float>()(rng); break;
      case 1: v = static_cast<float>(static_cast<int>(rng() % 7) - 3); break;         // heavy ties, zeros
      case 2: v = (rng() % 2 ? -1.0f : 1.0f) * static_cast<float>(rng() % 3); break;  // +-a ties
      case 3: v = rng() % 10 == 0 ? std::normal_distribution<float>()(rng) : 0.0f; break;  // mostly zero
      case 4: v = (rng() % 2 ? -0.0f : 0.0f); break;                                  // all zero
      default: v = std::ldexp(1.0f, static_cast<int>(rng() % 60) - 30) * (rng() % 2 ? -1.0f : 1.0f); break;
    }
  }
  return x;
}

TEST(TopKSelect, MatchesFullSortReference) {
  const size_t sizes[] = {1, 2, 3, 4, 5, 7, 31, 100, 1000, 4096, 65536, 70001, 300000};
  const double ratios[] = {1e-6, 0.001, 0.01, 0.1, 0.5, 0.999, 1.0};
  int cases = 0;
  for (size_t n : sizes)
    for (int kind = 0; kind < 6; ++kind)
      for (double r : ratios) {
        if (n >= 65536 && kind != 0 && kind != 1 && r > 0.2) continue;  // keep the reference sort cheap
        const std::vector<float> x = tricky(n, n * 31 + kind, kind);
        const uint64_t k = ref_k(n, r);
        const std::vector<uint32_t> want = reference_topk(x, k);
        for (bool simd : {true, false}) {
          std::vector<uint32_t> got;
          terngrad::comm::detail::topk_select(x, k, got, simd);
          ASSERT_EQ(got, want) << "n=" << n << " kind=" << kind << " ratio=" << r << " simd=" << simd;
        }
        ++cases;
      }
  EXPECT_GT(cases, 300);
}

TEST(TopKSelect, ThresholdRetryOnAdversarialSample) {
  // Large values only where the sample does not look (between sampled runs),
  // so the sampled threshold leaves too few candidates and the pass retries.
  const size_t n = 1 << 20;
  std::vector<float> x(n, 1.0f);
  for (size_t i = 0; i < n; i += 1024) x[i + 512] = 5.0f + static_cast<float>(i);  // 1024 big ones
  std::mt19937_64 rng(3);
  for (size_t i = 0; i < n; ++i)
    if (x[i] == 1.0f) x[i] = 1.0f + static_cast<float>(rng() % 1000) * 1e-4f;
  for (uint64_t k : {uint64_t{1}, uint64_t{1000}, uint64_t{1024}, uint64_t{5000}, uint64_t{100000}}) {
    std::vector<uint32_t> got;
    terngrad::comm::detail::topk_select(x, k, got);
    ASSERT_EQ(got, reference_topk(x, k)) << k;
  }
}

TEST(TopKSelect, CandidatePassSimdEqualsScalar) {
  for (int kind = 0; kind < 6; ++kind) {
    const std::vector<float> x = tricky(100003, 77 + kind, kind);
    for (float th : {0.0f, 0.5f, 1.0f, 2.0f, 1e30f}) {
      std::vector<uint64_t> a, b;
      const uint32_t t = std::bit_cast<uint32_t>(th);
      EXPECT_EQ(terngrad::comm::detail::topk_collect(x, t, a, true),
                terngrad::comm::detail::topk_collect(x, t, b, false));
      ASSERT_EQ(a, b) << kind << " " << th;
    }
  }
}

TEST(TopKSelect, RejectsNonFinite) {
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    for (size_t n : {size_t{5}, size_t{200000}}) {
      std::vector<float> x = normal_floats(n, 1);
      x[n / 2 + 1] = bad;
      std::vector<uint32_t> idx;
      EXPECT_THROW(terngrad::comm::detail::topk_select(x, 1, idx, true), std::invalid_argument);
      EXPECT_THROW(terngrad::comm::detail::topk_select(x, 1, idx, false), std::invalid_argument);
    }
  }
}

TEST(EliasFano, RoundTripEdgeCases) {
  using namespace terngrad::comm::detail;
  std::mt19937_64 rng(5);
  struct Case {
    uint64_t count;
    std::vector<uint32_t> idx;
  };
  std::vector<Case> cases = {{1, {0}},          {2, {1}},          {2, {0, 1}},        {3, {0, 1, 2}},
                             {8, {7}},          {8, {0}},          {9, {0, 8}},        {1000, {999}},
                             {1u << 20, {0}},   {1u << 20, {(1u << 20) - 1}},          {4294967295u, {4294967294u}},
                             {4294967295u, {0, 1, 2, 4294967294u}}};
  for (int t = 0; t < 200; ++t) {  // random sets, all densities
    const uint64_t count = 1 + rng() % 5000;
    const uint64_t k = 1 + rng() % count;
    std::vector<uint32_t> all(count);
    std::iota(all.begin(), all.end(), 0u);
    std::shuffle(all.begin(), all.end(), rng);
    all.resize(k);
    std::sort(all.begin(), all.end());
    cases.push_back({count, all});
  }
  for (const Case& c : cases) {
    const uint64_t k = c.idx.size();
    const uint32_t L = elias_fano_low_bits(c.count, k);
    EXPECT_EQ(L, c.count > k ? static_cast<uint32_t>(std::floor(std::log2(static_cast<double>(c.count) / k))) : 0u);
    std::vector<uint8_t> buf(elias_fano_bytes(c.count, k), 0xAB);
    elias_fano_encode(c.idx, c.count, buf.data());
    std::vector<uint64_t> back;
    ASSERT_EQ(elias_fano_decode(buf.data(), c.count, k, back), "") << c.count << " " << k;
    ASSERT_EQ(back, std::vector<uint64_t>(c.idx.begin(), c.idx.end()));
  }
  // Sizes are a function of (count, k) only.
  EXPECT_EQ(elias_fano_high_bits(16, 4), 4u + (15u >> 2));
  EXPECT_EQ(elias_fano_bytes(16, 4), 1u + 1u);  // 8 low bits, 7 high bits
  EXPECT_EQ(elias_fano_bytes(0, 0), 0u);
}

TEST(EliasFano, DecodeRejectsBadStreams) {
  using namespace terngrad::comm::detail;
  const uint64_t count = 100;
  const std::vector<uint32_t> idx = {3, 17, 40, 41, 99};
  const uint64_t k = idx.size();
  std::vector<uint8_t> good(elias_fano_bytes(count, k));
  elias_fano_encode(idx, count, good.data());
  const uint32_t L = elias_fano_low_bits(count, k);  // 4
  const size_t low_bytes = (k * L + 7) / 8;
  const uint64_t H = elias_fano_high_bits(count, k);
  std::vector<uint64_t> out;
  // Any single-bit flip of the high part is rejected or decodes to other valid indices.
  int rejected = 0;
  for (size_t bit = 0; bit < 8 * (good.size() - low_bytes); ++bit) {
    std::vector<uint8_t> b = good;
    b[low_bytes + bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    const std::string err = elias_fano_decode(b.data(), count, k, out);
    if (!err.empty()) ++rejected;
    if (bit >= H) {
      EXPECT_NE(err.find("padding"), std::string::npos) << bit;
    }
  }
  EXPECT_EQ(rejected, static_cast<int>(8 * (good.size() - low_bytes)));  // a flip changes the number of ones
  // A duplicate index: 41 -> 40 by its lowest low bit (L = 4).
  std::vector<uint8_t> b = good;
  b[(3 * L) / 8] ^= static_cast<uint8_t>(0x1u << ((3 * L) % 8));  // index 3 (41 -> 40 or 41 -> 41^1)
  const std::string err = elias_fano_decode(b.data(), count, k, out);
  EXPECT_NE(err.find("strictly increasing"), std::string::npos) << err;
  // Index >= count.
  std::vector<uint32_t> idx2 = {99};
  std::vector<uint8_t> c(elias_fano_bytes(count, 1));
  elias_fano_encode(idx2, count, c.data());
  c[0] |= 0x7F;  // low 6 bits of 99 -> 127 > 99 with high 1
  EXPECT_NE(elias_fano_decode(c.data(), count, 1, out), "");
}

TEST(TopKCodec, RoundTripAndSizes) {
  for (const char* spec : {"topk:ratio=0.01", "topk:ratio=0.5", "topk:ratio=1", "topk:ratio=0.001,values=fp16"}) {
    auto c = make_codec(spec);
    EXPECT_FALSE(c->sums_without_decoding());
    for (size_t n : {size_t{1}, size_t{3}, size_t{4}, size_t{1000}, size_t{100000}}) {
      const std::vector<float> g = normal_floats(n, n + 1);
      const std::vector<uint8_t> p = encode(*c, g);
      const TopKParams prm = std::get<TopKParams>(c->config().params);
      const uint64_t k = ref_k(n, prm.ratio);
      const size_t w = prm.values == SparseValues::kFloat32 ? 4 : 2;
      EXPECT_EQ(p.size(), 32 + k * w + terngrad::comm::detail::elias_fano_bytes(n, k));
      std::vector<float> d(n, 7.0f);
      c->decode(p, d);
      const std::vector<uint32_t> want = reference_topk(g, k);
      size_t j = 0;
      for (size_t i = 0; i < n; ++i) {
        if (j < want.size() && want[j] == i) {
          const float v = prm.values == SparseValues::kFloat32
                              ? g[i]
                              : terngrad::quantize::fp16::to_float(terngrad::quantize::fp16::from_float(g[i]));
          ASSERT_TRUE(codec_test::same_bits(d[i], v)) << spec << " " << i;
          ++j;
        } else {
          ASSERT_EQ(d[i], 0.0f);
        }
      }
      std::vector<float> acc(n, 1.0f);
      c->decode_accumulate(p, acc);
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(acc[i], 1.0f + d[i]);
      EXPECT_NO_THROW(c->validate(p, n));
    }
  }
}

TEST(TopKCodec, EmptyVariable) {
  auto c = make_codec("topk:ratio=0.1");
  const std::vector<float> g;
  const std::vector<uint8_t> p = encode(*c, g);
  EXPECT_EQ(p.size(), 32u);
  std::vector<float> d;
  c->decode(p, d);
}

TEST(TopKCodec, Fp16ValuesSaturate) {
  auto c = make_codec("topk:ratio=0.5,values=fp16");
  const std::vector<float> g = {1e6f, -1e6f, 0.1f, 3.0f};
  const std::vector<uint8_t> p = encode(*c, g);
  std::vector<float> d(4);
  c->decode(p, d);
  EXPECT_EQ(d[0], 65504.0f);
  EXPECT_EQ(d[1], -65504.0f);
  EXPECT_EQ(d[2], 0.0f);
  EXPECT_EQ(d[3], 0.0f);
}

TEST(TopKCodec, SlicesSelectPerSlice) {
  auto c = make_codec("topk:ratio=0.05");
  const size_t n = 10000;
  const std::vector<float> g = normal_floats(n, 9);
  const ElementRange slices[] = {{0, 4000}, {4000, 3000}, {7000, 3000}};
  std::vector<std::vector<uint8_t>> bufs;
  std::vector<std::span<uint8_t>> outs;
  for (const auto& s : slices) bufs.emplace_back(c->payload_bytes(s.count));
  for (auto& b : bufs) outs.emplace_back(b);
  c->encode_slices(g, {}, slices, outs);
  for (size_t i = 0; i < 3; ++i) {
    const std::vector<float> part(g.begin() + slices[i].begin, g.begin() + slices[i].begin + slices[i].count);
    EXPECT_EQ(bufs[i], encode(*c, part)) << i;  // indices relative to the slice, its own top k
  }
}

TEST(TopKCodec, AggregateIsTheFloatSum) {
  auto c = make_codec("topk:ratio=0.1");
  const size_t n = 777;
  std::vector<std::vector<uint8_t>> ps;
  std::vector<float> want(n, 0.0f);
  for (int w = 0; w < 4; ++w) {
    const std::vector<float> g = normal_floats(n, 100 + w);
    ps.push_back(encode(*c, g));
    std::vector<float> d(n);
    c->decode(ps.back(), d);
    for (size_t i = 0; i < n; ++i) want[i] += d[i];
  }
  std::vector<std::span<const uint8_t>> spans(ps.begin(), ps.end());
  std::vector<uint8_t> agg;
  c->aggregate(spans, n, agg);
  std::vector<float> got(n);
  c->decode_aggregate(agg, got);
  for (size_t i = 0; i < n; ++i) ASSERT_TRUE(codec_test::same_bits(got[i], want[i]));
}

TEST(TopKCodec, SpecRoundTrip) {
  for (const char* spec : {"topk", "topk:ratio=0.25,values=fp16", "topk:ratio=1,values=fp32"}) {
    auto c = make_codec(spec);
    EXPECT_EQ(make_codec(c->spec())->config(), c->config());
    EXPECT_EQ(c->spec(), to_spec(c->config()));
  }
  EXPECT_EQ(make_codec("topk:ratio=0.25,values=fp16")->spec(), "topk:ratio=0.25,values=fp16");
}

std::vector<uint8_t> recrc(std::vector<uint8_t> p) {
  terngrad::quantize::store_le32(p.data() + 28, terngrad::quantize::crc32_ieee(p.data(), 28));
  return p;
}

TEST(TopKCodec, RejectsMalformedPayloads) {
  for (const char* spec : {"topk:ratio=0.05", "topk:ratio=0.05,values=fp16"}) {
    auto c = make_codec(spec);
    const bool f16 = std::string(spec).find("fp16") != std::string::npos;
    const size_t w = f16 ? 2 : 4;
    const size_t n = 1000;
    std::vector<float> g = normal_floats(n, 4);
    const std::vector<uint8_t> good = encode(*c, g);
    const uint64_t k = ref_k(n, 0.05f);  // 51: float(0.05) * 1000 is just above 50
    ASSERT_EQ(k, 51u);
    const size_t vals = 32, idx = 32 + k * w;
    expect_rejected(*c, {good.data(), good.size() - 1}, n);  // short
    std::vector<uint8_t> longer = good;
    longer.push_back(0);
    expect_rejected(*c, longer, n);
    expect_rejected(*c, {good.data(), 10}, n);  // shorter than the header
    expect_rejected(*c, good, n + 4);           // another count than the output's
    auto mutate = [&](size_t off, uint8_t x, bool fix_crc) {
      std::vector<uint8_t> b = good;
      b[off] ^= x;
      return fix_crc ? recrc(b) : b;
    };
    expect_rejected(*c, mutate(0, 1, true), n);    // magic
    expect_rejected(*c, mutate(4, 1, true), n);    // version
    expect_rejected(*c, mutate(5, 48, true), n);   // value type (32 <-> 16)
    expect_rejected(*c, mutate(6, 1, true), n);    // L
    expect_rejected(*c, mutate(7, 1, true), n);    // reserved
    expect_rejected(*c, mutate(24, 1, true), n);   // reserved
    expect_rejected(*c, mutate(8, 1, true), n);    // count
    expect_rejected(*c, mutate(16, 1, true), n);   // k
    expect_rejected(*c, mutate(12, 1, false), n);  // CRC mismatch
    // NaN / Inf values.
    std::vector<uint8_t> nan = good, inf = good;
    if (f16) {
      nan[vals] = 0x00;
      nan[vals + 1] = 0x7E;
      inf[vals] = 0x00;
      inf[vals + 1] = 0xFC;
    } else {
      terngrad::quantize::store_le32(nan.data() + vals, 0x7FC00000u);
      terngrad::quantize::store_le32(inf.data() + vals, 0xFF800000u);
    }
    expect_rejected(*c, nan, n);
    expect_rejected(*c, inf, n);
    // Index stream: every single-bit flip of the high part, and nonzero padding.
    const uint32_t L = terngrad::comm::detail::elias_fano_low_bits(n, k);
    const size_t high = idx + (k * L + 7) / 8;
    for (size_t b = high; b < good.size(); ++b)
      for (int bit = 0; bit < 8; ++bit) expect_rejected(*c, mutate(b, static_cast<uint8_t>(1u << bit), false), n);
    // Low bits making an index >= count or a duplicate: flip the top low bit of the last index.
    bool some_rejected_low = false;
    for (size_t bit = 0; bit < k * L; ++bit) {
      std::vector<uint8_t> b = mutate(idx + bit / 8, static_cast<uint8_t>(1u << (bit % 8)), false);
      std::vector<float> out(n, 12.5f);
      try {
        c->decode(b, out);
      } catch (const std::exception&) {
        some_rejected_low = true;
        for (float x : out) ASSERT_EQ(x, 12.5f);
      }
    }
    EXPECT_TRUE(some_rejected_low);
    // A payload of another codec.
    auto fp32 = make_codec("fp32");
    expect_rejected(*c, encode(*fp32, g), n);
    try {
      c->decode(mutate(12, 1, false), g);
      FAIL();
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("CRC"), std::string::npos) << e.what();
    }
  }
}

TEST(TopKCodec, RejectsWrongRatio) {
  auto a = make_codec("topk:ratio=0.1"), b = make_codec("topk:ratio=0.2");
  const std::vector<float> g = normal_floats(100, 2);
  expect_rejected(*b, encode(*a, g), 100);
}

TEST(TopKCodec, EncodeRejectsNonFinite) {
  auto c = make_codec("topk:ratio=0.1");
  std::vector<float> g = normal_floats(100, 2);
  g[50] = std::numeric_limits<float>::quiet_NaN();
  std::vector<uint8_t> out(c->payload_bytes(100));
  EXPECT_THROW(c->encode(g, {}, out), std::invalid_argument);
}

}  // namespace

namespace {
// The worked example of FORMATS_SPARSE.md.
TEST(EliasFano, FormatDocExample) {
  const std::vector<uint32_t> idx = {1, 6, 7, 13};
  ASSERT_EQ(terngrad::comm::detail::elias_fano_bytes(16, 4), 2u);
  uint8_t b[2] = {0xFF, 0xFF};
  terngrad::comm::detail::elias_fano_encode(idx, 16, b);
  EXPECT_EQ(b[0], 0x79);
  EXPECT_EQ(b[1], 0x4D);
}
}  // namespace
