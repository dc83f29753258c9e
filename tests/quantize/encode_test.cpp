// Encode: agreement with the float64 reference, clipping, exact round trip
// of ternary inputs, edge sizes, determinism, scale sharing and input errors.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "reference_codec.h"
#include "terngrad/quantize/codec.h"
#include "terngrad/quantize/cpu_features.h"

namespace tq = terngrad::quantize;

namespace {

std::vector<uint8_t> encode(const std::vector<float>& x, const tq::EncodeParams& p) {
  std::vector<uint8_t> out(tq::max_encoded_bytes(x.size()));
  EXPECT_EQ(tq::encode(x, p, out), out.size());
  return out;
}

uint32_t code_at(const std::vector<uint8_t>& payload, size_t i) {
  return (payload[tq::kHeaderBytes + i / 4] >> (2 * (i % 4))) & 3u;
}

// Every element's code agrees with the float64 decision u24 < p * 2^24,
// except where float32 rounding of p * 2^24 could flip it (|u - t| < 2).
TEST(Encode, AgreesWithFloat64Reference) {
  for (auto [clip, stream] : {std::pair{0.0f, tq::RandomStream::kPhilox10Word32},
                              std::pair{2.5f, tq::RandomStream::kPhilox10Word32},
                              std::pair{0.0f, tq::RandomStream::kPhilox7Half16},
                              std::pair{2.5f, tq::RandomStream::kPhilox7Half16}}) {
    const auto x = tg_test::gradient_like(200003, 5);
    tq::EncodeParams p;
    p.clip_factor = clip;
    p.stream = stream;
    p.seed = 0x1234567890ull;
    p.step = 17;
    p.tensor_id = 4;
    const auto payload = encode(x, p);
    const auto ref = tg_test::ref_stats(x);
    const double s = clip > 0 ? std::min(ref.max_abs, clip * ref.stddev) : ref.max_abs;
    const float scale = tq::inspect(payload).scale;
    EXPECT_NEAR(scale, s, 1e-6 * s);
    size_t ambiguous = 0, kept = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double t = tg_test::ref_keep_probability(x[i], scale) * 16777216.0;
      const double u = tg_test::ref_uniform24(p.seed, p.step, p.tensor_id, i, stream);
      const uint32_t c = code_at(payload, i);
      if (std::fabs(u - t) < 2.0 && t < 16777216.0) {
        ++ambiguous;
        continue;
      }
      const bool keep = std::fabs(x[i]) > 0 && (t >= 16777216.0 || u < t);
      const uint32_t want = keep ? (x[i] < 0 ? tq::kCodeMinus : tq::kCodePlus) : tq::kCodeZero;
      ASSERT_EQ(c, want) << "element " << i << " x=" << x[i] << " clip " << clip << " stream "
                         << tq::random_stream_name(stream);
      kept += keep;
    }
    EXPECT_LT(ambiguous, 5u);
    EXPECT_GT(kept, 0u);
  }
}

TEST(Encode, ClippedElementsAlwaysBecomePlusMinusScale) {
  auto x = tg_test::gradient_like(50000, 9);
  x[10] = 1.0f;  // far beyond 2.5 sigma
  x[20] = -1.0f;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    tq::EncodeParams p;
    p.seed = seed;
    const auto payload = encode(x, p);
    EXPECT_EQ(code_at(payload, 10), tq::kCodePlus);
    EXPECT_EQ(code_at(payload, 20), tq::kCodeMinus);
    std::vector<float> out(x.size());
    tq::decode(payload, out);
    const float s = tq::inspect(payload).scale;
    EXPECT_LT(s, 0.1f);  // 2.5 sigma, inflated by the outliers, still far below them
    for (float v : out) ASSERT_TRUE(v == 0.0f || v == s || v == -s);
  }
}

TEST(Encode, TernaryInputRoundTripsExactly) {
  std::vector<float> x(10007);
  for (size_t i = 0; i < x.size(); ++i) x[i] = (i % 3 == 0) ? 0.375f : (i % 3 == 1 ? -0.375f : 0.0f);
  for (float clip : {0.0f, 2.5f}) {  // dense ternary: 2.5 sigma > 0.375, nothing clips
    for (uint64_t seed : {1u, 2u, 3u}) {
      tq::EncodeParams p;
      p.clip_factor = clip;
      p.seed = seed;
      std::vector<float> out(x.size());
      tq::decode(encode(x, p), out);
      EXPECT_EQ(out, x) << "clip " << clip << " seed " << seed;
    }
  }
}

TEST(Encode, EdgeSizesAndZeros) {
  tq::EncodeParams p;
  const auto empty = encode({}, p);
  EXPECT_EQ(empty.size(), tq::kHeaderBytes);
  EXPECT_EQ(tq::inspect(empty).count, 0u);
  for (size_t n : {1u, 2u, 3u, 5u, 7u, 63u, 65u, 129u}) {
    const std::vector<float> zeros(n, 0.0f);
    const auto z = encode(zeros, p);
    EXPECT_EQ(tq::inspect(z).scale, 0.0f);
    for (size_t k = tq::kHeaderBytes; k < z.size(); ++k) EXPECT_EQ(z[k], 0) << n;
    std::vector<float> out(n, 5.0f);
    tq::decode(z, out);
    for (float v : out) EXPECT_EQ(v, 0.0f);
    // A single nonzero element: constant tensor, s = |x|, decodes exactly.
    std::vector<float> one(n, 0.0f);
    one[n - 1] = -0.5f;
    if (n == 1) {
      tq::decode(encode(one, p), out);
      EXPECT_EQ(out[0], -0.5f);
    }
  }
}

