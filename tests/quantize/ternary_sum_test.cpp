// The ternary sum payload (codec id 2): bits per contribution count, exact
// round trip against a float64 reference of sum_w s * code_w, every
// validation fault, and the sum of real shared-scale payloads.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "reference_codec.h"
#include "terngrad/quantize/codec.h"
#include "terngrad/quantize/ternary_sum.h"

namespace tq = terngrad::quantize;

namespace {

std::vector<int16_t> random_counts(size_t n, int r, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> d(-r, r);
  std::vector<int16_t> c(n);
  for (auto& v : c) v = static_cast<int16_t>(d(gen));
  return c;
}

std::vector<uint8_t> pack(const std::vector<int16_t>& c, float scale, uint32_t r) {
  std::vector<uint8_t> out(tq::sum_payload_bytes(c.size(), r));
  EXPECT_EQ(tq::encode_sum(c, scale, r, 5, 77, out), out.size());
  return out;
}

TEST(TernarySum, BitsPerElement) {
  EXPECT_EQ(tq::sum_bits(1), 2u);  // 3 levels
  EXPECT_EQ(tq::sum_bits(2), 3u);  // 5 levels
  EXPECT_EQ(tq::sum_bits(4), 4u);  // 9 levels
  EXPECT_EQ(tq::sum_bits(8), 5u);  // 17 levels
  EXPECT_EQ(tq::sum_bits(16), 6u);
  EXPECT_EQ(tq::sum_bits(32767), 16u);
  EXPECT_THROW(tq::sum_bits(0), tq::CodecError);
  EXPECT_THROW(tq::sum_bits(32768), tq::CodecError);
  EXPECT_EQ(tq::sum_payload_bytes(1000, 4), 40u + 500u);
  EXPECT_EQ(tq::sum_payload_bytes(3, 2), 40u + 2u);  // 9 bits
}

TEST(TernarySum, RoundTripMatchesFloat64Reference) {
  for (uint32_t r : {1u, 2u, 3u, 4u, 8u, 100u, 32767u}) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{1001}, size_t{600007}}) {
      const auto c = random_counts(n, static_cast<int>(r), r * 31 + static_cast<uint32_t>(n));
      const float scale = 0.0123f;
      const auto payload = pack(c, scale, r);
      const tq::SumHeader h = tq::inspect_sum(payload);
      EXPECT_EQ(h.count, n);
      EXPECT_EQ(h.contributions, r);
      EXPECT_EQ(h.tensor_id, 5u);
      EXPECT_EQ(h.step, 77u);
      std::vector<float> out(n, -1.0f);
      tq::decode_sum(payload, out);
      for (size_t i = 0; i < n; ++i) {
        const double want = static_cast<double>(scale) * c[i];
        ASSERT_EQ(out[i], static_cast<float>(want)) << "R " << r << " n " << n << " element " << i;
      }
    }
  }
}

TEST(TernarySum, SumOfSharedScalePayloadsDecodesToTheirSum) {
  // Four workers' payloads with one shared scale: the sum payload decodes to
  // scale * (sum of codes), the float64 sum of the four decodings.
  const size_t n = 50001;
  std::vector<std::vector<uint8_t>> payloads;
  std::vector<double> ref(n, 0.0);
  for (int w = 0; w < 4; ++w) {
    const auto g = tg_test::gradient_like(n, 100 + w);
    tq::EncodeParams p;
    p.seed = 1000 + w;
    p.shared_scale = 0.004f;
    payloads.emplace_back(tq::max_encoded_bytes(n));
    tq::encode(g, p, payloads.back());
    std::vector<float> d(n);
    tq::decode(payloads.back(), d);
    for (size_t i = 0; i < n; ++i) ref[i] += d[i];
  }
  std::vector<std::span<const uint8_t>> views(payloads.begin(), payloads.end());
  std::vector<int16_t> counts(n);
  const float scale = tq::sum_shared(views, counts);
  std::vector<uint8_t> sum(tq::sum_payload_bytes(n, 4));
  tq::encode_sum(counts, scale, 4, 0, 0, sum);
  EXPECT_EQ(sum.size(), 40u + (n * 4 + 7) / 8);
  std::vector<float> out(n);
  tq::decode_sum(sum, out);
  // ref is exact in float64 (small integer multiples of one float); the sum
  // payload rounds it once to float32.
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], static_cast<float>(ref[i])) << i;
}

