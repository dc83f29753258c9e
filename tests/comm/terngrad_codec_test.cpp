// The terngrad codec: identical bytes to terngrad::quantize, the shared-scale
// flow through the interface, and the local_scale() statistics cache.
#include <algorithm>
#include <cmath>

#include "codec_test_util.h"
#include "terngrad/quantize/codec.h"

namespace tc = terngrad::comm;
namespace tq = terngrad::quantize;
using namespace codec_test;

namespace {

tc::EncodeContext context(uint64_t seed, uint32_t step, uint32_t tensor_id, std::optional<float> shared = {}) {
  tc::EncodeContext c;
  c.seed = seed;
  c.step = step;
  c.tensor_id = tensor_id;
  c.shared_scale = shared;
  return c;
}

std::vector<uint8_t> quantize_encode(std::span<const float> g, float clip, const tc::EncodeContext& c) {
  tq::EncodeParams p;
  p.clip_factor = clip;
  p.seed = c.seed;
  p.step = c.step;
  p.tensor_id = c.tensor_id;
  p.shared_scale = c.shared_scale;
  std::vector<uint8_t> out(tq::max_encoded_bytes(g.size()));
  tq::encode(g, p, out);
  return out;
}

}  // namespace

TEST(TernGradCodec, BytesIdenticalToQuantizeEncode) {
  for (const char* spec : {"terngrad:share_scale=0", "terngrad:clip=0,share_scale=0", "terngrad:clip=1.5,share_scale=0"}) {
    SCOPED_TRACE(spec);
    auto codec = tc::make_codec(spec);
    const float clip = tc::parse_codec_spec(spec).params.count("clip")
                           ? std::stof(tc::parse_codec_spec(spec).params.at("clip"))
                           : 2.5f;
    for (size_t n : {size_t{1}, size_t{5}, size_t{1000}, size_t{70001}}) {
      const auto g = normal_floats(n, n, 0.1f);
      const auto c = context(0xABCDEF12345ull + n, 17, 3);
      EXPECT_EQ(codec->payload_bytes(n), tq::max_encoded_bytes(n));
      EXPECT_EQ(encode(*codec, g, c), quantize_encode(g, clip, c));
    }
  }
}

// stream= picks the random stream and so the header's format version:
// philox7x16 (version 2) by default, philox10 (version 1) on request; the
// spec prints it only when it is not the default; other names are refused.
TEST(TernGradCodec, StreamOptionChoosesTheFormatVersion) {
  const auto g = normal_floats(1000, 3, 0.1f);
  const auto c = context(77, 5, 2);
  for (auto [spec, version] : {std::pair{"terngrad:share_scale=0", 2}, std::pair{"terngrad:share_scale=0,stream=philox7x16", 2},
                               std::pair{"terngrad:share_scale=0,stream=philox10", 1}}) {
    SCOPED_TRACE(spec);
    auto codec = tc::make_codec(spec);
    const auto p = encode(*codec, g, c);
    EXPECT_EQ(p[tq::kHeaderVersionOffset], version);
    tq::EncodeParams qp;
    qp.seed = c.seed;
    qp.step = c.step;
    qp.tensor_id = c.tensor_id;
    qp.stream = static_cast<tq::RandomStream>(version);
    std::vector<uint8_t> want(tq::max_encoded_bytes(g.size()));
    tq::encode(g, qp, want);
    EXPECT_EQ(p, want);
    EXPECT_EQ(tc::make_codec(codec->spec())->spec(), codec->spec());
  }
  EXPECT_EQ(tc::make_codec("terngrad:stream=philox10")->spec(), "terngrad:clip=2.5,share_scale=1,stream=philox10");
  EXPECT_EQ(tc::make_codec("terngrad:stream=philox7x16")->spec(), "terngrad:clip=2.5,share_scale=1");
  try {
    tc::make_codec("terngrad:stream=mt19937");
    ADD_FAILURE() << "accepted stream=mt19937";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("stream"), std::string::npos) << e.what();
  }
}

