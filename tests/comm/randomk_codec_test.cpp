// The "randomk" codec: positions shared across workers, distinct and
// uniform, unbiased with rescale, exact aggregation, malformed payloads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <vector>

#include "../../comm/codecs/sparse_internal.h"
#include "codec_test_util.h"
#include "terngrad/comm/gradient_codec.h"
#include "terngrad/quantize/format.h"
#include "terngrad/quantize/fp16.h"

namespace {

using namespace terngrad::comm;
using terngrad::comm::detail::randomk_positions;
using terngrad::comm::detail::sparse_k;
using codec_test::encode;
using codec_test::normal_floats;
#define expect_rejected(...)                  \
  do {                                        \
    SCOPED_TRACE("rejection case");           \
    codec_test::expect_rejected(__VA_ARGS__); \
  } while (0)

// Positions a payload covers: where decoding a gradient of ones (rescale=0) is nonzero.
std::vector<uint64_t> decoded_positions(GradientCodec& c, size_t n, const EncodeContext& ctx) {
  const std::vector<float> ones(n, 1.0f);
  const std::vector<uint8_t> p = encode(c, ones, ctx);
  std::vector<float> d(n);
  c.decode(p, d);
  std::vector<uint64_t> pos;
  for (size_t i = 0; i < n; ++i)
    if (d[i] != 0.0f) pos.push_back(i);
  return pos;
}

TEST(RandomKPositions, DistinctSortedAndDeterministic) {
  std::vector<uint64_t> a, b;
  for (uint64_t count : {1u, 2u, 3u, 4u, 7u, 100u, 4096u, 100003u})
    for (double r : {1e-6, 0.01, 0.3, 1.0}) {
      const uint64_t k = sparse_k(count, static_cast<float>(r));
      randomk_positions(5, 9, 12, count, k, a);
      randomk_positions(5, 9, 12, count, k, b);
      ASSERT_EQ(a, b);
      ASSERT_EQ(a.size(), k);
      for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_LT(a[i], count);
        if (i) {
          ASSERT_LT(a[i - 1], a[i]);
        }
      }
    }
  // Each input changes the draw.
  randomk_positions(5, 9, 12, 10000, 100, a);
  for (int which = 0; which < 4; ++which) {
    randomk_positions(which == 0 ? 6 : 5, which == 1 ? 10 : 9, which == 2 ? 16 : 12, which == 3 ? 10004 : 10000, 100, b);
    EXPECT_NE(a, b) << which;
  }
}

TEST(RandomKPositions, UniformChiSquare) {
  // Over many steps each position is drawn k/n of the time.
  const uint64_t n = 200, k = 20;
  const int steps = 20000;
  std::vector<double> hits(n, 0.0);
  std::vector<uint64_t> pos;
  for (int s = 0; s < steps; ++s) {
    randomk_positions(static_cast<uint32_t>(s), 3, 0, n, k, pos);
    for (uint64_t p : pos) hits[p] += 1;
  }
  const double expect = static_cast<double>(steps) * k / n;
  double chi2 = 0;
  for (double h : hits) chi2 += (h - expect) * (h - expect) / expect;
  // 199 degrees of freedom: mean 199, sd ~20; 300 is beyond 5 sd.
  EXPECT_LT(chi2, 300.0);
  EXPECT_GT(chi2, 110.0);
}

TEST(RandomKCodec, SamePositionsOnEveryWorker) {
  auto c = make_codec("randomk:ratio=0.05");
  EXPECT_TRUE(c->sums_without_decoding());
  EncodeContext ctx;
  ctx.step = 17;
  ctx.tensor_id = 4;
  ctx.seed = 1;
  const auto p1 = decoded_positions(*c, 5000, ctx);
  ctx.seed = 0xDEADBEEFCAFEull;
  EXPECT_EQ(decoded_positions(*c, 5000, ctx), p1);
  EXPECT_EQ(p1.size(), sparse_k(5000, 0.05f));
  ctx.step = 18;
  EXPECT_NE(decoded_positions(*c, 5000, ctx), p1);
}

