// Conv2D against the float64 direct convolution: forward, numerical
// gradients (see reference.h for the tolerances), and the blocked im2col path
// on a batch spanning several patch blocks.
#include <gtest/gtest.h>

#include "reference.h"
#include "terngrad/train/layers.h"

namespace terngrad::train {
namespace {

using testing::RefConv;
using testing::Vec;

struct ConvCase {
  const char* label;
  int64_t n, h, w, c, f, kh, kw, stride;
  Padding padding;
  int64_t groups;
  bool relu;
};

std::ostream& operator<<(std::ostream& os, const ConvCase& c) { return os << c.label; }

RefConv ref_of(const ConvCase& c) {
  return {c.n, c.h, c.w, c.c, c.f, c.kh, c.kw, c.stride, c.groups, c.padding == Padding::kSame, c.relu};
}

// Builds the layer and replaces its initial values with random ones, so
// that non-zero biases are exercised too.
Conv2D make_conv(const ConvCase& c, ParamSet& params, uint64_t seed) {
  Conv2D conv(Conv2DConfig{.name = "conv",
                           .filters = c.f,
                           .kernel_h = c.kh,
                           .kernel_w = c.kw,
                           .stride = c.stride,
                           .padding = c.padding,
                           .groups = c.groups,
                           .relu = c.relu});
  std::mt19937_64 rng(seed);
  conv.create_params({c.n, c.h, c.w, c.c}, params, rng);
  params.params[conv.weights_index()].value = testing::random_tensor(params.value(conv.weights_index()).shape, rng, -0.5, 0.5);
  params.params[conv.biases_index()].value = testing::random_tensor({c.f}, rng, -0.3, 0.3);
  return conv;
}

class ConvGradient : public ::testing::TestWithParam<ConvCase> {};

TEST_P(ConvGradient, ForwardAndBackwardMatchFloat64Reference) {
  const ConvCase c = GetParam();
  ParamSet params;
  const Conv2D conv = make_conv(c, params, 7);
  std::mt19937_64 rng(11);
  const Tensor x = testing::random_tensor({c.n, c.h, c.w, c.c}, rng);
  const RefConv p = ref_of(c);
  testing::check_layer(conv, params, {conv.weights_index(), conv.biases_index()}, x,
                       [&](const Vec& xv, const std::vector<Vec>& pv) { return testing::ref_conv(p, xv, pv[0], pv[1]); },
                       testing::GradCheck{});
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ConvGradient,
    ::testing::Values(
        ConvCase{"s1_same_3x3_odd", 2, 7, 6, 3, 4, 3, 3, 1, Padding::kSame, 1, false},
        ConvCase{"s1_same_5x5_lenet_like", 2, 5, 6, 2, 3, 5, 5, 1, Padding::kSame, 1, true},
        ConvCase{"s1_valid_g2_relu", 2, 7, 6, 4, 6, 3, 3, 1, Padding::kValid, 2, true},
        ConvCase{"s2_same_odd_pad", 2, 9, 8, 3, 4, 3, 3, 2, Padding::kSame, 1, true},
        ConvCase{"s2_valid_4x2_g2", 2, 9, 7, 4, 4, 4, 2, 2, Padding::kValid, 2, false},
        ConvCase{"s4_valid_11x11", 1, 15, 13, 3, 4, 11, 11, 4, Padding::kValid, 1, false},
        ConvCase{"s4_same_11x11_g2", 2, 14, 15, 6, 4, 11, 11, 4, Padding::kSame, 2, true},
        ConvCase{"s1_1x1_g2", 3, 4, 5, 6, 4, 1, 1, 1, Padding::kValid, 2, false}),
    [](const ::testing::TestParamInfo<ConvCase>& info) { return std::string(info.param.label); });

// Relative error of a against the float64 b, scaled by b's largest entry.
double max_rel_error(const Vec& a, const Vec& b) {
  double err = 0, scale = 1e-30;
  for (size_t i = 0; i < b.size(); ++i) scale = std::max(scale, std::fabs(b[i]));
  for (size_t i = 0; i < b.size(); ++i) err = std::max(err, std::fabs(a[i] - b[i]));
  return err / scale;
}

// 16x16 pixels x 5x5x8 patch columns = 51200 floats per example and group,
// so the 7 examples run as patch blocks of 5 and 2: checks the block offsets
// and that gradients accumulate over blocks and groups. The reference
// backward is the exact float64 one (numerical gradients would take minutes).
TEST(Conv2D, SeveralPatchBlocksMatchReferenceBackward) {
  const ConvCase c{"blocks", 7, 16, 16, 16, 8, 5, 5, 1, Padding::kSame, 2, true};
  ParamSet params;
  const Conv2D conv = make_conv(c, params, 3);
  std::mt19937_64 rng(5);
  const Tensor x = testing::random_tensor({c.n, c.h, c.w, c.c}, rng);
  auto scratch = conv.make_scratch();
  Tensor y, dx;
  conv.forward(params, x, y, scratch.get(), ForwardContext{});
  const RefConv p = ref_of(c);
  const Vec xd = testing::to_double(x), wd = testing::to_double(params.value(conv.weights_index())),
            bd = testing::to_double(params.value(conv.biases_index()));
  EXPECT_LT(max_rel_error(testing::to_double(y), testing::ref_conv(p, xd, wd, bd)), 1e-5);

  const Tensor dy = testing::random_tensor(y.shape, rng);
  GradSet grads;
  for (const Param& prm : params.params) grads.emplace_back(prm.value.shape);
  conv.backward(params, x, y, dy, &dx, grads, scratch.get());
  Vec rdx, rdw, rdb;
  testing::ref_conv_backward(p, xd, wd, bd, testing::to_double(dy), rdx, rdw, rdb);
  EXPECT_LT(max_rel_error(testing::to_double(dx), rdx), 1e-5);
  EXPECT_LT(max_rel_error(testing::to_double(grads[conv.weights_index()]), rdw), 1e-5);
  EXPECT_LT(max_rel_error(testing::to_double(grads[conv.biases_index()]), rdb), 1e-5);

  // Without dx (a first layer) the parameter gradients are the same.
  GradSet grads2;
  for (const Param& prm : params.params) grads2.emplace_back(prm.value.shape);
  conv.backward(params, x, y, dy, nullptr, grads2, scratch.get());
  EXPECT_EQ(grads2[conv.weights_index()].data, grads[conv.weights_index()].data);
  EXPECT_EQ(grads2[conv.biases_index()].data, grads[conv.biases_index()].data);
}

// A scratch that served a larger batch serves a smaller one, and a new
// worker's scratch gives bit-identical results.
TEST(Conv2D, ScratchReuseAcrossBatchSizes) {
  const ConvCase c{"reuse", 6, 9, 9, 4, 6, 3, 3, 2, Padding::kSame, 2, true};
  ParamSet params;
  const Conv2D conv = make_conv(c, params, 9);
  std::mt19937_64 rng(1);
  const Tensor big = testing::random_tensor({6, 9, 9, 4}, rng);
  const Tensor small = testing::random_tensor({2, 9, 9, 4}, rng);
  auto used = conv.make_scratch();
  Tensor y;
  conv.forward(params, big, y, used.get(), ForwardContext{});
  conv.forward(params, small, y, used.get(), ForwardContext{});
  auto fresh = conv.make_scratch();
  Tensor y2;
  conv.forward(params, small, y2, fresh.get(), ForwardContext{});
  EXPECT_EQ(y.shape, (Shape{2, 5, 5, 6}));
  EXPECT_EQ(y.data, y2.data);
}

TEST(Conv2D, ParametersAreNamedAndShapedLikeTensorFlow) {
  Conv2D conv(Conv2DConfig{.name = "conv2", .filters = 256, .kernel_h = 5, .kernel_w = 5, .groups = 2,
                           .init_stddev = 0.01f, .bias_init = 0.1f, .weight_decay = 5e-4f});
  ParamSet params;
  std::mt19937_64 rng(1);
  conv.create_params({1, 27, 27, 96}, params, rng);
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params.params[0].name, "conv2/weights");
  EXPECT_EQ(params.params[0].value.shape, (Shape{5, 5, 48, 256}));
  EXPECT_FLOAT_EQ(params.params[0].weight_decay, 5e-4f);
  EXPECT_FALSE(params.params[0].is_logits);
  EXPECT_EQ(params.params[1].name, "conv2/biases");
  EXPECT_EQ(params.params[1].value.shape, (Shape{256}));
  EXPECT_EQ(params.params[1].weight_decay, 0.0f);
  for (float v : params.params[1].value.data) EXPECT_EQ(v, 0.1f);
  for (float v : params.params[0].value.data) EXPECT_LE(std::fabs(v), 0.02f);
}

}  // namespace
}  // namespace terngrad::train
