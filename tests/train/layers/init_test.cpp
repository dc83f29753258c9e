// tf.truncated_normal-style initialization and tensor helpers.
#include <gtest/gtest.h>

#include <cmath>

#include "terngrad/train/layers.h"

namespace terngrad::train {
namespace {

TEST(TruncatedNormal, StaysWithinTwoStddevWithTheTruncatedMoments) {
  std::vector<float> v(200000);
  std::mt19937_64 rng(42);
  const float stddev = 0.05f;
  truncated_normal_fill(v, stddev, rng);
  double sum = 0, sq = 0;
  for (float x : v) {
    ASSERT_LE(std::fabs(x), 2 * stddev);
    sum += x;
    sq += static_cast<double>(x) * x;
  }
  const double mean = sum / v.size(), sd = std::sqrt(sq / v.size() - mean * mean);
  // A normal truncated at +-2 sigma keeps 0.8796 of sigma as its stddev.
  EXPECT_NEAR(mean, 0.0, 5 * 0.88 * stddev / std::sqrt(v.size()));
  EXPECT_NEAR(sd / stddev, 0.8796, 0.005);
  // Not clipped: values pile up at the edge only as the density does.
  int64_t near_edge = 0;
  for (float x : v) near_edge += std::fabs(x) > 1.99f * stddev;
  EXPECT_LT(near_edge, static_cast<int64_t>(v.size() / 500));
}

TEST(TruncatedNormal, SameSeedSameValues) {
  std::vector<float> a(1001), b(1001);
  std::mt19937_64 r1(7), r2(7);
  truncated_normal_fill(a, 1.0f, r1);
  truncated_normal_fill(b, 1.0f, r2);
  EXPECT_EQ(a, b);
}

TEST(Tensor, NumelAndShapeString) {
  EXPECT_EQ(numel({64, 28, 28, 1}), 64 * 28 * 28);
  EXPECT_EQ(numel({}), 1);
  EXPECT_EQ(numel({3, 0}), 0);
  EXPECT_EQ(shape_string({64, 28, 28, 1}), "[64, 28, 28, 1]");
  EXPECT_EQ(shape_string({}), "[]");
  EXPECT_THROW(numel({2, -1}), std::invalid_argument);
}

}  // namespace
}  // namespace terngrad::train
