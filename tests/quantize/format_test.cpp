// The wire format: golden bytes (computed by the independent Python encoder,
// tests/quantize/reference_encoder.py, and checked by hand in FORMAT.md) and
// every way a payload can be malformed.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "terngrad/quantize/codec.h"

namespace tq = terngrad::quantize;

namespace {

const std::vector<uint8_t> kWorkedExample = {
    0x54, 0x47, 0x52, 0x44, 0x01, 0x01, 0x00, 0x28, 0x06, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x40, 0x03, 0x00, 0x00, 0x00, 0x2a, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00, 0x05, 0x0b, 0x1d, 0x0e, 0x01, 0x04};

// The version-2 worked example (FORMAT.md): the same input, seed 50.
const std::vector<uint8_t> kWorkedExampleV2 = {
    0x54, 0x47, 0x52, 0x44, 0x02, 0x01, 0x00, 0x28, 0x06, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x40, 0x03, 0x00, 0x00, 0x00, 0x32, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00, 0xb8, 0x98, 0x16, 0xcd, 0x19, 0x04};

std::vector<uint8_t> encode_example(tq::RandomStream stream = tq::RandomStream::kPhilox10Word32,
                                    uint64_t seed = 42) {
  const std::vector<float> x = {0.5f, -1.0f, 0.25f, 0.0f, -0.125f, 2.0f};
  tq::EncodeParams p;
  p.clip_factor = 0.0f;
  p.seed = seed;
  p.step = 7;
  p.tensor_id = 3;
  p.stream = stream;
  std::vector<uint8_t> out(tq::max_encoded_bytes(x.size()));
  EXPECT_EQ(tq::encode(x, p, out), out.size());
  return out;
}

tq::Errc errc_of(const std::vector<uint8_t>& payload) {
  try {
    tq::inspect(payload);
  } catch (const tq::CodecError& e) {
    return e.code();
  }
  return static_cast<tq::Errc>(0);
}

// Re-seals the header CRC after a deliberate field change, so the test
// reaches the field check instead of stopping at the CRC.
void reseal(std::vector<uint8_t>& p) {
  tq::store_le32(p.data() + tq::kHeaderCrcOffset, tq::crc32_ieee(p.data(), tq::kHeaderCrcOffset));
}

TEST(Format, WorkedExampleIsByteExact) {
  EXPECT_EQ(encode_example(), kWorkedExample);
  EXPECT_EQ(encode_example(tq::RandomStream::kPhilox7Half16, 50), kWorkedExampleV2);
}

// A version-1 payload decodes as before the version-2 stream existed, and
// version 2 decodes by the same rules: the version names only how the codes
// were drawn.
TEST(Format, BothVersionsDecode) {
  std::vector<float> out(6, 99.0f);
  tq::decode(kWorkedExampleV2, out);
  EXPECT_EQ(out, (std::vector<float>{2.0f, -2.0f, 2.0f, 0.0f, 0.0f, 2.0f}));
  EXPECT_EQ(tq::inspect(kWorkedExampleV2).version, 2u);
  EXPECT_EQ(tq::inspect(kWorkedExample).version, 1u);
}

TEST(Format, WorkedExampleDecodes) {
  std::vector<float> out(6, 99.0f);
  tq::decode(kWorkedExample, out);
  EXPECT_EQ(out, (std::vector<float>{2.0f, 0.0f, 0.0f, 0.0f, 0.0f, 2.0f}));
  const tq::PayloadHeader h = tq::inspect(kWorkedExample);
  EXPECT_EQ(h.count, 6u);
  EXPECT_EQ(h.scale, 2.0f);
  EXPECT_EQ(h.seed, 42u);
  EXPECT_EQ(h.step, 7u);
  EXPECT_EQ(h.tensor_id, 3u);
  EXPECT_FALSE(h.shared_scale());
}

TEST(Format, CrcMatchesZlibDefinition) {
  // The standard CRC-32 check value of "123456789".
  const char* s = "123456789";
  EXPECT_EQ(tq::crc32_ieee(reinterpret_cast<const uint8_t*>(s), 9), 0xCBF43926u);
}

TEST(Format, SizesAndPadding) {
  EXPECT_EQ(tq::max_encoded_bytes(0), 40u);
  EXPECT_EQ(tq::max_encoded_bytes(1), 41u);
  EXPECT_EQ(tq::max_encoded_bytes(4), 41u);
  EXPECT_EQ(tq::max_encoded_bytes(5), 42u);
  EXPECT_EQ(tq::padding_mask(6), 0xF0u);
  EXPECT_EQ(tq::padding_mask(8), 0u);
}

TEST(Format, EveryHeaderByteIsProtected) {
  const auto good = encode_example();
  for (size_t i = 0; i < tq::kHeaderBytes; ++i) {
    for (uint8_t bit : {0x01, 0x80}) {
      auto bad = good;
      bad[i] ^= bit;
      EXPECT_EQ(errc_of(bad), tq::Errc::kMalformedPayload) << "byte " << i << " bit " << int(bit);
    }
  }
}

TEST(Format, FieldChecksNameTheProblem) {
  struct Case {
    size_t offset;
    uint8_t value;
    const char* message;
  };
  const Case cases[] = {{0, 'X', "magic"},     {4, 3, "version"},  {4, 0, "version"}, {5, 7, "codec"},
                        {6, 0x80, "flag"},     {7, 48, "header size"}};
  for (const Case& c : cases) {
    auto p = encode_example();
    p[c.offset] = c.value;
    reseal(p);
    try {
      tq::inspect(p);
      ADD_FAILURE() << "accepted a bad " << c.message;
    } catch (const tq::CodecError& e) {
      EXPECT_EQ(e.code(), tq::Errc::kMalformedPayload);
      EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << e.what();
    }
  }
}

TEST(Format, RejectsNonFiniteOrNegativeScale) {
  for (float s : {NAN, INFINITY, -1.0f, -0.0f}) {
    auto p = encode_example();
    tq::store_le32(p.data() + 16, tq::float_bits(s));
    reseal(p);
    EXPECT_EQ(errc_of(p), tq::Errc::kMalformedPayload) << s;
  }
}

TEST(Format, RejectsTruncatedAndOverlongPayloads) {
  const auto good = encode_example();
  for (size_t len = 0; len < good.size(); ++len) {
    std::vector<uint8_t> cut(good.begin(), good.begin() + len);
    EXPECT_EQ(errc_of(cut), tq::Errc::kMalformedPayload) << "length " << len;
  }
  auto longer = good;
  longer.push_back(0);
  EXPECT_EQ(errc_of(longer), tq::Errc::kMalformedPayload);
}

TEST(Format, RejectsHugeCountWithoutOverflow) {
  auto p = encode_example();
  tq::store_le64(p.data() + 8, ~uint64_t{0});
  reseal(p);
  EXPECT_EQ(errc_of(p), tq::Errc::kMalformedPayload);
}

TEST(Format, RejectsInvalidCodeAndPadding) {
  auto p = encode_example();
  p[40] = 0x03;  // element 0 holds 0b11
  try {
    tq::inspect(p);
    ADD_FAILURE() << "accepted code 0b11";
  } catch (const tq::CodecError& e) {
    EXPECT_EQ(e.code(), tq::Errc::kInvalidCode);
    EXPECT_NE(std::string(e.what()).find("byte 0"), std::string::npos) << e.what();
  }
  p = encode_example();
  p[41] |= 0x10;  // element 6 does not exist: padding must be zero
  try {
    tq::inspect(p);
    ADD_FAILURE() << "accepted nonzero padding";
  } catch (const tq::CodecError& e) {
    EXPECT_EQ(e.code(), tq::Errc::kInvalidCode);
    EXPECT_NE(std::string(e.what()).find("padding"), std::string::npos) << e.what();
  }
}

}  // namespace