TEST(TernGradCodec, SharedScaleFlowMatchesQuantizeAndSumsToIntegerMultiples) {
  constexpr int kWorkers = 4;
  constexpr size_t kN = 5000;
  std::vector<std::unique_ptr<tc::GradientCodec>> codecs;
  std::vector<std::vector<float>> grads;
  for (int w = 0; w < kWorkers; ++w) {
    codecs.push_back(tc::make_codec("terngrad"));
    ASSERT_TRUE(codecs.back()->wants_shared_scale());
    grads.push_back(normal_floats(kN, 100 + w, 0.5f * (w + 1)));
  }
  // 1. Local scales, as each worker would compute them; 2. max-reduce.
  float shared = 0.0f;
  for (int w = 0; w < kWorkers; ++w) {
    const float s = codecs[w]->local_scale(grads[w]);
    EXPECT_EQ(s, tq::local_scale(tq::compute_stats(grads[w]), 2.5f));
    shared = std::max(shared, s);
  }
  // 3. Encode with the shared scale; the bytes are what quantize writes.
  std::vector<std::vector<uint8_t>> payloads;
  for (int w = 0; w < kWorkers; ++w) {
    const auto c = context(1000 + w, 9, 2, shared);
    payloads.push_back(encode(*codecs[w], grads[w], c));
    EXPECT_EQ(payloads.back(), quantize_encode(grads[w], 2.5f, c));
    EXPECT_EQ(tq::inspect(payloads.back()).scale, shared);
    EXPECT_TRUE(tq::inspect(payloads.back()).shared_scale());
  }
  // 4. The decoded sum is an integer count in [-N, N] times the shared scale.
  std::vector<float> sum(kN, 0.0f);
  for (int w = 0; w < kWorkers; ++w) codecs[w]->decode_accumulate(payloads[w], sum);
  std::vector<std::span<const uint8_t>> spans(payloads.begin(), payloads.end());
  std::vector<int16_t> counts(kN, 0);
  EXPECT_EQ(tq::sum_shared(spans, counts), shared);
  int nonzero = 0;
  for (size_t i = 0; i < kN; ++i) {
    const double k = static_cast<double>(sum[i]) / shared;
    ASSERT_NEAR(k, std::round(k), 1e-5) << i;
    ASSERT_EQ(std::lround(k), counts[i]) << i;
    ASSERT_LE(std::abs(counts[i]), kWorkers);
    nonzero += counts[i] != 0;
  }
  EXPECT_GT(nonzero, 0);
}

TEST(TernGradCodec, ShareScaleZeroIgnoresContextScale) {
  auto codec = tc::make_codec("terngrad:share_scale=0");
  EXPECT_FALSE(codec->wants_shared_scale());
  const auto g = normal_floats(300, 5);
  EXPECT_EQ(encode(*codec, g, context(1, 2, 3, 100.0f)), quantize_encode(g, 2.5f, context(1, 2, 3)));
}

TEST(TernGradCodec, SharedScaleBelowOwnScaleIsRejected) {
  auto codec = tc::make_codec("terngrad");
  const auto g = normal_floats(300, 6);
  const float own = codec->local_scale(g);
  std::vector<uint8_t> out(codec->payload_bytes(g.size()), 0xEE);
  EXPECT_THROW(codec->encode(g, context(1, 2, 3, own * 0.5f), out), tq::CodecError);
  for (uint8_t b : out) ASSERT_EQ(b, 0xEE);
}

TEST(TernGradCodec, NonFiniteGradientErrorsPropagate) {
  auto codec = tc::make_codec("terngrad");
  auto g = normal_floats(50, 7);
  g[20] = NAN;
  EXPECT_THROW(codec->local_scale(g), tq::CodecError);
  std::vector<uint8_t> out(codec->payload_bytes(g.size()));
  EXPECT_THROW(codec->encode(g, {}, out), tq::CodecError);
}

// The cache is keyed on (pointer, size) and consumed by the next encode():
// these cases would produce different bytes if stale statistics were used.
TEST(TernGradCodec, LocalScaleCacheNeverGivesStaleStats) {
  auto codec = tc::make_codec("terngrad");
  const auto c = context(42, 1, 0);
  auto a = normal_floats(1000, 8, 1.0f);
  const auto b = normal_floats(1000, 9, 3.0f);

  // A different span of the same size: fresh statistics.
  codec->local_scale(a);
  EXPECT_EQ(encode(*codec, b, c), quantize_encode(b, 2.5f, c));

  // Same pointer, different size: fresh statistics.
  codec->local_scale(a);
  EXPECT_EQ(encode(*codec, std::span(a).first(999), c), quantize_encode(std::span(a).first(999), 2.5f, c));

  // The cache is consumed: a second encode of the (since changed) same
  // buffer computes its own statistics.
  codec->local_scale(a);
  EXPECT_EQ(encode(*codec, a, c), quantize_encode(a, 2.5f, c));
  for (float& x : a) x *= 4.0f;
  EXPECT_EQ(encode(*codec, a, c), quantize_encode(a, 2.5f, c));

  // A newer local_scale() replaces the entry.
  const auto b_copy = b;
  codec->local_scale(a);
  codec->local_scale(b_copy);
  EXPECT_EQ(encode(*codec, a, c), quantize_encode(a, 2.5f, c));

  // A local_scale() that throws clears the entry (here the buffer changes
  // after the first call, which the contract forbids, to make staleness visible).
  codec->local_scale(a);
  for (float& x : a) x *= 0.25f;
  auto bad = a;
  bad[3] = INFINITY;
  EXPECT_THROW(codec->local_scale(bad), tq::CodecError);
  EXPECT_EQ(encode(*codec, a, c), quantize_encode(a, 2.5f, c));
}

