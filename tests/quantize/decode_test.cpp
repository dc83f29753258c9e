// Decode, decode-accumulate and count summation: exact values, agreement of
// the SIMD and portable kernels, and no output touched on a bad payload.
#include <gtest/gtest.h>

#include <vector>

#include "reference_codec.h"
#include "terngrad/quantize/codec.h"
#include "terngrad/quantize/cpu_features.h"

namespace tq = terngrad::quantize;

namespace {

std::vector<uint8_t> encode(const std::vector<float>& x, uint64_t seed, std::optional<float> shared = {}) {
  tq::EncodeParams p;
  p.seed = seed;
  p.shared_scale = shared;
  std::vector<uint8_t> out(tq::max_encoded_bytes(x.size()));
  tq::encode(x, p, out);
  return out;
}

TEST(Decode, ValuesAreScaleTimesCodes) {
  for (size_t n : {1u, 4u, 5u, 67u, 4099u, 300001u}) {
    const auto x = tg_test::gradient_like(n, static_cast<uint32_t>(n));
    const auto payload = encode(x, 3);
    const float s = tq::inspect(payload).scale;
    std::vector<float> out(n, 7.0f);
    tq::decode(payload, out);
    for (size_t i = 0; i < n; ++i) {
      const uint32_t c = (payload[tq::kHeaderBytes + i / 4] >> (2 * (i % 4))) & 3u;
      const float want = c == tq::kCodePlus ? s : (c == tq::kCodeMinus ? -s : 0.0f);
      ASSERT_EQ(out[i], want) << "n " << n << " i " << i;
    }
  }
}

TEST(Decode, AccumulateAddsExactly) {
  const auto x = tg_test::gradient_like(100003, 8);
  const auto payload = encode(x, 1);
  std::vector<float> decoded(x.size()), acc(x.size());
  tq::decode(payload, decoded);
  for (size_t i = 0; i < acc.size(); ++i) acc[i] = 0.001f * static_cast<float>(i % 97);
  auto want = acc;
  for (size_t i = 0; i < acc.size(); ++i) want[i] += decoded[i];
  tq::decode_accumulate(payload, acc);
  EXPECT_EQ(acc, want);
}

TEST(Decode, PortableAndSimdKernelsAgree) {
  const auto x = tg_test::gradient_like(65537, 4);
  const auto payload = encode(x, 9);
  std::vector<float> a(x.size(), 1.0f), b(x.size(), 1.0f);
  tq::decode_accumulate(payload, a);
  const bool was = tq::cpu_simd_active();
  tq::set_cpu_simd(false);
  tq::decode_accumulate(payload, b);
  tq::set_cpu_simd(was);
  EXPECT_EQ(a, b);
}

TEST(Decode, CountsAccumulate) {
  const auto x = tg_test::gradient_like(1001, 5);
  const auto payload = encode(x, 2);
  std::vector<int16_t> counts(x.size(), 3);
  const float s = tq::accumulate_counts(payload, counts);
  std::vector<float> decoded(x.size());
  tq::decode(payload, decoded);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(s * static_cast<float>(counts[i] - 3), decoded[i]);
}

TEST(Decode, BadPayloadLeavesOutputUntouched) {
  const auto x = tg_test::gradient_like(1000, 6);
  auto payload = encode(x, 1);
  payload[tq::kHeaderBytes + 200] = 0xFF;  // invalid codes deep in the body
  std::vector<float> acc(x.size(), 1.5f);
  try {
    tq::decode_accumulate(payload, acc);
    ADD_FAILURE() << "accepted invalid codes";
  } catch (const tq::CodecError& e) {
    EXPECT_EQ(e.code(), tq::Errc::kInvalidCode);
    EXPECT_NE(std::string(e.what()).find("byte 200"), std::string::npos) << e.what();
  }
  for (float v : acc) ASSERT_EQ(v, 1.5f);
  std::vector<int16_t> counts(x.size(), 0);
  EXPECT_THROW(tq::accumulate_counts(payload, counts), tq::CodecError);
  for (int16_t c : counts) ASSERT_EQ(c, 0);
}

TEST(Decode, WrongOutputLengthIsAnError) {
  const auto payload = encode(tg_test::gradient_like(100, 1), 1);
  std::vector<float> out(99);
  try {
    tq::decode(payload, out);
    ADD_FAILURE();
  } catch (const tq::CodecError& e) {
    EXPECT_EQ(e.code(), tq::Errc::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("99"), std::string::npos);
  }
}

TEST(Decode, SumSharedRejectsMismatchedScales) {
  const auto a = encode(tg_test::gradient_like(100, 1), 1);
  const auto b = encode(tg_test::gradient_like(100, 2, 5e-3f), 2);  // own, different scale
  const std::vector<std::span<const uint8_t>> views = {a, b};
  std::vector<int16_t> counts(100, 9);
  try {
    tq::sum_shared(views, counts);
    ADD_FAILURE();
  } catch (const tq::CodecError& e) {
    EXPECT_EQ(e.code(), tq::Errc::kScaleMismatch);
  }
  for (int16_t c : counts) ASSERT_EQ(c, 9);
  EXPECT_THROW(tq::sum_shared({}, counts), tq::CodecError);
}

}  // namespace
