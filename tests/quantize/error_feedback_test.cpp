// Error feedback fused into the codec's passes (terngrad/quantize/error_feedback.h):
// stats_of_sum() against compute_stats(a + b), encode_error_feedback() against
// encode_with_stats(g + e) and the generic residual 0 - (-p + decode(payload)),
// for every rounding, packing and slice, on whichever SIMD level the suite is
// run under (ctest reruns it with each forced).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "terngrad/quantize/codec.h"
#include "terngrad/quantize/error_feedback.h"

namespace tq = terngrad::quantize;

namespace {

std::vector<float> normal(size_t n, uint64_t seed, float sigma) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

void expect_same_stats(const tq::TensorStats& a, const tq::TensorStats& b) {
  EXPECT_EQ(a.count, b.count);
  EXPECT_TRUE(same_bits(a.max_abs, b.max_abs));
  EXPECT_EQ(std::memcmp(&a.mean, &b.mean, sizeof a.mean), 0);
  EXPECT_EQ(std::memcmp(&a.stddev, &b.stddev, sizeof a.stddev), 0);
}

const size_t kSizes[] = {0, 1, 5, 4095, 4096, 4097, 65537, 300001};

}  // namespace

TEST(FusedErrorFeedback, StatsOfSumAreTheStatisticsOfTheSum) {
  for (size_t n : kSizes) {
    SCOPED_TRACE(n);
    const auto g = normal(n, 1 + n, 0.01f);
    const auto e = normal(n, 2 + n, 0.003f);
    std::vector<float> p(n);
    for (size_t i = 0; i < n; ++i) p[i] = g[i] + e[i];
    expect_same_stats(tq::stats_of_sum(g, e), tq::compute_stats(p));
  }
}

TEST(FusedErrorFeedback, StatsOfSumNameTheFirstNonFiniteElementAndRefuseMismatchedLengths) {
  auto g = normal(9000, 5, 1.0f);
  auto e = normal(9000, 6, 1.0f);
  g[5000] = std::numeric_limits<float>::infinity();
  e[7000] = std::numeric_limits<float>::quiet_NaN();
  try {
    tq::stats_of_sum(g, e);
    FAIL() << "no error";
  } catch (const tq::CodecError& err) {
    EXPECT_EQ(err.code(), tq::Errc::kNonFinite);
    EXPECT_NE(std::string(err.what()).find("element 5000"), std::string::npos) << err.what();
  }
  const std::vector<float> shorter(8999);
  try {
    tq::stats_of_sum(e, shorter);
    FAIL() << "no error";
  } catch (const tq::CodecError& err) {
    EXPECT_EQ(err.code(), tq::Errc::kInvalidArgument);
    EXPECT_NE(std::string(err.what()).find("8999"), std::string::npos) << err.what();
  }
}

// Every rounding and packing, whole tensors and slices: the payload is
// encode_with_stats(g + e)'s, the residual the generic path's floats.
TEST(FusedErrorFeedback, EncodeErrorFeedbackIsTheEncodeOfTheSumAndTheGenericResidual) {
  for (size_t n : kSizes) {
    const auto g = normal(n, 7 + n, 0.01f);
    const auto e0 = normal(n, 8 + n, 0.004f);
    std::vector<float> p(n);
    for (size_t i = 0; i < n; ++i) p[i] = g[i] + e0[i];
    const tq::TensorStats st = tq::compute_stats(p);
    for (tq::Rounding r : {tq::Rounding::kStochastic, tq::Rounding::kNearest}) {
      for (tq::Packing pk : {tq::Packing::k2Bit, tq::Packing::kBase3, tq::Packing::kEntropy}) {
        for (bool shared : {false, true}) {
          // The whole tensor, and (n large enough) a slice starting at 4096.
          for (uint64_t begin : {uint64_t{0}, uint64_t{4096}}) {
            if (begin > n) continue;
            SCOPED_TRACE(::testing::Message() << "n " << n << " rounding " << int(r) << " packing "
                                              << tq::packing_name(pk) << " shared " << shared << " begin " << begin);
            tq::EncodeParams prm;
            prm.rounding = r;
            prm.packing = pk;
            prm.seed = 99;
            prm.step = 4;
            prm.tensor_id = 2;
            prm.element_offset = begin;
            if (shared) prm.shared_scale = 1.25f * tq::local_scale(st, prm.clip_factor);
            const size_t m = n - begin;
            const std::span<const float> x(p.data() + begin, m);
            std::vector<uint8_t> want(tq::max_encoded_bytes(m, pk)), got(want.size());
            const size_t want_len = tq::encode_with_stats(x, st, prm, want);
            std::vector<float> residual(e0.begin() + begin, e0.end());
            const size_t got_len =
                tq::encode_error_feedback(std::span<const float>(g).subspan(begin), residual, st, prm, got);
            ASSERT_EQ(got_len, want_len);
            ASSERT_TRUE(std::equal(got.begin(), got.begin() + got_len, want.begin()));
            std::vector<float> generic(m);
            for (size_t i = 0; i < m; ++i) generic[i] = -x[i];
            tq::decode_accumulate(std::span<const uint8_t>(want).first(want_len), generic);
            for (size_t i = 0; i < m; ++i) {
              const float e = 0.0f - generic[i];
              ASSERT_TRUE(same_bits(residual[i], e)) << i << ": " << residual[i] << " vs " << e;
            }
          }
        }
      }
    }
  }
}

TEST(FusedErrorFeedback, EncodeErrorFeedbackChecksBeforeWriting) {
  const auto g = normal(1000, 11, 1.0f);
  const tq::TensorStats st = tq::compute_stats(g);
  tq::EncodeParams prm;
  std::vector<uint8_t> out(tq::max_encoded_bytes(g.size()));
  std::vector<float> shorter(999, 5.0f);
  EXPECT_THROW(tq::encode_error_feedback(g, shorter, st, prm, out), tq::CodecError);
  for (float v : shorter) ASSERT_EQ(v, 5.0f);
  std::vector<float> aliased = g;
  EXPECT_THROW(tq::encode_error_feedback(aliased, aliased, st, prm, out), tq::CodecError);
  std::vector<uint8_t> small(out.size() - 1);
  std::vector<float> residual(g.size(), 5.0f);
  EXPECT_THROW(tq::encode_error_feedback(g, residual, st, prm, small), tq::CodecError);
  for (float v : residual) ASSERT_EQ(v, 5.0f);
  tq::EncodeParams bad = prm;
  bad.shared_scale = -1.0f;
  EXPECT_THROW(tq::encode_error_feedback(g, residual, st, bad, out), tq::CodecError);
  for (float v : residual) ASSERT_EQ(v, 5.0f);
}
