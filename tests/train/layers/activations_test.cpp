// ReLU against the float64 reference (forward and numerical dx).
#include <gtest/gtest.h>

#include "reference.h"
#include "terngrad/train/layers.h"

namespace terngrad::train {
namespace {

using testing::Vec;

TEST(ReLU, ForwardAndBackwardMatchFloat64Reference) {
  const ReLU relu("relu");
  std::mt19937_64 rng(4);
  Tensor x = testing::random_tensor({3, 4, 5, 2}, rng);
  // Keep inputs off the kink, where the numerical derivative is undefined.
  for (float& v : x.data)
    if (std::fabs(v) < 0.05f) v += v < 0 ? -0.05f : 0.05f;
  ParamSet params;
  testing::check_layer(relu, params, {}, x,
                       [](const Vec& xv, const std::vector<Vec>&) {
                         Vec y(xv.size());
                         for (size_t i = 0; i < xv.size(); ++i) y[i] = std::max(xv[i], 0.0);
                         return y;
                       },
                       testing::GradCheck{});
}

TEST(ReLU, ZeroInputPassesNoGradient) {
  // TF's ReluGrad: the gradient flows only where the output is > 0.
  const ReLU relu("relu");
  Tensor x({1, 3});
  x.data = {-1.0f, 0.0f, 2.0f};
  Tensor y, dx;
  GradSet grads;
  relu.forward(ParamSet{}, x, y, nullptr, ForwardContext{});
  Tensor dy({1, 3}, 1.0f);
  relu.backward(ParamSet{}, x, y, dy, &dx, grads, nullptr);
  EXPECT_EQ(y.data, (std::vector<float>{0, 0, 2}));
  EXPECT_EQ(dx.data, (std::vector<float>{0, 0, 1}));
}

}  // namespace
}  // namespace terngrad::train