TEST(RandomKCodec, RoundTripValues) {
  for (const char* spec : {"randomk:ratio=0.1", "randomk:ratio=0.1,values=fp16", "randomk:ratio=1",
                           "randomk:ratio=0.3,rescale=1"}) {
    auto c = make_codec(spec);
    const RandomKParams prm = std::get<RandomKParams>(c->config().params);
    for (size_t n : {size_t{1}, size_t{3}, size_t{8}, size_t{1001}}) {
      const std::vector<float> g = normal_floats(n, n);
      EncodeContext ctx{2, 3, 99, std::nullopt, {}};
      const std::vector<uint8_t> p = encode(*c, g, ctx);
      const uint64_t k = sparse_k(n, prm.ratio);
      EXPECT_EQ(p.size(), 48 + k * (prm.values == SparseValues::kFloat32 ? 4 : 2));
      std::vector<uint64_t> pos;
      randomk_positions(3, 2, 0, n, k, pos);
      std::vector<float> d(n, 5.0f);
      c->decode(p, d);
      const float scale = prm.rescale ? static_cast<float>(static_cast<double>(n) / k) : 1.0f;
      size_t j = 0;
      for (size_t i = 0; i < n; ++i) {
        if (j < pos.size() && pos[j] == i) {
          float want = g[i] * scale;
          if (prm.values == SparseValues::kFloat16)
            want = terngrad::quantize::fp16::to_float(terngrad::quantize::fp16::from_float(want));
          ASSERT_TRUE(codec_test::same_bits(d[i], want)) << spec << " " << i;
          ++j;
        } else {
          ASSERT_EQ(d[i], 0.0f);
        }
      }
      std::vector<float> acc(n, 1.0f);
      c->decode_accumulate(p, acc);
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(acc[i], 1.0f + d[i]);
    }
  }
}

TEST(RandomKCodec, UnbiasedWithRescale) {
  auto c = make_codec("randomk:ratio=0.1,rescale=1");
  const size_t n = 64;
  const std::vector<float> g = normal_floats(n, 8);
  const int steps = 20000;
  std::vector<double> sum(n, 0.0), sumsq(n, 0.0);
  std::vector<float> d(n);
  for (int s = 0; s < steps; ++s) {
    EncodeContext ctx{0, static_cast<uint32_t>(s), 1, std::nullopt, {}};
    c->decode(encode(*c, g, ctx), d);
    for (size_t i = 0; i < n; ++i) {
      sum[i] += d[i];
      sumsq[i] += static_cast<double>(d[i]) * d[i];
    }
  }
  double max_z = 0;
  for (size_t i = 0; i < n; ++i) {
    const double mean = sum[i] / steps, var = sumsq[i] / steps - mean * mean;
    const double z = (mean - g[i]) / std::sqrt(var / steps);
    max_z = std::max(max_z, std::fabs(z));
  }
  EXPECT_LT(max_z, 4.5);  // 64 z-scores: beyond 4.5 sd is ~1e-4 likely
}

TEST(RandomKCodec, AggregateSumsValuesExactly) {
  for (const char* spec : {"randomk:ratio=0.2", "randomk:ratio=0.2,values=fp16"}) {
    auto c = make_codec(spec);
    const size_t n = 1000;
    const ElementRange slice{400, 600};
    std::vector<std::vector<uint8_t>> ps;
    for (int w = 0; w < 5; ++w) {
      const std::vector<float> g = normal_floats(n, 50 + w);
      ps.emplace_back(c->payload_bytes(slice.count));
      const std::span<uint8_t> outs[1] = {ps.back()};
      c->encode_slices(g, EncodeContext{7, 11, static_cast<uint64_t>(w) + 1, std::nullopt, {}}, {&slice, 1}, outs);
    }
    // Reference: decode each into float, sum in payload order in float32.
    std::vector<float> want(slice.count, 0.0f), d(slice.count);
    for (const auto& p : ps) {
      c->decode(p, d);
      for (size_t i = 0; i < d.size(); ++i) want[i] += d[i];
    }
    std::vector<std::span<const uint8_t>> spans(ps.begin(), ps.end());
    std::vector<uint8_t> agg;
    c->aggregate(spans, slice.count, agg);
    const uint64_t k = sparse_k(slice.count, 0.2f);
    EXPECT_EQ(agg.size(), 48 + 4 * k);  // the same positions, float32 values
    std::vector<float> got(slice.count, 3.0f);
    c->decode_aggregate(agg, got);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_TRUE(codec_test::same_bits(got[i], want[i])) << i;
    // A sum payload sums again (hierarchical servers); it is not a worker payload.
    const std::span<const uint8_t> two[2] = {agg, ps[0]};
    std::vector<uint8_t> agg2;
    c->aggregate(two, slice.count, agg2);
    expect_rejected(*c, agg, slice.count);
    // Payloads of another step do not sum.
    std::vector<uint8_t> other(c->payload_bytes(slice.count));
    const std::span<uint8_t> outs[1] = {other};
    c->encode_slices(normal_floats(n, 1), EncodeContext{7, 12, 1, std::nullopt, {}}, {&slice, 1}, outs);
    const std::span<const uint8_t> mixed[2] = {ps[0], other};
    EXPECT_THROW(c->aggregate(mixed, slice.count, agg2), std::runtime_error);
  }
}

