// Nearest rounding (EncodeParams::Rounding::kNearest, spec round=nearest):
// agreement with a float64 reference, contractiveness, the header it writes,
// thread and slice invariance, shared-scale sums, and the reason it exists:
// under error feedback its residual stays bounded where the stochastic
// rule's grows.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <random>
#include <vector>

#include "reference_codec.h"
#include "terngrad/quantize/codec.h"
#include "terngrad/quantize/ternary_sum.h"

namespace tq = terngrad::quantize;

namespace {

std::vector<uint8_t> encode(std::span<const float> x, const tq::EncodeParams& p) {
  std::vector<uint8_t> out(tq::max_encoded_bytes(x.size()));
  EXPECT_EQ(tq::encode(x, p, out), out.size());
  return out;
}

tq::EncodeParams nearest_params(uint64_t seed = 7) {
  tq::EncodeParams p;
  p.rounding = tq::Rounding::kNearest;
  p.seed = seed;
  p.step = 11;
  p.tensor_id = 3;
  return p;
}

uint32_t code_at(const std::vector<uint8_t>& payload, size_t i) {
  return (payload[tq::kHeaderBytes + i / 4] >> (2 * (i % 4))) & 3u;
}

// Every code is the float64 decision |x| >= s or |x| / s > 1/2, except where
// float32 rounding of |x| / s * 2^24 could land on the other side of 2^23.
TEST(NearestEncode, AgreesWithFloat64Reference) {
  for (float clip : {0.0f, 2.5f}) {
    const auto x = tg_test::gradient_like(100003, 8);
    tq::EncodeParams p = nearest_params();
    p.clip_factor = clip;
    const auto payload = encode(x, p);
    const float scale = tq::inspect(payload).scale;
    size_t ambiguous = 0, kept = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double t = tg_test::ref_keep_probability(x[i], scale) * 16777216.0;
      if (std::fabs(t - 8388608.0) < 2.0) {
        ++ambiguous;
        continue;
      }
      const bool keep = t > 8388608.0;
      const uint32_t want = keep ? (x[i] < 0 ? tq::kCodeMinus : tq::kCodePlus) : tq::kCodeZero;
      ASSERT_EQ(code_at(payload, i), want) << "element " << i << " x=" << x[i] << " clip " << clip;
      kept += keep;
    }
    EXPECT_LT(ambiguous, 5u);
    EXPECT_GT(kept, 0u);
  }
}

// quantize/FORMAT.md's worked example under nearest rounding, byte for byte.
TEST(NearestEncode, WorkedExampleBytes) {
  const std::vector<float> g = {0.5f, -1.0f, 0.25f, 0.0f, -0.125f, 2.0f};
  tq::EncodeParams p;
  p.clip_factor = 0.0f;
  p.seed = 42;
  p.step = 7;
  p.tensor_id = 3;
  p.rounding = tq::Rounding::kNearest;
  const std::vector<uint8_t> want = {0x54, 0x47, 0x52, 0x44, 0x01, 0x01, 0x02, 0x28, 0x06, 0x00, 0x00,
                                     0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x40, 0x03, 0x00,
                                     0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x07,
                                     0x00, 0x00, 0x00, 0x8c, 0xfe, 0xda, 0x84, 0x00, 0x04};
  EXPECT_EQ(encode(g, p), want);
}

// |decode(x) - x| <= |x| for every element, and strictly less in total:
// the property error feedback's analysis asks of a compressor.
TEST(NearestEncode, IsContractive) {
  const auto x = tg_test::gradient_like(65536, 4);
  const auto payload = encode(x, nearest_params());
  std::vector<float> y(x.size());
  tq::decode(payload, y);
  double err = 0, norm = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double e = static_cast<double>(x[i]) - y[i];
    ASSERT_LE(std::fabs(e), std::fabs(static_cast<double>(x[i]))) << i;
    err += e * e;
    norm += static_cast<double>(x[i]) * x[i];
  }
  EXPECT_LT(err, 0.9 * norm);
}

// The header says how the codes were chosen; no stream was used, so the
// payload does not depend on the seed and the seed field is 0.
TEST(NearestEncode, HeaderFlagsItAndTheSeedPlaysNoPart) {
  const auto x = tg_test::gradient_like(4099, 5);
  const auto a = encode(x, nearest_params(1));
  const auto b = encode(x, nearest_params(0xFFFFFFFFFFull));
  EXPECT_EQ(a, b);
  const tq::PayloadHeader h = tq::inspect(a);
  EXPECT_TRUE(h.nearest());
  EXPECT_FALSE(h.shared_scale());
  EXPECT_EQ(h.seed, 0u);
  EXPECT_EQ(h.step, 11u);
  EXPECT_FALSE(tq::inspect(encode(x, tq::EncodeParams{})).nearest());
  // Bits 2-7 stay reserved: a payload setting one is refused.
  auto bad = a;
  bad[tq::kHeaderFlagsOffset] |= 0x04;
  tq::store_le32(bad.data() + tq::kHeaderCrcOffset, tq::crc32_ieee(bad.data(), tq::kHeaderCrcOffset));
  EXPECT_THROW(tq::inspect(bad), tq::CodecError);
}

