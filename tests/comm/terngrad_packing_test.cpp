// terngrad:pack=2bit|base3|entropy through the codec interface: the spec,
// identical decoded values across packings (so identical training), the
// shared-scale aggregate entropy-coded with pack=entropy, and validation
// that checks the element count before decoding an untrusted body.
#include <random>
#include <string>

#include "codec_test_util.h"
#include "terngrad/quantize/codec.h"
#include "terngrad/quantize/ternary_sum.h"

namespace tc = terngrad::comm;
namespace tq = terngrad::quantize;

namespace {

std::vector<float> gaussian(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 0.01f);
  std::vector<float> x(n);
  for (auto& v : x) v = d(rng);
  return x;
}

// One worker's payload of g, trimmed to what the codec wrote.
std::vector<uint8_t> encode(tc::GradientCodec& c, const std::vector<float>& g, uint64_t seed,
                            std::optional<float> shared) {
  tc::EncodeContext ctx;
  ctx.seed = seed;
  ctx.step = 5;
  ctx.tensor_id = 2;
  ctx.shared_scale = shared;
  std::vector<uint8_t> out(c.payload_bytes(g.size()));
  out.resize(c.encode(g, ctx, out));
  return out;
}

}  // namespace

TEST(TernGradPacking, SpecsRoundTripAndRefuseBuckets) {
  EXPECT_EQ(tc::make_codec("terngrad:pack=entropy")->spec(), "terngrad:clip=2.5,share_scale=1,pack=entropy");
  EXPECT_EQ(tc::make_codec("terngrad:pack=base3,round=nearest")->spec(),
            "terngrad:clip=2.5,share_scale=1,round=nearest,pack=base3");
  EXPECT_EQ(tc::make_codec("terngrad:pack=2bit")->spec(), "terngrad:clip=2.5,share_scale=1");
  try {
    tc::make_codec("terngrad:pack=entropy,bucket=64");
    ADD_FAILURE();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("pack=entropy"), std::string::npos) << e.what();
  }
  EXPECT_THROW(tc::make_codec("terngrad:pack=3bit"), std::invalid_argument);
}

TEST(TernGradPacking, SameValuesSmallerPayloadsAndAnEntropyCodedSum) {
  const size_t n = 200000;
  const uint32_t workers = 4;
  std::vector<std::vector<float>> grads;
  for (uint32_t w = 0; w < workers; ++w) grads.push_back(gaussian(n, 10 + w));
  std::vector<float> sums[3];
  size_t pushed[3] = {0, 0, 0}, pulled[3] = {0, 0, 0};
  const char* specs[3] = {"terngrad", "terngrad:pack=base3", "terngrad:pack=entropy"};
  for (int k = 0; k < 3; ++k) {
    SCOPED_TRACE(specs[k]);
    auto codec = tc::make_codec(specs[k]);
    float shared = 0.0f;
    for (const auto& g : grads) shared = std::max(shared, codec->local_scale(g));
    std::vector<std::vector<uint8_t>> payloads;
    for (uint32_t w = 0; w < workers; ++w) {
      payloads.push_back(encode(*codec, grads[w], 100 + w, shared));
      codec->validate(payloads.back(), n);
      pushed[k] += payloads.back().size();
    }
    std::vector<std::span<const uint8_t>> views(payloads.begin(), payloads.end());
    std::vector<uint8_t> agg;
    codec->aggregate(views, n, agg);
    pulled[k] = agg.size();
    sums[k].resize(n);
    codec->decode_aggregate(agg, sums[k]);
    if (k == 2) {
      EXPECT_EQ(agg[5], tq::kCodecTernarySumEntropy);
    }
  }
  EXPECT_EQ(sums[0], sums[1]);
  EXPECT_EQ(sums[0], sums[2]);
  EXPECT_EQ(pushed[1], workers * (tq::kHeaderBytes + (n + 4) / 5));
  EXPECT_LT(pushed[2], 1.3 * workers * n / 8) << "entropy-coded payloads under 1.3 bits per element";
  EXPECT_LT(pulled[2], 0.75 * pulled[0]) << "the 4-replica sum at least 25% smaller than bit_width(2R) packing";
}

