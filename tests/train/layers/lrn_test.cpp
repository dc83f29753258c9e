// LocalResponseNorm against tf.nn.local_response_normalization's formula in
// float64 (forward and numerical dx).
#include <gtest/gtest.h>

#include "reference.h"
#include "terngrad/train/layers.h"

namespace terngrad::train {
namespace {

using testing::Vec;

struct LrnCase {
  const char* label;
  int64_t c, radius;
  float bias, alpha, beta;
  double input_scale;  // inputs uniform in [-scale, scale]
};

std::ostream& operator<<(std::ostream& os, const LrnCase& c) { return os << c.label; }

class LrnGradient : public ::testing::TestWithParam<LrnCase> {};

TEST_P(LrnGradient, ForwardAndBackwardMatchFloat64Reference) {
  const LrnCase c = GetParam();
  const LocalResponseNorm lrn(
      LocalResponseNormConfig{.name = "norm", .depth_radius = c.radius, .bias = c.bias, .alpha = c.alpha, .beta = c.beta});
  ParamSet params;
  std::mt19937_64 rng(17);
  const Tensor x = testing::random_tensor({2, 3, 2, c.c}, rng, -c.input_scale, c.input_scale);
  testing::check_layer(lrn, params, {}, x,
                       [&](const Vec& xv, const std::vector<Vec>&) {
                         return testing::ref_lrn(xv, c.c, c.radius, c.bias, c.alpha, c.beta);
                       },
                       testing::GradCheck{});
}

INSTANTIATE_TEST_SUITE_P(
    Configs, LrnGradient,
    ::testing::Values(
        // CifarNet's LRN; inputs of post-ReLU size so the sum term matters.
        LrnCase{"cifarnet", 16, 4, 1.0f, 0.001f / 9.0f, 0.75f, 12.0},
        LrnCase{"strong_alpha", 7, 2, 2.0f, 0.5f, 0.75f, 1.5},
        LrnCase{"beta_half", 6, 1, 1.0f, 0.3f, 0.5f, 1.5},
        LrnCase{"general_beta", 5, 1, 1.5f, 0.4f, 0.6f, 1.5},
        LrnCase{"window_covers_all", 4, 8, 1.0f, 0.2f, 0.75f, 1.5},
        LrnCase{"radius_zero", 5, 0, 1.0f, 0.7f, 0.75f, 1.5}),
    [](const ::testing::TestParamInfo<LrnCase>& info) { return std::string(info.param.label); });

TEST(LocalResponseNorm, AlphaIsNotDividedByTheWindow) {
  // One pixel, channels (1, 2, 3), radius 1: channel 1's window is all three.
  const LocalResponseNorm lrn(LocalResponseNormConfig{.name = "norm", .depth_radius = 1, .bias = 1.0f, .alpha = 0.1f, .beta = 1.0f});
  Tensor x({1, 1, 1, 3});
  x.data = {1, 2, 3};
  auto scratch = lrn.make_scratch();
  Tensor y;
  lrn.forward(ParamSet{}, x, y, scratch.get(), ForwardContext{});
  EXPECT_FLOAT_EQ(y.data[0], 1.0f / (1.0f + 0.1f * 5.0f));
  EXPECT_FLOAT_EQ(y.data[1], 2.0f / (1.0f + 0.1f * 14.0f));
  EXPECT_FLOAT_EQ(y.data[2], 3.0f / (1.0f + 0.1f * 13.0f));
}

}  // namespace
}  // namespace terngrad::train