TEST(NearestEncode, BitIdenticalForAnyThreadCountAndSlicing) {
  const auto x = tg_test::gradient_like(1000003, 21);
  const tq::EncodeParams p = nearest_params();
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const auto one = encode(x, p);
  for (int t : {2, 3}) {
    omp_set_num_threads(t);
    EXPECT_EQ(encode(x, p), one) << t << " threads";
  }
  omp_set_num_threads(saved);
  // A slice encoded with the whole tensor's statistics is those bytes of the whole payload.
  const tq::TensorStats stats = tq::compute_stats(x);
  tq::EncodeParams sp = p;
  sp.element_offset = 400000;
  const std::span<const float> slice(x.data() + sp.element_offset, 300001);
  std::vector<uint8_t> part(tq::max_encoded_bytes(slice.size()));
  tq::encode_with_stats(slice, stats, sp, part);
  EXPECT_TRUE(std::equal(part.begin() + tq::kHeaderBytes, part.end(),
                         one.begin() + tq::kHeaderBytes + sp.element_offset / 4));
}

// Shared-scale nearest payloads sum to integer counts like stochastic ones
// (and may be summed with them: the sum reads codes, not how they were chosen).
TEST(NearestEncode, SharedScalePayloadsSumToCounts) {
  std::vector<std::vector<float>> grads;
  float shared = 0;
  for (uint32_t w = 0; w < 3; ++w) {
    grads.push_back(tg_test::gradient_like(10001, 50 + w));
    shared = std::max(shared, tq::local_scale(tq::compute_stats(grads.back()), 2.5f));
  }
  std::vector<std::vector<uint8_t>> payloads;
  for (uint32_t w = 0; w < 3; ++w) {
    tq::EncodeParams p = w == 2 ? tq::EncodeParams{} : nearest_params();
    p.seed = w;
    p.shared_scale = shared;
    payloads.push_back(encode(grads[w], p));
  }
  std::vector<std::span<const uint8_t>> views(payloads.begin(), payloads.end());
  std::vector<uint8_t> sum(tq::sum_payload_bytes(10001, 3));
  tq::sum_payloads(views, sum);
  std::vector<float> decoded(10001), want(10001, 0.0f);
  tq::decode_sum(sum, decoded);
  for (const auto& p : payloads) tq::decode_accumulate(p, want);
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(decoded[i], want[i]) << i;
}

// Error feedback e <- (g + e) - C(g + e) over many steps of Gaussian
// gradients with a few heavy coordinates: the nearest rule keeps the
// residual at the gradient's own size, while the stochastic rule's grows far
// beyond it (the divergence of ef(server_ef(terngrad)) in the codec grid).
TEST(NearestEncode, ErrorFeedbackResidualStaysBoundedUnlikeStochastic) {
  constexpr size_t kN = 8192;
  constexpr int kSteps = 150;
  const auto residual_rms = [&](tq::Rounding rounding) {
    std::mt19937 gen(17);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> e(kN, 0.0f), p(kN), sent(kN);
    std::vector<uint8_t> payload(tq::max_encoded_bytes(kN));
    for (int step = 0; step < kSteps; ++step) {
      for (size_t i = 0; i < kN; ++i) p[i] = normal(gen) * (i < 64 ? 4.0f : 1.0f) + e[i];
      tq::EncodeParams ep;
      ep.rounding = rounding;
      ep.seed = 5;
      ep.step = static_cast<uint32_t>(step);
      tq::encode(p, ep, payload);
      tq::decode(payload, sent);
      for (size_t i = 0; i < kN; ++i) e[i] = p[i] - sent[i];
    }
    double ss = 0;
    for (float v : e) ss += static_cast<double>(v) * v;
    return std::sqrt(ss / kN);  // in units of the gradient's sigma (1)
  };
  const double nearest = residual_rms(tq::Rounding::kNearest);
  const double stochastic = residual_rms(tq::Rounding::kStochastic);
  EXPECT_LT(nearest, 2.0);
  EXPECT_GT(stochastic, 5.0 * nearest);
}

}  // namespace
