// The sign codec against a scalar reference written from
// comm/codecs/FORMATS.md ("## sign"): bytes, the whole-variable mean,
// slicing invariance, exact vote counts and majority votes, malformed
// payloads, specs.
#include <algorithm>
#include <cmath>
#include <string>

#include "codec_test_util.h"
#include "terngrad/quantize/format.h"

namespace tc = terngrad::comm;
namespace tq = terngrad::quantize;
using namespace codec_test;

namespace {

float ref_mean(std::span<const float> g) {
  if (g.empty()) return 0.0f;
  double lane[16] = {};
  for (size_t i = 0; i < g.size(); ++i) lane[i % 16] += std::fabs(static_cast<double>(g[i]));
  for (int o = 8; o >= 1; o /= 2)
    for (int l = 0; l < o; ++l) lane[l] += lane[l + o];
  return static_cast<float>(lane[0] / g.size());
}

std::vector<uint8_t> ref_header(uint8_t kind, uint8_t bits, uint64_t n, float scale, uint32_t voters) {
  std::vector<uint8_t> h(28, 0);
  tq::store_le32(h.data(), 0x47534754u);
  h[4] = 1;
  h[5] = kind;
  h[6] = bits;
  tq::store_le64(h.data() + 8, n);
  tq::store_le32(h.data() + 16, std::bit_cast<uint32_t>(scale));
  tq::store_le32(h.data() + 20, voters);
  tq::store_le32(h.data() + 24, tq::crc32_ieee(h.data(), 24));
  return h;
}

void put_bits(std::vector<uint8_t>& p, uint64_t e, uint32_t w, uint32_t f) {
  for (uint32_t b = 0; b < w; ++b)
    if (f >> b & 1) p[28 + (e * w + b) / 8] |= uint8_t(1u << ((e * w + b) % 8));
}

std::vector<uint8_t> ref_encode(std::span<const float> g, uint64_t begin, uint64_t n, bool mean) {
  auto p = ref_header(mean ? 2 : 1, 1, n, mean ? ref_mean(g) : 0.0f, 0);
  p.resize(28 + (n + 7) / 8, 0);
  for (uint64_t e = 0; e < n; ++e) put_bits(p, e, 1, g[begin + e] < 0 ? 1 : 0);
  return p;
}

void refresh_crc(std::vector<uint8_t>& p) { tq::store_le32(p.data() + 24, tq::crc32_ieee(p.data(), 24)); }

void expect_rejected_saying(const tc::GradientCodec& c, std::span<const uint8_t> p, size_t n, const std::string& what) {
  expect_rejected_saying_on_decode(c, p, n, what);
}

void expect_aggregate_rejected_saying(const tc::GradientCodec& c, std::span<const uint8_t> p, size_t n,
                                      const std::string& what) {
  std::vector<float> out(n, 12.5f);
  try {
    c.decode_aggregate(p, out);
    ADD_FAILURE() << "accepted; expected a message with \"" << what << "\"";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
  for (float x : out) ASSERT_EQ(x, 12.5f);
}

std::vector<float> with_zeros(size_t n, uint64_t seed) {
  auto g = normal_floats(n, seed);
  for (size_t i = 0; i < n; i += 13) g[i] = (i / 13) % 2 ? -0.0f : 0.0f;
  return g;
}

}  // namespace

TEST(SignCodec, BytesAndDecodeMatchTheReference) {
  for (bool mean : {false, true}) {
    auto codec = tc::make_codec(mean ? "sign:scale=mean" : "sign");
    for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{1001}}) {
      SCOPED_TRACE(std::to_string(n) + (mean ? " mean" : " none"));
      const auto g = with_zeros(n, n + 1);
      const auto p = encode(*codec, g, {});
      EXPECT_EQ(codec->payload_bytes(n), 28 + (n + 7) / 8);
      ASSERT_EQ(p, ref_encode(g, 0, n, mean));
      std::vector<float> out(n), acc(n, 2.0f);
      codec->decode(p, out);
      codec->decode_accumulate(p, acc);
      const float s = mean ? ref_mean(g) : 1.0f;
      for (size_t i = 0; i < n; ++i) {
        ASSERT_TRUE(same_bits(out[i], g[i] < 0 ? -s : s)) << i;  // +0 and -0 send +s
        ASSERT_EQ(acc[i], 2.0f + out[i]);
      }
      codec->validate(p, n);
    }
  }
}

TEST(SignCodec, SlicesDecodeToTheWholeDecoding) {
  std::mt19937_64 rng(5);
  for (bool mean : {false, true}) {
    auto codec = tc::make_codec(mean ? "sign:scale=mean" : "sign:vote=sign");
    const size_t n = 2003;
    const auto g = with_zeros(n, 77);
    std::vector<float> whole(n);
    codec->decode(encode(*codec, g), whole);
    for (int trial = 0; trial < 10; ++trial) {
      auto [slices, bufs, outs] = random_slicing(*codec, n, 1 + trial % 4, rng);
      codec->encode_slices(g, {}, slices, outs);
      for (size_t k = 0; k < slices.size(); ++k) {
        auto want = ref_encode(g, slices[k].begin, slices[k].count, mean);
        if (mean) {  // the whole variable's mean, whatever the slice
          tq::store_le32(want.data() + 16, std::bit_cast<uint32_t>(ref_mean(g)));
          refresh_crc(want);
        }
        ASSERT_EQ(bufs[k], want);
        std::vector<float> part(slices[k].count);
        codec->decode(bufs[k], part);
        for (size_t e = 0; e < part.size(); ++e) ASSERT_TRUE(same_bits(part[e], whole[slices[k].begin + e]));
      }
    }
  }
}