// Documents the single-pass path: encode() right after local_scale() of the
// same span reuses those statistics (so values must not change in between).
TEST(TernGradCodec, LocalScaleStatsAreReusedForTheSameSpan) {
  auto codec = tc::make_codec("terngrad:share_scale=0");
  auto a = normal_floats(1000, 10);
  const tq::TensorStats before = tq::compute_stats(a);
  codec->local_scale(a);
  for (float& x : a) x *= 0.5f;
  const auto c = context(7, 3, 1);
  tq::EncodeParams p;
  p.clip_factor = 2.5f;
  p.seed = c.seed;
  p.step = c.step;
  p.tensor_id = c.tensor_id;
  std::vector<uint8_t> want(tq::max_encoded_bytes(a.size()));
  tq::encode_with_stats(a, before, p, want);
  EXPECT_EQ(encode(*codec, a, c), want);
}

TEST(TernGradCodec, DecodeMatchesQuantizeAndRejectsMalformedPayloads) {
  auto codec = tc::make_codec("terngrad");
  const auto g = normal_floats(101, 11);
  const auto payload = encode(*codec, g, context(3, 4, 5));
  std::vector<float> mine(101), theirs(101);
  codec->decode(payload, mine);
  tq::decode(payload, theirs);
  EXPECT_EQ(mine, theirs);
  std::vector<float> acc(101, 1.0f);
  codec->decode_accumulate(payload, acc);
  for (size_t i = 0; i < 101; ++i) ASSERT_EQ(acc[i], 1.0f + theirs[i]);

  auto bad_crc = payload;
  bad_crc[20] ^= 1;
  expect_rejected(*codec, bad_crc, 101);
  auto bad_code = payload;
  bad_code.back() |= 0xC0;  // padding bits / reserved code
  expect_rejected(*codec, bad_code, 101);
  expect_rejected(*codec, std::span(payload).first(payload.size() - 1), 101);
  expect_rejected(*codec, payload, 100);
  expect_rejected(*codec, encode(*tc::make_codec("fp32"), g), 101);
}

// aggregate_bytes() is the length aggregate() gives for shared-scale
// payloads, for every count and size (the empty slice included), where the
// codec can tell: 2-bit terngrad with scale sharing, ef() of it, fp32; and
// nullopt where the length depends on the payloads.
TEST(TernGradCodec, AggregateBytesIsTheSumsLengthWhereTheCodecCanTell) {
  for (const char* spec : {"terngrad", "ef(terngrad:round=nearest)", "fp32"}) {
    for (uint64_t n : {0u, 1u, 13u, 4096u, 5001u}) {
      for (size_t count : {1u, 2u, 3u, 5u}) {
        SCOPED_TRACE(std::string(spec) + " n=" + std::to_string(n) + " count=" + std::to_string(count));
        std::vector<std::unique_ptr<tc::GradientCodec>> codecs;
        std::vector<std::vector<float>> grads;
        float shared = 0.0f;
        for (size_t w = 0; w < count; ++w) {
          codecs.push_back(tc::make_codec(spec));
          grads.push_back(normal_floats(n, 7 + w, 1.0f + w));
          shared = std::max(shared, codecs[w]->local_scale(grads[w]));
        }
        std::vector<std::vector<uint8_t>> payloads;
        for (size_t w = 0; w < count; ++w)
          payloads.push_back(encode(*codecs[w], grads[w], context(50 + w, 3, 1, shared)));
        std::vector<std::span<const uint8_t>> spans(payloads.begin(), payloads.end());
        std::vector<uint8_t> sum;
        codecs[0]->aggregate(spans, n, sum);
        const std::optional<size_t> predicted = codecs[0]->aggregate_bytes(n, count);
        ASSERT_TRUE(predicted.has_value());
        EXPECT_EQ(*predicted, sum.size());
      }
    }
  }
  for (const char* spec : {"terngrad:pack=entropy", "terngrad:pack=base3", "terngrad:share_scale=0",
                           "server_ef(terngrad:round=nearest)"}) {
    SCOPED_TRACE(spec);
    EXPECT_FALSE(tc::make_codec(spec)->aggregate_bytes(4096, 3).has_value());
  }
  EXPECT_FALSE(tc::make_codec("terngrad")->aggregate_bytes(4096, 0).has_value());
}
