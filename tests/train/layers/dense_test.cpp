// Dense against the float64 reference (forward, numerical gradients of x,
// weights and biases), flattening order and parameter metadata.
#include <gtest/gtest.h>

#include "reference.h"
#include "terngrad/train/layers.h"

namespace terngrad::train {
namespace {

using testing::Vec;

struct DenseCase {
  const char* label;
  Shape in;
  int64_t units;
  bool relu;
};

std::ostream& operator<<(std::ostream& os, const DenseCase& c) { return os << c.label; }

class DenseGradient : public ::testing::TestWithParam<DenseCase> {};

TEST_P(DenseGradient, ForwardAndBackwardMatchFloat64Reference) {
  const DenseCase c = GetParam();
  Dense fc(DenseConfig{.name = "fc", .units = c.units, .relu = c.relu});
  ParamSet params;
  std::mt19937_64 rng(23);
  fc.create_params(c.in, params, rng);
  params.params[fc.weights_index()].value = testing::random_tensor(params.value(fc.weights_index()).shape, rng, -0.5, 0.5);
  params.params[fc.biases_index()].value = testing::random_tensor({c.units}, rng, -0.3, 0.3);
  const Tensor x = testing::random_tensor(c.in, rng);
  const int64_t n = c.in[0], d = x.size() / n;
  testing::check_layer(fc, params, {fc.weights_index(), fc.biases_index()}, x,
                       [&](const Vec& xv, const std::vector<Vec>& pv) {
                         return testing::ref_dense(xv, n, d, pv[0], pv[1], c.units, c.relu);
                       },
                       testing::GradCheck{});
}

INSTANTIATE_TEST_SUITE_P(Shapes, DenseGradient,
                         ::testing::Values(DenseCase{"flat", {3, 7}, 5, false},
                                           DenseCase{"flat_relu", {4, 9}, 6, true},
                                           DenseCase{"nhwc_input", {2, 3, 2, 4}, 5, true},
                                           DenseCase{"single_row", {1, 11}, 3, false}),
                         [](const ::testing::TestParamInfo<DenseCase>& info) { return std::string(info.param.label); });

TEST(Dense, LogitsParametersAreMarkedAndShaped) {
  Dense fc(DenseConfig{.name = "logits", .units = 10, .init_stddev = 1.0f / 192, .weight_decay = 0.0f, .is_logits = true});
  ParamSet params;
  std::mt19937_64 rng(1);
  fc.create_params({1, 192}, params, rng);
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params.params[0].name, "logits/weights");
  EXPECT_EQ(params.params[0].value.shape, (Shape{192, 10}));
  EXPECT_TRUE(params.params[0].is_logits);
  EXPECT_EQ(params.params[1].name, "logits/biases");
  EXPECT_TRUE(params.params[1].is_logits);
  EXPECT_EQ(fc.output_shape({64, 192}), (Shape{64, 10}));
}

TEST(Dense, FlattensNhwcRowsLikeTensorFlowReshape) {
  // With one unit and weights 0, 1, 2, ... the output is sum_k k * x_flat[k],
  // so it reveals the flattening order: NHWC, channel fastest.
  Dense fc(DenseConfig{.name = "fc", .units = 1});
  ParamSet params;
  std::mt19937_64 rng(1);
  fc.create_params({1, 2, 2, 2}, params, rng);
  for (int k = 0; k < 8; ++k) params.params[0].value.data[k] = static_cast<float>(k);
  Tensor x({1, 2, 2, 2}, 0.0f);
  x.data[1 * 2 * 2 + 0 * 2 + 1] = 1.0f;  // h = 1, w = 0, c = 1
  auto scratch = fc.make_scratch();
  Tensor y;
  fc.forward(params, x, y, scratch.get(), ForwardContext{});
  EXPECT_EQ(y.data[0], 5.0f);
}

}  // namespace
}  // namespace terngrad::train