TEST(SignCodec, NonFiniteInputs) {
  auto g = normal_floats(50, 2);
  g[33] = NAN;
  for (const char* s : {"sign", "sign:scale=mean"}) {
    auto codec = tc::make_codec(s);
    std::vector<uint8_t> out(codec->payload_bytes(50));
    try {
      codec->encode(g, {}, out);
      ADD_FAILURE() << s;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("element 33 is NaN"), std::string::npos) << e.what();
    }
  }
  g[33] = -INFINITY;
  auto none = tc::make_codec("sign");
  std::vector<float> out(50);
  none->decode(encode(*none, g), out);
  EXPECT_EQ(out[33], -1.0f);
  auto mean = tc::make_codec("sign:scale=mean");
  std::vector<uint8_t> p(mean->payload_bytes(50));
  EXPECT_THROW(mean->encode(g, {}, p), std::invalid_argument);
}

// The server's sums against a reference count of the votes, for R = 1..9:
// counts decode to the exact sum; the vote to R * sign(sum) (0 on ties).
TEST(SignCodec, AggregatesCountAndVoteExactly) {
  const size_t n = 4099;  // crosses the 4096-element block
  for (const char* spec : {"sign", "sign:vote=sign"}) {
    auto codec = tc::make_codec(spec);
    EXPECT_TRUE(codec->sums_without_decoding());
    const bool vote = std::string(spec).find("vote=sign") != std::string::npos;
    for (uint32_t R = 1; R <= 9; ++R) {
      SCOPED_TRACE(std::string(spec) + " R=" + std::to_string(R));
      std::vector<std::vector<uint8_t>> ps;
      std::vector<int> sum(n, 0);
      for (uint32_t w = 0; w < R; ++w) {
        auto g = with_zeros(n, 100 * R + w);
        if (w % 2) std::fill(g.begin(), g.begin() + 64, 1.0f);  // ties at the front for even R
        else std::fill(g.begin(), g.begin() + 64, -1.0f);
        ps.push_back(encode(*codec, g));
        for (size_t i = 0; i < n; ++i) sum[i] += g[i] < 0 ? -1 : 1;
      }
      std::vector<std::span<const uint8_t>> spans(ps.begin(), ps.end());
      std::vector<uint8_t> agg;
      codec->aggregate(spans, n, agg);
      const uint32_t bits = vote ? (R % 2 ? 1 : 2) : std::bit_width(R);
      ASSERT_EQ(agg.size(), 28 + (n * bits + 7) / 8);
      ASSERT_EQ(agg[6], bits);
      std::vector<float> out(n);
      codec->decode_aggregate(agg, out);
      for (size_t i = 0; i < n; ++i) {
        const float want = vote ? static_cast<float>(R) * static_cast<float>((sum[i] > 0) - (sum[i] < 0))
                                : static_cast<float>(sum[i]);
        ASSERT_EQ(out[i], want) << i;
      }
      // The counts payload body against a reference packing (k = +1 votes).
      if (!vote) {
        auto want = ref_header(3, bits, n, 0.0f, R);
        want.resize(28 + (n * bits + 7) / 8, 0);
        for (size_t i = 0; i < n; ++i) put_bits(want, i, bits, (sum[i] + R) / 2);
        ASSERT_EQ(agg, want);
      }
    }
  }
}

TEST(SignCodec, MeanScaleAggregatesInFloat32) {
  auto codec = tc::make_codec("sign:scale=mean");
  EXPECT_FALSE(codec->sums_without_decoding());
  const auto g1 = normal_floats(100, 1), g2 = normal_floats(100, 2, 3.0f);
  const auto p1 = encode(*codec, g1), p2 = encode(*codec, g2);
  const std::span<const uint8_t> ps[2] = {p1, p2};
  std::vector<uint8_t> agg;
  codec->aggregate(ps, 100, agg);
  std::vector<float> out(100);
  codec->decode_aggregate(agg, out);
  for (size_t i = 0; i < 100; ++i)
    ASSERT_EQ(out[i], (0.0f + (g1[i] < 0 ? -ref_mean(g1) : ref_mean(g1))) + (g2[i] < 0 ? -ref_mean(g2) : ref_mean(g2)));
}

