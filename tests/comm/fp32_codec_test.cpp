// The fp32 codec: exact round trip and payload validation.
#include <cmath>
#include <limits>

#include "codec_test_util.h"

namespace tc = terngrad::comm;
using namespace codec_test;

TEST(Fp32Codec, RoundTripIsBitExact) {
  auto codec = tc::make_codec("fp32");
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}}) {
    std::vector<float> g = normal_floats(n, n + 1, 3.0f);
    if (n >= 7) {
      g[0] = -0.0f;
      g[1] = std::numeric_limits<float>::denorm_min();
      g[2] = std::numeric_limits<float>::max();
      g[3] = std::numeric_limits<float>::infinity();
      g[4] = std::bit_cast<float>(0x7FC01234u);  // NaN with a payload
      g[5] = -1e-40f;
    }
    const auto payload = encode(*codec, g);
    EXPECT_EQ(payload.size(), 16 + 4 * n);
    std::vector<float> out(n, 99.0f);
    codec->decode(payload, out);
    for (size_t i = 0; i < n; ++i) ASSERT_TRUE(same_bits(out[i], g[i])) << i;
  }
}

TEST(Fp32Codec, DecodeAccumulateAdds) {
  auto codec = tc::make_codec("fp32");
  const auto a = normal_floats(100, 1), b = normal_floats(100, 2);
  std::vector<float> sum(100, 0.0f);
  codec->decode_accumulate(encode(*codec, a), sum);
  codec->decode_accumulate(encode(*codec, b), sum);
  for (size_t i = 0; i < 100; ++i) ASSERT_EQ(sum[i], a[i] + b[i]);
}

TEST(Fp32Codec, EncodeRejectsSmallBuffer) {
  auto codec = tc::make_codec("fp32");
  const auto g = normal_floats(10, 3);
  std::vector<uint8_t> out(codec->payload_bytes(10) - 1, 0xAB);
  EXPECT_THROW(codec->encode(g, {}, out), std::invalid_argument);
  for (uint8_t b : out) ASSERT_EQ(b, 0xAB);
}

TEST(Fp32Codec, MalformedPayloadsAreRejectedWithOutputUntouched) {
  auto codec = tc::make_codec("fp32");
  const auto good = encode(*codec, normal_floats(10, 4));
  auto mutate = [&](auto f) {
    auto p = good;
    f(p);
    return p;
  };
  expect_rejected(*codec, std::span(good).first(15), 10);                       // shorter than the header
  expect_rejected(*codec, std::span(good).first(good.size() - 1), 10);          // truncated body
  expect_rejected(*codec, mutate([](auto& p) { p.push_back(0); }), 10);         // trailing byte
  expect_rejected(*codec, mutate([](auto& p) { p[0] ^= 1; }), 10);              // magic
  expect_rejected(*codec, mutate([](auto& p) { p[4] = 2; }), 10);               // version
  expect_rejected(*codec, mutate([](auto& p) { p[5] = 2; }), 10);               // codec id (fp16)
  expect_rejected(*codec, mutate([](auto& p) { p[6] = 2; }), 10);               // element size
  expect_rejected(*codec, mutate([](auto& p) { p[7] = 1; }), 10);               // reserved
  expect_rejected(*codec, mutate([](auto& p) { p[8] = 11; }), 10);              // count vs length
  expect_rejected(*codec, mutate([](auto& p) { p[15] = 0x80; }), 10);           // huge count
  expect_rejected(*codec, good, 9);                                             // output size
  expect_rejected(*codec, good, 11);
  expect_rejected(*codec, encode(*tc::make_codec("fp16"), normal_floats(10, 4)), 10);
  expect_rejected(*codec, encode(*tc::make_codec("terngrad"), normal_floats(10, 4)), 10);
  expect_rejected(*codec, {}, 0);
}

TEST(Fp32Codec, ErrorsNameTheProblem) {
  auto codec = tc::make_codec("fp32");
  auto p = encode(*codec, normal_floats(10, 5));
  p[5] = 2;
  std::vector<float> out(10);
  try {
    codec->decode(p, out);
    FAIL();
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(" 2"), std::string::npos) << e.what();  // the bad id
  }
  try {
    codec->decode(encode(*codec, normal_floats(10, 5)), std::span(out).first(4));
    FAIL();
  } catch (const std::exception& e) {
    const std::string m = e.what();  // both sizes
    EXPECT_NE(m.find("10"), std::string::npos) << m;
    EXPECT_NE(m.find("4"), std::string::npos) << m;
  }
}
