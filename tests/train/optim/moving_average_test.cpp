// The moving average of the weights against a float64 reference.
#include <gtest/gtest.h>

#include <cmath>

#include "optim_test_util.h"
#include "terngrad/train/moving_average.h"

namespace tt = terngrad::train;
using namespace optim_test;

TEST(MovingAverage, DecayFollowsNumUpdatesRule) {
  const ParamSet ps = small_model();
  tt::ExponentialMovingAverage ema(ps, 0.9999);
  EXPECT_DOUBLE_EQ(ema.decay_at(0), 0.1);
  EXPECT_DOUBLE_EQ(ema.decay_at(10), 11.0 / 20.0);
  EXPECT_DOUBLE_EQ(ema.decay_at(1000), 1001.0 / 1010.0);
  EXPECT_DOUBLE_EQ(ema.decay_at(1000000), 0.9999);
  tt::ExponentialMovingAverage low(ps, 0.5);
  EXPECT_DOUBLE_EQ(low.decay_at(0), 0.1);
  EXPECT_DOUBLE_EQ(low.decay_at(100), 0.5);
}

TEST(MovingAverage, MatchesReference) {
  ParamSet ps = small_model();
  tt::ExponentialMovingAverage ema(ps, 0.99);
  auto shadow = as_double(ps);  // shadows start at the initial values
  for (int step = 0; step < 300; ++step) {
    // Some parameter trajectory.
    for (size_t i = 0; i < ps.size(); ++i)
      for (float& w : ps.params[i].value.data) w += 0.01f * std::sin(static_cast<float>(step + i));
    ema.update(ps, step);
    const double d = std::min(0.99, (1.0 + step) / (10.0 + step));
    for (size_t i = 0; i < ps.size(); ++i)
      for (size_t j = 0; j < shadow[i].size(); ++j) shadow[i][j] -= (1 - d) * (shadow[i][j] - ps.params[i].value.data[j]);
  }
  auto shadows = ema.shadows();
  ASSERT_EQ(shadows.size(), ps.size());
  for (size_t i = 0; i < ps.size(); ++i)
    for (size_t j = 0; j < shadow[i].size(); ++j)
      ASSERT_NEAR(shadows[i].second->data[j], shadow[i][j], 1e-5) << i << "," << j;
}

TEST(MovingAverage, ShadowNamesAndShapes) {
  const ParamSet ps = small_model();
  tt::ExponentialMovingAverage ema(ps);
  EXPECT_DOUBLE_EQ(ema.decay(), 0.9999);
  auto s = ema.shadows();
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].first, "conv1/weights/ExponentialMovingAverage");
  EXPECT_EQ(s[1].first, "logits/biases/ExponentialMovingAverage");
  EXPECT_EQ(s[0].second->shape, ps.params[0].value.shape);
  EXPECT_EQ(s[0].second->data, ps.params[0].value.data);
}

TEST(MovingAverage, SwapTwiceRestores) {
  ParamSet ps = small_model();
  tt::ExponentialMovingAverage ema(ps, 0.9);
  for (float& w : ps.params[0].value.data) w += 1.0f;
  ema.update(ps, 100);
  const ParamSet trained = ps;
  const std::vector<float> avg = ema.shadows()[0].second->data;
  ema.swap(ps);
  EXPECT_TRUE(ema.swapped());
  EXPECT_EQ(ps.params[0].value.data, avg);
  EXPECT_THROW(ema.update(ps, 101), std::logic_error);
  ema.swap(ps);
  EXPECT_FALSE(ema.swapped());
  for (size_t i = 0; i < ps.size(); ++i) EXPECT_EQ(ps.params[i].value.data, trained.params[i].value.data);
  EXPECT_EQ(ema.shadows()[0].second->data, avg);
}

TEST(MovingAverage, RejectsBadDecayAndMismatchedParams) {
  ParamSet ps = small_model();
  EXPECT_THROW(tt::ExponentialMovingAverage(ps, 1.5), std::invalid_argument);
  EXPECT_THROW(tt::ExponentialMovingAverage(ps, -0.1), std::invalid_argument);
  EXPECT_THROW(tt::ExponentialMovingAverage(ps, NAN), std::invalid_argument);
  tt::ExponentialMovingAverage ema(ps, 0.9);
  ParamSet other = ps;
  other.params[1].value.data.push_back(0.0f);
  EXPECT_THROW(ema.update(other, 0), std::invalid_argument);
  EXPECT_THROW(ema.swap(other), std::invalid_argument);
  other = ps;
  other.params.pop_back();
  EXPECT_THROW(ema.update(other, 0), std::invalid_argument);
}

// update_range() over disjoint ranges covering every parameter (and
// update_variable(), the whole range) is update(), bit for bit.
TEST(MovingAverage, UpdatingRangeByRangeIsUpdateBitForBit) {
  ParamSet ps = small_model();
  ps.add(Param{"fc3/weights", tensor({40001}, normals(40001, 3)), 0.0f, false});  // past the OpenMP size
  tt::ExponentialMovingAverage whole(ps, 0.99), split(ps, 0.99);
  for (int step = 0; step < 20; ++step) {
    for (size_t i = 0; i < ps.size(); ++i)
      for (float& w : ps.params[i].value.data) w += 0.01f * std::sin(static_cast<float>(step + i));
    whole.update(ps, step);
    split.update_range(ps, 2, 33, 40001 - 33, step);
    split.update_range(ps, 2, 0, 33, step);
    split.update_range(ps, 0, 7, 5, step);
    split.update_range(ps, 0, 0, 7, step);
    split.update_variable(ps, 1, step);
  }
  const auto a = whole.shadows(), b = split.shadows();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].second->data, b[i].second->data) << a[i].first;
  EXPECT_THROW(split.update_variable(ps, ps.size(), 0), std::invalid_argument);
  EXPECT_THROW(split.update_range(ps, 1, 4, 2, 0), std::invalid_argument) << "past its 5 elements";
  split.swap(ps);
  EXPECT_THROW(split.update_variable(ps, 0, 0), std::logic_error) << "shadows swapped in";
}
