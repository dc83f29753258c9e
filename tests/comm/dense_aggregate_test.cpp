// The fp32 and fp16 codecs' aggregate (the ps's sum, now the SIMD dense sum
// of terngrad/quantize/dense_sum.h) against the sum a worker would form with
// decode_accumulate in payload order, bit for bit, over payloads that hold
// every kind of value (halves: every bit pattern; floats: specials mixed in),
// at a size past the sum's parallel threshold with an odd tail.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "codec_test_util.h"
#include "terngrad/comm/gradient_codec.h"

namespace tc = terngrad::comm;

namespace {

constexpr size_t kN = (size_t{1} << 17) + 4099;

// A dense payload of raw elements: the 16-byte header an encode writes, then
// the chosen little-endian bits (encode would round or refuse some of them).
std::vector<uint8_t> raw_payload(tc::GradientCodec& c, size_t elem_bytes, uint64_t seed) {
  std::vector<uint8_t> p = codec_test::encode(c, std::vector<float>(kN, 0.0f));
  std::mt19937_64 rng(seed);
  const float specials[] = {-0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::denorm_min(),
                            3.0e38f};
  for (size_t e = 0; e < kN; ++e) {
    uint8_t* b = p.data() + 16 + elem_bytes * e;
    if (elem_bytes == 2) {
      const uint16_t h = static_cast<uint16_t>(rng());
      b[0] = static_cast<uint8_t>(h);
      b[1] = static_cast<uint8_t>(h >> 8);
    } else {
      const float v = rng() % 50 == 0 ? specials[rng() % 6]
                                      : std::ldexp(1.0f + static_cast<float>(rng() % 1000) / 1000.0f,
                                                   static_cast<int>(rng() % 41) - 20) * ((rng() & 1) ? -1.0f : 1.0f);
      const uint32_t u = std::bit_cast<uint32_t>(v);
      for (int k = 0; k < 4; ++k) b[k] = static_cast<uint8_t>(u >> (8 * k));
    }
  }
  return p;
}

class DenseAggregate : public ::testing::TestWithParam<std::string> {};

TEST_P(DenseAggregate, IsTheDecodeAccumulateSumInPayloadOrder) {
  auto c = tc::make_codec(GetParam());
  const size_t elem_bytes = GetParam() == "fp16" ? 2 : 4;
  for (int r : {1, 2, 3, 5}) {
    SCOPED_TRACE(std::to_string(r) + " payloads");
    std::vector<std::vector<uint8_t>> payloads;
    std::vector<float> want(kN, 0.0f);
    for (int i = 0; i < r; ++i) {
      payloads.push_back(raw_payload(*c, elem_bytes, 40 + i));
      c->decode_accumulate(payloads.back(), want);
    }
    std::vector<std::span<const uint8_t>> views(payloads.begin(), payloads.end());
    std::vector<uint8_t> agg;
    c->aggregate(views, kN, agg);
    std::vector<float> got(kN);
    c->decode_aggregate(agg, got);
    for (size_t e = 0; e < kN; ++e) {
      if (std::isnan(want[e]))
        ASSERT_TRUE(std::isnan(got[e])) << e;
      else
        ASSERT_TRUE(codec_test::same_bits(want[e], got[e])) << e << ": " << want[e] << " vs " << got[e];
    }
  }
}

// Every payload is checked before anything is written: a bad one anywhere
// leaves the output as it was.
TEST_P(DenseAggregate, ABadPayloadLeavesTheOutputAlone) {
  auto c = tc::make_codec(GetParam());
  auto good = codec_test::encode(*c, codec_test::normal_floats(1000, 3));
  auto bad = good;
  bad[5] = 99;  // element type
  std::vector<std::span<const uint8_t>> views = {good, good, bad};
  std::vector<uint8_t> agg = {1, 2, 3};
  EXPECT_ANY_THROW(c->aggregate(views, 1000, agg));
  EXPECT_EQ(agg, (std::vector<uint8_t>{1, 2, 3}));
  views = {good};
  EXPECT_THROW(c->aggregate(views, 999, agg), std::invalid_argument);
  EXPECT_EQ(agg, (std::vector<uint8_t>{1, 2, 3}));
  EXPECT_THROW(c->aggregate({}, 1000, agg), std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(Codecs, DenseAggregate, ::testing::Values("fp32", "fp16"));

}  // namespace
