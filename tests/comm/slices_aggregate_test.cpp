// encode_slices and aggregate/decode_aggregate, for every built-in codec:
// slices decode to the whole variable's decoding whatever the cuts, and the
// server-side sum decodes to the sum of the workers' decodings (float64
// reference), in the compact form where the codec has one.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "codec_test_util.h"
#include "terngrad/comm/gradient_codec.h"
#include "terngrad/quantize/ternary_sum.h"

namespace tc = terngrad::comm;
using codec_test::normal_floats;

namespace {

std::vector<float> decode_slices(tc::GradientCodec& c, const std::vector<float>& g, const tc::EncodeContext& ctx,
                                 const std::vector<uint64_t>& cuts) {
  std::vector<tc::ElementRange> slices;
  std::vector<std::vector<uint8_t>> bufs;
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    slices.push_back({cuts[i], cuts[i + 1] - cuts[i]});
    bufs.emplace_back(c.payload_bytes(slices.back().count));
  }
  std::vector<std::span<uint8_t>> outs(bufs.begin(), bufs.end());
  if (c.wants_shared_scale()) c.local_scale(g);
  c.encode_slices(g, ctx, slices, outs);
  std::vector<float> out(g.size(), -7.0f);
  for (size_t i = 0; i < slices.size(); ++i)
    c.decode(bufs[i], std::span<float>(out).subspan(slices[i].begin, slices[i].count));
  return out;
}

class EveryCodec : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryCodec, SlicesDecodeToTheWholeVariable) {
  const auto g = normal_floats(70001, 3, 1e-3f);
  tc::EncodeContext ctx;
  ctx.seed = 5;
  ctx.step = 12;
  ctx.tensor_id = 2;
  auto c = tc::make_codec(GetParam());
  if (c->wants_shared_scale()) ctx.shared_scale = c->local_scale(g);
  const auto whole = decode_slices(*c, g, ctx, {0, g.size()});
  for (const auto& cuts : std::vector<std::vector<uint64_t>>{{0, 4, 70001}, {0, 35000, 35004, 70001}, {0, 64, 128, 70001}}) {
    const auto sliced = decode_slices(*c, g, ctx, cuts);
    for (size_t i = 0; i < g.size(); ++i) ASSERT_TRUE(codec_test::same_bits(whole[i], sliced[i])) << i;
  }
}

TEST_P(EveryCodec, BadSlicesAreRefused) {
  auto c = tc::make_codec(GetParam());
  const auto g = normal_floats(100, 4);
  std::vector<uint8_t> buf(c->payload_bytes(100));
  const std::span<uint8_t> outs[1] = {buf};
  const tc::ElementRange unaligned[1] = {{2, 10}}, outside[1] = {{96, 8}};
  EXPECT_THROW(c->encode_slices(g, {}, unaligned, outs), std::invalid_argument);
  EXPECT_THROW(c->encode_slices(g, {}, outside, outs), std::invalid_argument);
  std::vector<uint8_t> small(c->payload_bytes(10) - 1);
  const std::span<uint8_t> small_outs[1] = {small};
  const tc::ElementRange ok[1] = {{0, 10}};
  EXPECT_THROW(c->encode_slices(g, {}, ok, small_outs), std::invalid_argument);
}