TEST(TernarySum, SumPayloadsEqualsCountsThenEncode) {
  // The direct route (8-bit lanes up to R = 127) and the int16 route beyond
  // give the bytes of sum_shared() + encode_sum(), for every edge size.
  for (int r : {1, 2, 3, 4, 8, 127, 128, 200}) {
    for (size_t n : {size_t{1}, size_t{3}, size_t{4}, size_t{5}, size_t{8}, size_t{9}, size_t{12}, size_t{4099}, size_t{70001}}) {
      SCOPED_TRACE("R " + std::to_string(r) + " n " + std::to_string(n));
      std::vector<std::vector<uint8_t>> payloads;
      for (int w = 0; w < r; ++w) {
        const auto g = tg_test::gradient_like(n, 7 * w + static_cast<uint32_t>(n));
        tq::EncodeParams p;
        p.seed = 50 + w;
        p.step = 3;
        p.tensor_id = 9;
        p.shared_scale = 1.0f;  // above every tensor's own scale
        payloads.emplace_back(tq::max_encoded_bytes(n));
        tq::encode(g, p, payloads.back());
      }
      std::vector<std::span<const uint8_t>> views(payloads.begin(), payloads.end());
      std::vector<int16_t> counts(n);
      const float scale = tq::sum_shared(views, counts);
      std::vector<uint8_t> want(tq::sum_payload_bytes(n, r)), got(want.size(), 0xAA);
      tq::encode_sum(counts, scale, r, 9, 3, want);
      EXPECT_EQ(tq::sum_payloads(views, got), want.size());
      ASSERT_EQ(got, want);
    }
  }
}

TEST(TernarySum, SumPayloadsRefusesWhatSumSharedRefuses) {
  std::vector<std::vector<uint8_t>> payloads;
  for (int w = 0; w < 2; ++w) {
    tq::EncodeParams p;
    p.shared_scale = 1.0f;
    payloads.emplace_back(tq::max_encoded_bytes(10));
    tq::encode(tg_test::gradient_like(10, w), p, payloads.back());
  }
  std::vector<uint8_t> out(tq::sum_payload_bytes(10, 2));
  auto views = [&] { return std::vector<std::span<const uint8_t>>(payloads.begin(), payloads.end()); };
  auto bad = payloads;
  payloads[1][tq::kHeaderBytes] = 0xFF;  // reserved codes
  EXPECT_THROW(tq::sum_payloads(views(), out), tq::CodecError);
  payloads = bad;
  payloads[1].back() |= 0xC0;  // element 11 does not exist: padding
  EXPECT_THROW(tq::sum_payloads(views(), out), tq::CodecError);
  payloads = bad;
  tq::store_le32(payloads[1].data() + 16, tq::float_bits(2.0f));  // another scale...
  tq::store_le32(payloads[1].data() + tq::kHeaderCrcOffset, tq::crc32_ieee(payloads[1].data(), tq::kHeaderCrcOffset));
  EXPECT_THROW(tq::sum_payloads(views(), out), tq::CodecError);
  payloads = bad;
  std::vector<uint8_t> small(out.size() - 1);
  EXPECT_THROW(tq::sum_payloads(views(), small), tq::CodecError);
}

