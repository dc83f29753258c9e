// The worked examples of FORMAT.md's codecs 4, 5 and 6, byte for byte: the
// golden bytes come from the independent Python encoder
// (`reference_encoder.py packed-example`, written from FORMAT.md), so a
// change of either the spec's reading or the C++ encoder shows here; and
// each example decodes to the values FORMAT.md says.
#include <gtest/gtest.h>

#include <vector>

#include "terngrad/quantize/codec.h"
#include "terngrad/quantize/entropy_format.h"
#include "terngrad/quantize/ternary_sum.h"

namespace tq = terngrad::quantize;

namespace {

// Codec 4: the codec-1 worked example's input.
const std::vector<uint8_t> kBase3Example = {
    0x54, 0x47, 0x52, 0x44, 0x01, 0x04, 0x00, 0x28, 0x06, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x40, 0x03, 0x00, 0x00, 0x00,
    0x2a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00,
    0x90, 0x40, 0x65, 0x3b, 0x01, 0x01,
};

// Codec 5: 402 elements, clip 0, nearest rounding, tensor id 3, step 7.
const std::vector<uint8_t> kEntropyExample = {
    0x54, 0x47, 0x52, 0x44, 0x01, 0x05, 0x02, 0x34, 0x92, 0x01, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x3f, 0x03, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00,
    0x01, 0x0e, 0x05, 0x00, 0x52, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0xe6, 0x4b, 0x66, 0xc3, 0x14, 0x00, 0x00, 0x00, 0x36, 0x0f, 0x65, 0x00,
    0x65, 0x00, 0x1f, 0xba, 0xf8, 0x00, 0x59, 0x20, 0xde, 0x54, 0x13, 0xc5,
    0x35, 0xc5, 0xa9, 0x40, 0xc8, 0x0b, 0x96, 0xf0, 0xea, 0xae,
};

// Codec 6: 200 counts of a sum of R = 2 payloads, scale 0.5, tensor id 3, step 7.
const std::vector<uint8_t> kSumExample = {
    0x54, 0x47, 0x52, 0x44, 0x01, 0x06, 0x01, 0x34, 0xc8, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x3f, 0x03, 0x00, 0x00, 0x00,
    0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00,
    0x01, 0x0e, 0x03, 0x00, 0x5c, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x6d, 0x31, 0xde, 0xe2, 0x1a, 0x00, 0x00, 0x00, 0xa3, 0x00, 0xa3, 0x00,
    0x74, 0x0d, 0xa3, 0x00, 0xa3, 0x00, 0x1c, 0xf5, 0xc8, 0x7c, 0x72, 0x2a,
    0xf4, 0x29, 0x22, 0x7e, 0x42, 0x15, 0x34, 0xe3, 0xec, 0x79, 0x19, 0x66,
    0xf2, 0x5d, 0xdf, 0xf5, 0x23, 0x68, 0x54, 0xed,
};

std::vector<float> entropy_example_input() {
  std::vector<float> x(402, 0.0f);
  for (size_t i = 0; i < x.size(); ++i) {
    if (i % 40 == 3) x[i] = 1.0f;
    if (i % 40 == 17) x[i] = -0.75f;
    if (i % 40 == 29) x[i] = 0.25f;
  }
  return x;
}

std::vector<int16_t> sum_example_counts() {
  std::vector<int16_t> c(200, 0);
  for (size_t i = 0; i < c.size(); ++i) {
    const size_t k = i % 25;
    c[i] = static_cast<int16_t>(k == 0 ? 2 : k == 7 ? -1 : k == 13 ? 1 : k == 20 ? -2 : 0);
  }
  return c;
}

std::vector<uint8_t> encode(const std::vector<float>& x, const tq::EncodeParams& p) {
  std::vector<uint8_t> out(tq::max_encoded_bytes(x.size(), p.packing));
  out.resize(tq::encode(x, p, out));
  return out;
}

}  // namespace

TEST(PackedFormat, Base3WorkedExampleIsByteExact) {
  const std::vector<float> x = {0.5f, -1.0f, 0.25f, 0.0f, -0.125f, 2.0f};
  tq::EncodeParams p;
  p.clip_factor = 0.0f;
  p.seed = 42;
  p.step = 7;
  p.tensor_id = 3;
  p.stream = tq::RandomStream::kPhilox10Word32;  // FORMAT.md's example is version 1
  p.packing = tq::Packing::kBase3;
  EXPECT_EQ(encode(x, p), kBase3Example);
  std::vector<float> out(6, 99.0f);
  tq::decode(kBase3Example, out);
  EXPECT_EQ(out, (std::vector<float>{2.0f, 0.0f, 0.0f, 0.0f, 0.0f, 2.0f}));  // as codec 1's example
  // An entropy-coded encode of 6 elements is not smaller: the same base-3 bytes.
  p.packing = tq::Packing::kEntropy;
  EXPECT_EQ(encode(x, p), kBase3Example);
}

TEST(PackedFormat, EntropyWorkedExampleIsByteExact) {
  const std::vector<float> x = entropy_example_input();
  tq::EncodeParams p;
  p.clip_factor = 0.0f;
  p.rounding = tq::Rounding::kNearest;
  p.step = 7;
  p.tensor_id = 3;
  p.packing = tq::Packing::kEntropy;
  EXPECT_EQ(encode(x, p), kEntropyExample);
  ASSERT_EQ(kEntropyExample[tq::kHeaderCodecOffset], tq::kCodecTernaryEntropy);
  std::vector<float> out(x.size(), 99.0f);
  tq::decode(kEntropyExample, out);
  for (size_t i = 0; i < x.size(); ++i)  // |g| > s/2 kept: +1 and -0.75; 0.25 and 0 become 0
    ASSERT_EQ(out[i], i % 40 == 3 ? 1.0f : i % 40 == 17 ? -1.0f : 0.0f) << i;
  const tq::PayloadHeader h = tq::inspect(kEntropyExample);
  EXPECT_EQ(h.count, 402u);
  EXPECT_TRUE(h.nearest());
  EXPECT_EQ(h.seed, 0u);
}

TEST(PackedFormat, SumWorkedExampleIsByteExact) {
  const std::vector<int16_t> c = sum_example_counts();
  std::vector<uint8_t> out(tq::sum_payload_bytes(c.size(), 2));
  out.resize(tq::encode_sum(c, 0.5f, 2, 3, 7, tq::SumPacking::kEntropy, out));
  EXPECT_EQ(out, kSumExample);
  std::vector<float> d(c.size(), 99.0f);
  tq::decode_sum(kSumExample, d);
  for (size_t i = 0; i < c.size(); ++i) ASSERT_EQ(d[i], 0.5f * c[i]) << i;
  const tq::SumHeader h = tq::inspect_sum(kSumExample);
  EXPECT_EQ(h.codec, tq::kCodecTernarySumEntropy);
  EXPECT_EQ(h.contributions, 2u);
}
