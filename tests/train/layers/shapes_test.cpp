// Output shapes (TensorFlow's padding rule), shape errors that name the
// layer and the shapes, config validation, and LeNet's forward MACs.
#include <gtest/gtest.h>

#include <string>

#include "terngrad/train/layers.h"

namespace terngrad::train {
namespace {

TEST(WindowGeometry, FollowsTensorFlowPadding) {
  struct Case {
    int64_t in, k, s;
    Padding p;
    int64_t out, pad;
  };
  for (const Case& c : {
           Case{28, 5, 1, Padding::kSame, 28, 2},   // LeNet conv1
           Case{28, 2, 2, Padding::kSame, 14, 0},   // LeNet pool1
           Case{7, 2, 2, Padding::kSame, 4, 0},     // odd input: the extra pad goes after
           Case{24, 3, 2, Padding::kSame, 12, 0},   // CifarNet pool1: pad_total 1
           Case{9, 3, 2, Padding::kSame, 5, 1},
           Case{224, 11, 4, Padding::kValid, 54, 0},  // AlexNet conv1
           Case{54, 3, 2, Padding::kValid, 26, 0},    // AlexNet pool1
           Case{13, 3, 2, Padding::kValid, 6, 0},     // AlexNet pool5
           Case{5, 7, 1, Padding::kValid, 0, 0},      // does not fit
           Case{14, 11, 4, Padding::kSame, 4, 4},     // pad_total 9 -> 4 before, 5 after
       }) {
    const WindowGeometry g = window_geometry(c.in, c.k, c.s, c.p);
    EXPECT_EQ(g.out, c.out) << c.in << " " << c.k << " " << c.s << " " << padding_name(c.p);
    EXPECT_EQ(g.pad_before, c.pad) << c.in << " " << c.k << " " << c.s << " " << padding_name(c.p);
  }
}

// The error message of f(), or "" when it does not throw invalid_argument.
template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

void expect_mentions(const std::string& msg, std::initializer_list<const char*> parts) {
  ASSERT_FALSE(msg.empty()) << "no std::invalid_argument thrown";
  for (const char* p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' missing in: " << msg;
}

TEST(OutputShape, ErrorsNameTheLayerAndTheShapes) {
  const Conv2D conv(Conv2DConfig{.name = "conv2", .filters = 256, .kernel_h = 5, .kernel_w = 5, .groups = 2});
  expect_mentions(error_of([&] { conv.output_shape({8, 27, 27}); }), {"conv2", "[8, 27, 27]"});
  expect_mentions(error_of([&] { conv.output_shape({8, 27, 27, 95}); }), {"conv2", "[8, 27, 27, 95]", "groups = 2"});
  const Conv2D big(Conv2DConfig{.name = "conv1", .filters = 96, .kernel_h = 11, .kernel_w = 11, .stride = 4,
                                .padding = Padding::kValid});
  expect_mentions(error_of([&] { big.output_shape({1, 8, 8, 3}); }), {"conv1", "11x11", "VALID", "[1, 8, 8, 3]"});
  const MaxPool pool(MaxPoolConfig{.name = "pool5", .kernel = 3, .stride = 2});
  expect_mentions(error_of([&] { pool.output_shape({1, 2, 2, 256}); }), {"pool5", "[1, 2, 2, 256]"});
  expect_mentions(error_of([&] { pool.output_shape({1, 4096}); }), {"pool5", "[1, 4096]"});
  const LocalResponseNorm lrn(LocalResponseNormConfig{.name = "norm1"});
  expect_mentions(error_of([&] { lrn.output_shape({4, 10}); }), {"norm1", "[4, 10]"});
  const Dense fc(DenseConfig{.name = "fc6", .units = 4096});
  expect_mentions(error_of([&] { fc.output_shape({64}); }), {"fc6", "[64]"});

  // Parameters that do not fit the input are reported at forward.
  Dense fc1(DenseConfig{.name = "fc1", .units = 3});
  ParamSet params;
  std::mt19937_64 rng(1);
  fc1.create_params({1, 5}, params, rng);
  Tensor y;
  expect_mentions(error_of([&] { fc1.forward(params, Tensor({2, 6}), y, nullptr, ForwardContext{}); }),
                  {"fc1", "fc1/weights", "[5, 3]", "[6, 3]"});
}

TEST(OutputShape, ChainsThroughTheNetworks) {
  const Conv2D conv1(Conv2DConfig{.name = "conv1", .filters = 96, .kernel_h = 11, .kernel_w = 11, .stride = 4,
                                  .padding = Padding::kValid});
  const MaxPool pool(MaxPoolConfig{.name = "pool1", .kernel = 3, .stride = 2, .padding = Padding::kValid});
  EXPECT_EQ(conv1.output_shape({128, 224, 224, 3}), (Shape{128, 54, 54, 96}));
  EXPECT_EQ(pool.output_shape({128, 54, 54, 96}), (Shape{128, 26, 26, 96}));
  const MaxPool cpool(MaxPoolConfig{.name = "pool1", .kernel = 3, .stride = 2, .padding = Padding::kSame});
  EXPECT_EQ(cpool.output_shape({1, 24, 24, 64}), (Shape{1, 12, 12, 64}));
  EXPECT_EQ(cpool.output_shape({1, 12, 12, 64}), (Shape{1, 6, 6, 64}));
}

TEST(Config, InvalidFieldsAreRejectedByName) {
  expect_mentions(error_of([] { Conv2D(Conv2DConfig{.name = "conv1", .filters = 0, .kernel_h = 5, .kernel_w = 5}); }),
                  {"conv1", "filters", "0"});
  expect_mentions(error_of([] { Conv2D(Conv2DConfig{.name = "conv4", .filters = 383, .kernel_h = 3, .kernel_w = 3, .groups = 2}); }),
                  {"conv4", "groups = 2", "filters = 383"});
  expect_mentions(error_of([] { Conv2D(Conv2DConfig{.name = "conv1", .filters = 4, .kernel_h = 3, .kernel_w = 3, .stride = -1}); }),
                  {"conv1", "stride", "-1"});
  expect_mentions(error_of([] { MaxPool(MaxPoolConfig{.name = "pool1", .kernel = 0}); }), {"pool1", "kernel"});
  expect_mentions(error_of([] { LocalResponseNorm(LocalResponseNormConfig{.name = "norm1", .bias = 0.0f}); }),
                  {"norm1", "bias"});
  expect_mentions(error_of([] { LocalResponseNorm(LocalResponseNormConfig{.name = "norm1", .depth_radius = -1}); }),
                  {"norm1", "depth_radius", "-1"});
  expect_mentions(error_of([] { Dense(DenseConfig{.name = "fc7", .units = -3}); }), {"fc7", "units", "-3"});
  expect_mentions(error_of([] { Dense(DenseConfig{.name = "", .units = 3}); }), {"Dense", "name"});
}

TEST(ForwardMacs, LeNetLayers) {
  const Conv2D conv1(Conv2DConfig{.name = "conv1", .filters = 20, .kernel_h = 5, .kernel_w = 5, .relu = true});
  const MaxPool pool1(MaxPoolConfig{.name = "pool1", .kernel = 2, .stride = 2, .padding = Padding::kSame});
  const Conv2D conv2(Conv2DConfig{.name = "conv2", .filters = 50, .kernel_h = 5, .kernel_w = 5, .relu = true});
  const MaxPool pool2(MaxPoolConfig{.name = "pool2", .kernel = 2, .stride = 2, .padding = Padding::kSame});
  const Dense fc1(DenseConfig{.name = "fc1", .units = 500, .relu = true});
  const Dense fc2(DenseConfig{.name = "fc2", .units = 10, .is_logits = true});
  EXPECT_EQ(conv1.forward_macs_per_example({1, 28, 28, 1}), 28 * 28 * 20 * 25);
  EXPECT_EQ(pool1.forward_macs_per_example({1, 28, 28, 20}), 0);
  EXPECT_EQ(conv2.forward_macs_per_example({1, 14, 14, 20}), 14 * 14 * 50 * 500);
  EXPECT_EQ(pool2.output_shape({1, 14, 14, 50}), (Shape{1, 7, 7, 50}));
  EXPECT_EQ(fc1.forward_macs_per_example({1, 7, 7, 50}), 2450 * 500);
  EXPECT_EQ(fc2.forward_macs_per_example({1, 500}), 500 * 10);
  // Grouped: each filter sees cin/groups channels.
  const Conv2D grouped(Conv2DConfig{.name = "conv2", .filters = 256, .kernel_h = 5, .kernel_w = 5, .groups = 2});
  EXPECT_EQ(grouped.forward_macs_per_example({1, 26, 26, 96}), int64_t{26} * 26 * 256 * 5 * 5 * 48);
}

}  // namespace
}  // namespace terngrad::train