void expect_rejected(const std::vector<uint8_t>& payload, const std::string& fragment) {
  try {
    tq::inspect_sum(payload);
    FAIL() << "accepted a bad payload (expected: " << fragment << ")";
  } catch (const tq::CodecError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

void refresh_crc(std::vector<uint8_t>& p) {
  tq::store_le32(p.data() + tq::kHeaderCrcOffset, tq::crc32_ieee(p.data(), tq::kHeaderCrcOffset));
}

TEST(TernarySum, MalformedPayloadsAreRejected) {
  const auto good = pack(random_counts(13, 2, 1), 1.0f, 2);
  auto p = good;
  p.pop_back();
  expect_rejected(p, "length");
  p = good;
  p[20] ^= 1;  // tensor id changed, CRC not
  expect_rejected(p, "CRC");
  p = good;
  p[28] = 4;  // wrong bits for R = 2
  refresh_crc(p);
  expect_rejected(p, "bits per element");
  p = good;
  p[24] = 0;  // zero contributions
  refresh_crc(p);
  expect_rejected(p, "contributions 0");
  p = good;
  p[5] = 1;
  refresh_crc(p);
  expect_rejected(p, "codec id 1");
  // A field of 7 > 2R = 4 at element 0.
  p = good;
  p[tq::kHeaderBytes] = static_cast<uint8_t>((p[tq::kHeaderBytes] & ~7u) | 7u);
  expect_rejected(p, "element 0");
  // 13 elements x 3 bits = 39 bits: bit 39 is padding.
  p = good;
  p.back() |= 0x80;
  expect_rejected(p, "padding");
  std::vector<float> out(13, 9.0f);
  EXPECT_THROW(tq::decode_sum(p, out), tq::CodecError);
  for (float v : out) EXPECT_EQ(v, 9.0f) << "a rejected payload must not touch the output";
}

TEST(TernarySum, EncodeRefusesOutOfRangeCounts) {
  std::vector<int16_t> c = {0, 1, -3};
  std::vector<uint8_t> out(tq::sum_payload_bytes(3, 2));
  EXPECT_THROW(tq::encode_sum(c, 1.0f, 2, 0, 0, out), tq::CodecError);
  c[2] = -2;
  EXPECT_THROW(tq::encode_sum(c, -1.0f, 2, 0, 0, out), tq::CodecError);
  std::vector<uint8_t> small(out.size() - 1);
  EXPECT_THROW(tq::encode_sum(c, 1.0f, 2, 0, 0, small), tq::CodecError);
}

}  // namespace

// The device packer's group step (detail::pack_sum_group, one CUDA thread
// per group of 8 fields) gives encode_sum()'s body bytes, cut at the body's
// end, for every field width and every length of the last group.
TEST(TernarySum, DevicePackerGroupsGiveEncodeSumsBody) {
  for (uint32_t r : {1u, 2u, 3u, 4u, 7u, 8u, 100u, 4095u, 32767u}) {
    for (uint64_t n : {uint64_t{0}, uint64_t{1}, uint64_t{7}, uint64_t{8}, uint64_t{9}, uint64_t{15}, uint64_t{17},
                       uint64_t{1000}, uint64_t{1003}}) {
      const std::vector<int16_t> counts = random_counts(n, static_cast<int>(r), r + static_cast<uint32_t>(n));
      const uint32_t bits = tq::sum_bits(r);
      const std::vector<uint8_t> want = pack(counts, 0.5f, r);
      const uint64_t body = want.size() - tq::kHeaderBytes;
      std::vector<uint8_t> got(body, 0xEE);
      std::vector<int16_t> padded = counts;
      padded.resize(n + 8, 0);  // the group step reads only fields below n; pad so a wrong read shows
      for (uint64_t g = 0; g < (n + 7) / 8; ++g) {
        uint8_t group[16];
        tq::detail::pack_sum_group(padded.data() + 8 * g, g, n, r, bits, group);
        for (uint32_t k = 0; k < bits && g * bits + k < body; ++k) got[g * bits + k] = group[k];
      }
      EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin() + tq::kHeaderBytes)) << "R=" << r << " n=" << n;
    }
  }
}