TEST(RandomKCodec, SpecRoundTrip) {
  for (const char* spec : {"randomk", "randomk:ratio=0.125,values=fp16,rescale=1"}) {
    auto c = make_codec(spec);
    EXPECT_EQ(make_codec(c->spec())->config(), c->config());
  }
  EXPECT_EQ(make_codec("randomk:ratio=0.125,values=fp16,rescale=1")->spec(),
            "randomk:ratio=0.125,values=fp16,rescale=1");
}

TEST(RandomKCodec, EncodeRejectsNonFinite) {
  auto c = make_codec("randomk:ratio=1");
  std::vector<float> g = normal_floats(16, 2);
  g[3] = std::numeric_limits<float>::infinity();
  std::vector<uint8_t> out(c->payload_bytes(16));
  EXPECT_THROW(c->encode(g, {}, out), std::invalid_argument);
  auto r = make_codec("randomk:ratio=0.0001,rescale=1");  // 1 of 100000, times 1e5
  std::vector<float> big(100000, 1e36f);
  std::vector<uint8_t> out2(r->payload_bytes(big.size()));
  EXPECT_THROW(r->encode(big, {}, out2), std::invalid_argument);
}

TEST(RandomKCodec, RejectsMalformedPayloads) {
  for (const char* spec : {"randomk:ratio=0.1", "randomk:ratio=0.1,values=fp16"}) {
    auto c = make_codec(spec);
    const bool f16 = std::string(spec).find("fp16") != std::string::npos;
    const size_t n = 400;
    const std::vector<float> g = normal_floats(n, 4);
    const std::vector<uint8_t> good = encode(*c, g, EncodeContext{1, 2, 3, std::nullopt, {}});
    auto mutate = [&](size_t off, uint8_t x, bool fix_crc) {
      std::vector<uint8_t> b = good;
      b[off] ^= x;
      if (fix_crc) terngrad::quantize::store_le32(b.data() + 44, terngrad::quantize::crc32_ieee(b.data(), 44));
      return b;
    };
    expect_rejected(*c, {good.data(), good.size() - 1}, n);
    std::vector<uint8_t> longer = good;
    longer.push_back(0);
    expect_rejected(*c, longer, n);
    expect_rejected(*c, {good.data(), 20}, n);
    expect_rejected(*c, good, n - 4);
    expect_rejected(*c, mutate(0, 1, true), n);    // magic
    expect_rejected(*c, mutate(4, 1, true), n);    // version
    expect_rejected(*c, mutate(5, 48, true), n);   // value type
    expect_rejected(*c, mutate(6, 3, true), n);    // kind 1 -> 2 (a sum payload given to decode)
    expect_rejected(*c, mutate(6, 4, true), n);    // unknown kind
    expect_rejected(*c, mutate(7, 1, true), n);    // reserved
    expect_rejected(*c, mutate(8, 1, true), n);    // count
    expect_rejected(*c, mutate(16, 1, true), n);   // k
    expect_rejected(*c, mutate(24, 1, true), n);   // begin not a multiple of 4
    expect_rejected(*c, mutate(40, 2, true), n);   // contributions of a worker payload
    for (size_t off : {0, 8, 16, 24, 32, 36, 40})  // any header bit without the CRC fixed
      expect_rejected(*c, mutate(off, 0x10, false), n);
    std::vector<uint8_t> nan = good, inf = good;
    if (f16) {
      nan[48] = 0x00, nan[49] = 0x7E;
      inf[50] = 0x00, inf[51] = 0x7C;
    } else {
      terngrad::quantize::store_le32(nan.data() + 48, 0x7FC00000u);
      terngrad::quantize::store_le32(inf.data() + 52, 0x7F800000u);
    }
    expect_rejected(*c, nan, n);
    expect_rejected(*c, inf, n);
    auto other = make_codec("randomk:ratio=0.2");
    expect_rejected(*c, encode(*other, g), n);
    expect_rejected(*c, encode(*make_codec("fp32"), g), n);
    // decode_aggregate and aggregate reject the same way, writing nothing.
    std::vector<float> out(n, 12.5f);
    EXPECT_ANY_THROW(c->decode_aggregate(mutate(12, 1, false), out));
    for (float x : out) ASSERT_EQ(x, 12.5f);
    std::vector<uint8_t> agg;
    const std::vector<uint8_t> bad = mutate(12, 1, false);
    const std::span<const uint8_t> ps[2] = {good, bad};
    EXPECT_ANY_THROW(c->aggregate(ps, n, agg));
    EXPECT_ANY_THROW(c->validate(bad, n));
    EXPECT_NO_THROW(c->validate(good, n));
  }
}

}  // namespace
