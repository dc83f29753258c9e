// Statistics pass against the float64 reference, and its determinism.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "reference_codec.h"
#include "terngrad/quantize/codec.h"
#include "terngrad/quantize/cpu_features.h"

namespace tq = terngrad::quantize;

namespace {

TEST(Stats, MatchesFloat64Reference) {
  for (size_t n : {1u, 3u, 31u, 32u, 33u, 4095u, 4096u, 4097u, 100000u, 1000003u}) {
    const auto x = tg_test::gradient_like(n, static_cast<uint32_t>(n));
    const auto ref = tg_test::ref_stats(x);
    const auto st = tq::compute_stats(x);
    EXPECT_EQ(st.count, n);
    EXPECT_NEAR(st.mean, ref.mean, 1e-12 * (std::fabs(ref.mean) + ref.stddev)) << n;
    EXPECT_NEAR(st.stddev, ref.stddev, 1e-9 * ref.stddev + 1e-30) << n;
    EXPECT_EQ(static_cast<double>(st.max_abs), ref.max_abs) << n;
  }
}

TEST(Stats, EmptyAndZeroTensors) {
  const auto empty = tq::compute_stats(std::span<const float>{});
  EXPECT_EQ(empty.count, 0u);
  EXPECT_EQ(empty.max_abs, 0.0f);
  const std::vector<float> zeros(1001, 0.0f);
  const auto z = tq::compute_stats(zeros);
  EXPECT_EQ(z.mean, 0.0);
  EXPECT_EQ(z.stddev, 0.0);
  EXPECT_EQ(z.max_abs, 0.0f);
  EXPECT_EQ(tq::local_scale(z, 2.5f), 0.0f);
}

TEST(Stats, NonFiniteInputNamesTheElement) {
  for (float bad : {NAN, INFINITY, -INFINITY}) {
    auto x = tg_test::gradient_like(300000, 7);
    x[123457] = bad;
    try {
      tq::compute_stats(x);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const tq::CodecError& e) {
      EXPECT_EQ(e.code(), tq::Errc::kNonFinite);
      EXPECT_NE(std::string(e.what()).find("element 123457"), std::string::npos) << e.what();
    }
  }
}

TEST(Stats, BitIdenticalForAnyThreadCountAndSimdWidth) {
  const auto x = tg_test::gradient_like(3 * 1000003, 11);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const auto one = tq::compute_stats(x);
  for (int t : {2, 3, 4, 7}) {
    omp_set_num_threads(t);
    const auto st = tq::compute_stats(x);
    EXPECT_EQ(st.mean, one.mean) << t << " threads";
    EXPECT_EQ(st.stddev, one.stddev) << t << " threads";
  }
  omp_set_num_threads(saved);
  const bool simd = tq::cpu_simd_active();
  tq::set_cpu_simd(false);
  const auto portable = tq::compute_stats(x);
  tq::set_cpu_simd(simd);
  EXPECT_EQ(portable.mean, one.mean);
  EXPECT_EQ(portable.stddev, one.stddev);
  EXPECT_EQ(portable.max_abs, one.max_abs);
}

TEST(Stats, ScaleRule) {
  tq::TensorStats st;
  st.count = 10;
  st.stddev = 0.1;
  st.max_abs = 1.0f;
  EXPECT_FLOAT_EQ(tq::local_scale(st, 2.5f), 0.25f);  // clipped: c * sigma < max
  EXPECT_EQ(tq::local_scale(st, 0.0f), 1.0f);         // no clipping
  EXPECT_EQ(tq::local_scale(st, 20.0f), 1.0f);        // c * sigma > max: max
  st.stddev = 0.0;                                    // constant tensor keeps max|g|
  EXPECT_EQ(tq::local_scale(st, 2.5f), 1.0f);
  for (float bad : {-1.0f, NAN, INFINITY}) {
    EXPECT_THROW(tq::local_scale(st, bad), tq::CodecError) << bad;
  }
}

}  // namespace