// What a server keeps of a push (validate_for_server): a base-3 or
// entropy-coded payload as the 2-bit payload of its codes, which decodes to
// the same values and aggregates to the same bytes as the pushes themselves,
// one push or four; a 2-bit push as it came. A malformed push is refused.
TEST(TernGradPacking, TheServerKeepsTwoBitCodesAndAggregatesTheSameBytes) {
  const size_t n = 150001;
  for (const char* spec : {"terngrad", "terngrad:pack=base3", "terngrad:pack=entropy",
                           "terngrad:pack=entropy,share_scale=0"}) {
    SCOPED_TRACE(spec);
    auto codec = tc::make_codec(spec);
    const bool shared = codec->wants_shared_scale();
    std::vector<std::vector<uint8_t>> pushed, kept;
    for (uint32_t w = 0; w < 4; ++w) {
      const auto g = gaussian(n, 40 + w);
      pushed.push_back(encode(*codec, g, 7 + w, shared ? std::optional<float>(8.0f) : std::nullopt));
      std::vector<uint8_t> k = codec->validate_for_server(pushed.back(), n);
      if (std::string(spec) == "terngrad") {
        EXPECT_TRUE(k.empty()) << "a 2-bit push is kept as it came";
        k = pushed.back();
      } else {
        EXPECT_EQ(k[tq::kHeaderCodecOffset], tq::kCodecTernary2Bit);
      }
      std::vector<float> a(n), b(n);
      codec->decode(pushed.back(), a);
      codec->decode(k, b);
      EXPECT_EQ(a, b);
      kept.push_back(std::move(k));
    }
    for (size_t count : {size_t{1}, size_t{4}}) {
      std::vector<std::span<const uint8_t>> p(pushed.begin(), pushed.begin() + count), k(kept.begin(), kept.begin() + count);
      std::vector<uint8_t> from_pushed, from_kept;
      codec->aggregate(p, n, from_pushed);
      codec->aggregate(k, n, from_kept);
      EXPECT_EQ(from_kept, from_pushed) << count << " push(es)";
    }
    auto bad = pushed[0];
    bad[tq::kHeaderCountOffset] ^= 0x01;  // the header's CRC no longer matches
    EXPECT_THROW(codec->validate_for_server(bad, n), std::exception);
    if (pushed[0][tq::kHeaderCodecOffset] != tq::kCodecTernaryEntropy) {
      bad = pushed[0];
      bad[tq::kHeaderBytes + 3] = 0xFF;  // 2-bit: reserved codes; base-3: above 242
      EXPECT_THROW(codec->validate_for_server(bad, n), std::exception);
    }
    EXPECT_THROW(codec->validate_for_server(pushed[0], n + 1), std::exception);
  }
}

TEST(TernGradPacking, ValidateChecksTheCountBeforeDecoding) {
  auto codec = tc::make_codec("terngrad:pack=entropy,share_scale=0");
  const auto g = gaussian(100000, 1);
  const auto p = encode(*codec, g, 1, std::nullopt);
  ASSERT_EQ(p[5], tq::kCodecTernaryEntropy);
  codec->validate(p, g.size());
  try {
    codec->validate(p, g.size() + 4);
    ADD_FAILURE();
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("holds 100000 elements, expected 100004"), std::string::npos) << e.what();
  }
  // A 2-bit codec decodes a peer's entropy-coded payload: decoders take every packing.
  std::vector<float> a(g.size()), b(g.size());
  tc::make_codec("terngrad:share_scale=0")->decode(p, a);
  codec->decode(p, b);
  EXPECT_EQ(a, b);
}
