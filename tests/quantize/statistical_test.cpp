// The statistical contract of TernGrad, checked against float64 theory:
// E[decode(encode(g))] = clip(g) (unbiased) and
// Var[decode(encode(g))_i] = s*|clip(g_i)| - clip(g_i)^2.
// Both random streams (format versions 1 and 2) are checked. Seeds are
// fixed, so the bounds below are deterministic; they are set at about 5.5
// standard errors, where a correct codec fails with probability below 1e-4
// over the whole test.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include "reference_codec.h"
#include "terngrad/quantize/codec.h"

namespace tq = terngrad::quantize;

namespace {

struct Moments {
  std::vector<double> mean, var;
  float scale = 0;
  std::vector<double> clipped;
};

Moments decode_moments(const std::vector<float>& x, float clip, int trials, tq::RandomStream stream) {
  const size_t n = x.size();
  Moments m;
  m.mean.assign(n, 0.0);
  m.var.assign(n, 0.0);
  std::vector<uint8_t> payload(tq::max_encoded_bytes(n));
  std::vector<float> out(n);
  std::vector<double> sq(n, 0.0);
  for (int t = 0; t < trials; ++t) {
    tq::EncodeParams p;
    p.clip_factor = clip;
    p.seed = 1000 + t;
    p.step = static_cast<uint32_t>(t);
    p.stream = stream;
    tq::encode(x, p, payload);
    tq::decode(payload, out);
    for (size_t i = 0; i < n; ++i) {
      m.mean[i] += out[i];
      sq[i] += static_cast<double>(out[i]) * out[i];
    }
  }
  m.scale = tq::inspect(payload).scale;
  for (size_t i = 0; i < n; ++i) {
    m.mean[i] /= trials;
    m.var[i] = sq[i] / trials - m.mean[i] * m.mean[i];
  }
  for (float v : x) m.clipped.push_back(std::clamp<double>(v, -m.scale, m.scale));
  return m;
}

class Unbiased : public ::testing::TestWithParam<std::tuple<float, tq::RandomStream>> {};

TEST_P(Unbiased, MeanOfDecodesConvergesToClippedInput) {
  const auto [clip, stream] = GetParam();
  const int trials = 2000;
  const auto x = tg_test::gradient_like(2048, 42);
  const Moments m = decode_moments(x, clip, trials, stream);
  double chi2 = 0;
  size_t dof = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double g = m.clipped[i];
    const double theory_var = m.scale * std::fabs(g) - g * g;
    if (theory_var <= 0) {
      ASSERT_EQ(m.mean[i], g) << "deterministic element " << i;
      continue;
    }
    const double se = std::sqrt(theory_var / trials);
    ASSERT_LT(std::fabs(m.mean[i] - g), 5.5 * se) << "element " << i << " g=" << g;
    chi2 += (m.mean[i] - g) * (m.mean[i] - g) / (se * se);
    ++dof;
  }
  // Sum of squared z-scores ~ chi-square(dof): mean dof, sd sqrt(2 dof).
  EXPECT_LT(std::fabs(chi2 - dof), 5.5 * std::sqrt(2.0 * dof)) << "chi2 " << chi2 << " dof " << dof;
}

INSTANTIATE_TEST_SUITE_P(ClipFactorsAndStreams, Unbiased,
                         ::testing::Combine(::testing::Values(0.0f, 2.5f),
                                            ::testing::Values(tq::RandomStream::kPhilox10Word32,
                                                              tq::RandomStream::kPhilox7Half16)));

// Version 2's bias bound, exactly: over all 2^16 halves h, the fraction that
// keep an element (ternary_code() with half_word(h)) is within 2^-17 of
// p = a / s (plus 2^-23 for the float32 rounding of t = p * 2^24), for
// probabilities spread over (0, 1) and near the cell edges.
TEST(HalfStream, KeepProbabilityIsWithinTwoToMinus17OfP) {
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> unif(0.0f, 1.0f);
  for (float s : {1.0f, 0.37f, 3e-30f}) {
    const tq::TernaryQuantizer q = tq::make_quantizer(s);
    double worst = 0.0;
    for (int trial = 0; trial < 160; ++trial) {
      float p = unif(gen);
      if (trial % 4 == 1) p = static_cast<float>(trial) / 65536.0f;             // on a cell edge
      if (trial % 4 == 2) p = (static_cast<float>(trial) + 0.5f) / 65536.0f;  // a cell's midpoint
      if (trial % 4 == 3) p = static_cast<float>(trial) * 1e-7f;               // below a cell
      const float x = p * s;
      uint32_t kept = 0;
      for (uint32_t h = 0; h < 65536; ++h) kept += tq::ternary_code(x, q, tq::half_word(h)) != 0;
      const double err = std::fabs(kept / 65536.0 - static_cast<double>(x) / s);
      worst = std::max(worst, err);
      ASSERT_LE(err, 0x1p-17 + 0x1p-23) << "s=" << s << " p=" << p << " kept " << kept;
    }
    std::printf("s=%g: worst |P(keep) - p| = %.3g (bound 2^-17 = %.3g)\n", s, worst, 0x1p-17);
  }
}

TEST(Variance, MatchesFormula) {
  const int trials = 2000;
  const auto x = tg_test::gradient_like(2048, 43);
  for (tq::RandomStream stream : {tq::RandomStream::kPhilox10Word32, tq::RandomStream::kPhilox7Half16}) {
  const Moments m = decode_moments(x, 2.5f, trials, stream);
  double measured = 0, theory = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double g = m.clipped[i];
    measured += m.var[i];
    theory += m.scale * std::fabs(g) - g * g;
  }
  // The total variance sums ~2048 independent estimates: relative error ~ 1/sqrt(trials).
  EXPECT_NEAR(measured / theory, 1.0, 0.03) << "measured " << measured << " theory " << theory << " "
                                             << tq::random_stream_name(stream);
  }
}

TEST(Clipping, ScaleIsCTimesSigmaAndClipsBeyondIt) {
  auto x = tg_test::gradient_like(100000, 44);
  const auto ref = tg_test::ref_stats(x);
  std::vector<uint8_t> payload(tq::max_encoded_bytes(x.size()));
  tq::EncodeParams p;
  p.clip_factor = 2.5f;
  tq::encode(x, p, payload);
  const float s = tq::inspect(payload).scale;
  EXPECT_NEAR(s, 2.5 * ref.stddev, 1e-6 * s);
  EXPECT_LT(s, ref.max_abs);
  std::vector<float> out(x.size());
  tq::decode(payload, out);
  size_t beyond = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::fabs(x[i]) >= s) {
      ++beyond;
      ASSERT_EQ(out[i], std::copysign(s, x[i])) << i;
    }
  }
  EXPECT_GT(beyond, 100u);
}

}  // namespace
