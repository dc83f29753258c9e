// GPU Conv2D (cuDNN) against the CPU Conv2D. Bound: 1e-4 relative to the
// largest magnitude (fp32 sums of up to 1600 products in a different order;
// FMA math only, deterministic algorithms).
#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "terngrad/train/layers.h"

namespace terngrad::train::cuda {
namespace {

constexpr double kConvBound = 1e-4;

void check_conv(Conv2DConfig cfg, const Shape& in) {
  Conv2D conv(cfg);
  testing::expect_biased_layer_matches(conv, in, 3, kConvBound);
}

TEST(GpuConv2D, LeNetConv1SameRelu) {
  TG_REQUIRE_GPU();
  check_conv({.name = "conv1", .filters = 20, .kernel_h = 5, .kernel_w = 5, .relu = true}, {8, 28, 28, 1});
}

TEST(GpuConv2D, LeNetConv2SameRelu) {
  TG_REQUIRE_GPU();
  check_conv({.name = "conv2", .filters = 50, .kernel_h = 5, .kernel_w = 5, .relu = true}, {8, 14, 14, 20});
}

TEST(GpuConv2D, CifarNetConv2) {
  TG_REQUIRE_GPU();
  check_conv({.name = "conv2", .filters = 64, .kernel_h = 5, .kernel_w = 5, .relu = true}, {4, 12, 12, 64});
}

TEST(GpuConv2D, ValidStride2NoRelu) {
  TG_REQUIRE_GPU();
  check_conv({.name = "v", .filters = 4, .kernel_h = 3, .kernel_w = 3, .stride = 2, .padding = Padding::kValid},
             {2, 9, 9, 3});
}

TEST(GpuConv2D, Grouped) {
  TG_REQUIRE_GPU();
  check_conv({.name = "g", .filters = 6, .kernel_h = 3, .kernel_w = 3, .groups = 2, .relu = true}, {2, 8, 8, 4});
}

TEST(GpuConv2D, AsymmetricSamePaddingIsPaddedExplicitly) {
  TG_REQUIRE_GPU();
  // 3x3 stride 2 SAME on 8: total padding 1, TF puts it after (0 before).
  check_conv({.name = "asym", .filters = 2, .kernel_h = 3, .kernel_w = 3, .stride = 2}, {1, 8, 8, 1});
  // AlexNet's conv1 geometry (11x11 stride 4 SAME) on 32x32: 3 before, 4 after.
  check_conv({.name = "conv1", .filters = 8, .kernel_h = 11, .kernel_w = 11, .stride = 4, .relu = true},
             {2, 32, 32, 3});
  // Only one axis asymmetric: 8 tall (total 1), 9 wide (total 2).
  check_conv({.name = "mixed", .filters = 3, .kernel_h = 3, .kernel_w = 3, .stride = 2}, {2, 8, 9, 2});
}

}  // namespace
}  // namespace terngrad::train::cuda