TEST(Encode, PortableAndSimdKernelsAgreeForAllAlignments) {
  const auto base = tg_test::gradient_like(70001, 3);
  for (size_t offset : {0u, 1u, 2u, 3u}) {
    const std::vector<float> x(base.begin() + offset, base.end());
    tq::EncodeParams p;
    p.seed = 77;
    p.step = 1;
    const auto simd = encode(x, p);
    const bool was = tq::cpu_simd_active();
    tq::set_cpu_simd(false);
    const auto portable = encode(x, p);
    tq::set_cpu_simd(was);
    EXPECT_EQ(simd, portable) << "offset " << offset;
  }
}

TEST(Encode, BitIdenticalForAnyThreadCount) {
  const auto x = tg_test::gradient_like(1000003, 21);
  tq::EncodeParams p;
  p.seed = 5;
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const auto one = encode(x, p);
  for (int t : {2, 3, 8}) {
    omp_set_num_threads(t);
    EXPECT_EQ(encode(x, p), one) << t << " threads";
  }
  omp_set_num_threads(saved);
}

TEST(Encode, RandomStreamDependsOnSeedStepAndTensor) {
  const auto x = tg_test::gradient_like(4096, 1);
  tq::EncodeParams p;
  const auto base = encode(x, p);
  for (int field = 0; field < 3; ++field) {
    tq::EncodeParams q = p;
    if (field == 0) q.seed = 1;
    if (field == 1) q.step = 1;
    if (field == 2) q.tensor_id = 1;
    const auto other = encode(x, q);
    EXPECT_FALSE(std::equal(base.begin() + tq::kHeaderBytes, base.end(), other.begin() + tq::kHeaderBytes))
        << "field " << field;
  }
}

TEST(Encode, SharedScaleSumsToIntegerCounts) {
  std::vector<std::vector<float>> workers;
  float shared = 0.0f;
  for (uint32_t w = 0; w < 4; ++w) {
    workers.push_back(tg_test::gradient_like(10001, 100 + w, 1e-3f * (w + 1)));
    shared = std::max(shared, tq::local_scale(tq::compute_stats(workers.back()), 2.5f));
  }
  std::vector<std::vector<uint8_t>> payloads;
  for (uint32_t w = 0; w < 4; ++w) {
    tq::EncodeParams p;
    p.seed = w;
    p.shared_scale = shared;
    payloads.push_back(encode(workers[w], p));
    EXPECT_TRUE(tq::inspect(payloads.back()).shared_scale());
  }
  std::vector<std::span<const uint8_t>> views(payloads.begin(), payloads.end());
  std::vector<int16_t> counts(10001);
  EXPECT_EQ(tq::sum_shared(views, counts), shared);
  std::vector<float> sum(10001, 0.0f);
  for (const auto& p : payloads) tq::decode_accumulate(p, sum);
  for (size_t i = 0; i < counts.size(); ++i) {
    ASSERT_LE(std::abs(counts[i]), 4);
    ASSERT_EQ(sum[i], shared * counts[i]) << i;  // exact: integer multiples of one scale
  }
}

TEST(Encode, RejectsBadArguments) {
  const auto x = tg_test::gradient_like(1000, 2);
  std::vector<uint8_t> small(tq::max_encoded_bytes(x.size()) - 1);
  try {
    tq::encode(x, {}, small);
    ADD_FAILURE();
  } catch (const tq::CodecError& e) {
    EXPECT_EQ(e.code(), tq::Errc::kBufferTooSmall);
  }
  std::vector<uint8_t> out(tq::max_encoded_bytes(x.size()), 0xAB);
  tq::EncodeParams p;
  p.shared_scale = 1e-9f;  // below the tensor's own scale
  try {
    tq::encode(x, p, out);
    ADD_FAILURE();
  } catch (const tq::CodecError& e) {
    EXPECT_EQ(e.code(), tq::Errc::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("shared_scale"), std::string::npos);
  }
  for (float bad : {NAN, -1.0f, -0.0f, INFINITY}) {
    p.shared_scale = bad;
    EXPECT_THROW(tq::encode(x, p, out), tq::CodecError);
  }
  p.shared_scale.reset();
  p.clip_factor = -2.0f;
  EXPECT_THROW(tq::encode(x, p, out), tq::CodecError);
  for (uint8_t b : out) ASSERT_EQ(b, 0xAB) << "encode wrote output before failing";
  auto bad_x = x;
  bad_x[999] = NAN;
  EXPECT_THROW(tq::encode(bad_x, {}, out), tq::CodecError);
}

}  // namespace