TEST_P(EveryCodec, AggregateDecodesToTheSumOfTheWorkersDecodings) {
  const size_t n = 20011;
  for (int workers : {1, 2, 3, 8}) {
    SCOPED_TRACE(std::to_string(workers) + " workers");
    std::vector<std::unique_ptr<tc::GradientCodec>> codecs;
    std::vector<std::vector<float>> grads;
    float shared = 0.0f;
    for (int w = 0; w < workers; ++w) {
      codecs.push_back(tc::make_codec(GetParam()));
      grads.push_back(normal_floats(n, 100 + w, 1e-3f * (1 + w)));
      if (codecs[w]->wants_shared_scale()) shared = std::max(shared, codecs[w]->local_scale(grads[w]));
    }
    std::vector<std::vector<uint8_t>> payloads;
    std::vector<double> ref(n, 0.0);
    std::vector<float> ordered(n, 0.0f);  // float32 sum in worker order
    for (int w = 0; w < workers; ++w) {
      tc::EncodeContext ctx;
      ctx.seed = 1000 + w;
      if (codecs[w]->wants_shared_scale()) ctx.shared_scale = shared;
      payloads.push_back(codec_test::encode(*codecs[w], grads[w], ctx));
      std::vector<float> d(n);
      codecs[w]->decode(payloads.back(), d);
      for (size_t i = 0; i < n; ++i) ref[i] += d[i];
      codecs[w]->decode_accumulate(payloads.back(), ordered);
    }
    std::vector<std::span<const uint8_t>> views(payloads.begin(), payloads.end());
    std::vector<uint8_t> agg;
    codecs[0]->aggregate(views, n, agg);
    std::vector<float> out(n);
    codecs[0]->decode_aggregate(agg, out);
    const bool counts = codecs[0]->wants_shared_scale();
    for (size_t i = 0; i < n; ++i) {
      // Shared-scale ternary: the exact sum (small integer times one float) rounded once.
      // Otherwise: the float32 sum in worker order.
      const float want = counts ? static_cast<float>(ref[i]) : ordered[i];
      ASSERT_TRUE(codec_test::same_bits(want, out[i])) << i << ": " << want << " vs " << out[i];
    }
    if (counts) {
      const size_t expect = workers == 1 ? terngrad::quantize::max_encoded_bytes(n)
                                         : terngrad::quantize::sum_payload_bytes(n, workers);
      EXPECT_EQ(agg.size(), expect) << "shared-scale sums travel as counts";
    }
  }
}

TEST_P(EveryCodec, AggregateRefusesMalformedPayloads) {
  auto c = tc::make_codec(GetParam());
  const auto g = normal_floats(1000, 9);
  if (c->wants_shared_scale()) c->local_scale(g);
  tc::EncodeContext ctx;
  if (c->wants_shared_scale()) ctx.shared_scale = 10.0f;
  auto good = codec_test::encode(*c, g, ctx);
  auto bad = good;
  bad.resize(bad.size() - 1);
  std::vector<std::span<const uint8_t>> views = {good, bad};
  std::vector<uint8_t> agg;
  EXPECT_ANY_THROW(c->aggregate(views, g.size(), agg));
  std::vector<float> out(g.size());
  EXPECT_ANY_THROW(c->decode_aggregate(bad, out));
}

INSTANTIATE_TEST_SUITE_P(Codecs, EveryCodec,
                         ::testing::Values("fp32", "fp16", "terngrad:clip=2.5,share_scale=1",
                                           "terngrad:clip=2.5,share_scale=0", "terngrad:clip=0,share_scale=1",
                                           "terngrad:clip=2.5,share_scale=0,bucket=512",
                                           "terngrad:clip=0,share_scale=0,bucket=4"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& ch : s)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s;
                         });

TEST(TernGradAggregate, MismatchedScalesFallBackToTheFloatSum) {
  auto c = tc::make_codec("terngrad");
  const size_t n = 999;
  std::vector<std::vector<uint8_t>> payloads;
  std::vector<float> ordered(n, 0.0f);
  for (int w = 0; w < 3; ++w) {
    const auto g = normal_floats(n, 50 + w);
    tc::EncodeContext ctx;
    ctx.seed = w;
    ctx.shared_scale = c->local_scale(g) * (1.0f + w);  // a late worker's larger scale
    payloads.push_back(codec_test::encode(*c, g, ctx));
    c->decode_accumulate(payloads.back(), ordered);
  }
  std::vector<std::span<const uint8_t>> views(payloads.begin(), payloads.end());
  std::vector<uint8_t> agg;
  c->aggregate(views, n, agg);
  EXPECT_EQ(agg.size(), tc::make_codec("fp32")->payload_bytes(n));
  std::vector<float> out(n);
  c->decode_aggregate(agg, out);
  for (size_t i = 0; i < n; ++i) ASSERT_TRUE(codec_test::same_bits(ordered[i], out[i])) << i;
}

}  // namespace