TEST(SignCodec, MalformedPayloadsAreRejectedNamingTheProblem) {
  auto codec = tc::make_codec("sign");
  auto mean = tc::make_codec("sign:scale=mean");
  const size_t n = 21;
  const auto g = normal_floats(n, 9);
  const auto good = encode(*codec, g), good_mean = encode(*mean, g);
  auto bad = good;
  bad[1] ^= 1;
  expect_rejected_saying(*codec, bad, n, "bad magic");
  bad = good;
  bad[4] = 9;
  refresh_crc(bad);
  expect_rejected_saying(*codec, bad, n, "version");
  bad = good;
  bad[9] ^= 1;
  expect_rejected_saying(*codec, bad, n, "CRC");
  expect_rejected_saying(*codec, good_mean, n, "kind 2");
  expect_rejected_saying(*mean, good, n, "kind 1");
  bad = good;
  bad[7] = 1;
  refresh_crc(bad);
  expect_rejected_saying(*codec, bad, n, "reserved");
  bad = good;
  bad[20] = 2;
  refresh_crc(bad);
  expect_rejected_saying(*codec, bad, n, "contributions");
  bad = good;
  bad[6] = 2;
  refresh_crc(bad);
  expect_rejected_saying(*codec, bad, n, "bits per element");
  bad = good;
  tq::store_le32(bad.data() + 16, 0x3F800000u);
  refresh_crc(bad);
  expect_rejected_saying(*codec, bad, n, "must be 0");
  for (uint32_t s : {0x7FC00000u, 0x7F800000u, 0xBF800000u}) {
    bad = good_mean;
    tq::store_le32(bad.data() + 16, s);
    refresh_crc(bad);
    expect_rejected_saying(*mean, bad, n, "not a finite nonnegative");
  }
  expect_rejected_saying(*codec, std::span(good).first(good.size() - 1), n, "take exactly");
  bad = good;
  bad.push_back(0);
  expect_rejected_saying(*codec, bad, n, "take exactly");
  expect_rejected_saying(*codec, good, n + 1, "output has");
  bad = good;
  bad.back() |= 0x80;  // 21 bits: the top 3 bits of byte 2 are padding
  expect_rejected_saying(*codec, bad, n, "padding");
  expect_rejected(*codec, encode(*tc::make_codec("fp32"), g), n);

  // Aggregates.
  auto voter = tc::make_codec("sign:vote=sign");
  std::vector<std::vector<uint8_t>> ps = {good, good, good};
  std::vector<std::span<const uint8_t>> spans(ps.begin(), ps.end());
  std::vector<uint8_t> counts, vote3;
  codec->aggregate(spans, n, counts);  // R = 3: 2 bits
  voter->aggregate(spans, n, vote3);   // 1 bit
  // With R = 3 the 2-bit field cannot exceed k = 3; R = 5 (3 bits) can.
  std::vector<std::vector<uint8_t>> ps5(5, good);
  std::vector<std::span<const uint8_t>> spans5(ps5.begin(), ps5.end());
  std::vector<uint8_t> counts5;
  codec->aggregate(spans5, n, counts5);
  bad = counts5;
  bad[28] = static_cast<uint8_t>((bad[28] & 0xF8) | 7);
  expect_aggregate_rejected_saying(*codec, bad, n, "more votes");
  bad = vote3;
  bad[20] = 4;  // a 1-bit vote of 4 payloads
  bad[6] = 1;
  refresh_crc(bad);
  expect_aggregate_rejected_saying(*voter, bad, n, "even number");
  std::vector<std::vector<uint8_t>> ps4(4, good);
  std::vector<std::span<const uint8_t>> spans4(ps4.begin(), ps4.end());
  std::vector<uint8_t> vote4;
  voter->aggregate(spans4, n, vote4);
  bad = vote4;
  bad[28] |= 3;
  expect_aggregate_rejected_saying(*voter, bad, n, "reserved code");
  expect_aggregate_rejected_saying(*voter, good, n, "expected");  // a worker payload is no aggregate
  expect_aggregate_rejected_saying(*codec, counts, n - 1, "output has");
  // A malformed worker payload fails the aggregate.
  ps[1] = good_mean;
  spans.assign(ps.begin(), ps.end());
  EXPECT_THROW(codec->aggregate(spans, n, counts), std::runtime_error);
  EXPECT_THROW(codec->aggregate({}, n, counts), std::invalid_argument);
}

TEST(SignCodec, Specs) {
  EXPECT_EQ(tc::make_codec("sign")->spec(), "sign:scale=none,vote=counts");
  EXPECT_EQ(tc::make_codec("sign:vote=sign")->spec(), "sign:scale=none,vote=sign");
  EXPECT_EQ(tc::make_codec("sign:scale=mean")->spec(), "sign:scale=mean");
  for (const char* s : {"sign", "sign:vote=sign", "sign:scale=mean"}) {
    auto c = tc::make_codec(s);
    EXPECT_EQ(c->config(), tc::parse_codec_config(s));
    EXPECT_EQ(tc::make_codec(c->config())->spec(), c->spec());
  }
  auto c = tc::make_codec(tc::CodecConfig{tc::SignParams{.scale = tc::SignScale::kNone, .vote = tc::SignVote::kSign},
                                          std::nullopt});
  EXPECT_EQ(c->spec(), "sign:scale=none,vote=sign");
}
