// AvgPool against the float64 reference (forward and numerical dx), VALID
// and SAME (whose windows average in-image cells only, as tf.nn.avg_pool).
#include <gtest/gtest.h>

#include "reference.h"
#include "terngrad/train/layers.h"

namespace terngrad::train {
namespace {

using testing::Vec;

struct AvgCase {
  const char* label;
  int64_t n, h, w, c, k, stride;
  Padding padding;
};
std::ostream& operator<<(std::ostream& os, const AvgCase& c) { return os << c.label; }

class AvgPoolGradient : public ::testing::TestWithParam<AvgCase> {};

TEST_P(AvgPoolGradient, ForwardAndBackwardMatchFloat64Reference) {
  const AvgCase c = GetParam();
  const AvgPool pool(AvgPoolConfig{.name = "avg", .kernel = c.k, .stride = c.stride, .padding = c.padding});
  ParamSet params;
  std::mt19937_64 rng(11);
  const Tensor x = testing::random_tensor({c.n, c.h, c.w, c.c}, rng);
  const testing::RefPool p{c.n, c.h, c.w, c.c, c.k, c.stride, c.padding == Padding::kSame};
  testing::check_layer(pool, params, {}, x,
                       [&](const Vec& xv, const std::vector<Vec>&) { return testing::ref_avgpool(p, xv); },
                       testing::GradCheck{});
}

INSTANTIATE_TEST_SUITE_P(Shapes, AvgPoolGradient,
                         ::testing::Values(AvgCase{"googlenet_global_7x7", 2, 7, 7, 5, 7, 1, Padding::kValid},
                                           AvgCase{"k3s1_same", 1, 5, 6, 3, 3, 1, Padding::kSame},
                                           AvgCase{"k3s2_same_odd", 2, 7, 7, 2, 3, 2, Padding::kSame},
                                           AvgCase{"k2s2_valid", 2, 6, 5, 4, 2, 2, Padding::kValid},
                                           AvgCase{"k2s3_gapped", 1, 8, 7, 2, 2, 3, Padding::kValid}),
                         [](const ::testing::TestParamInfo<AvgCase>& info) { return std::string(info.param.label); });

TEST(AvgPool, WindowThatDoesNotFitNamesTheLayer) {
  const AvgPool pool(AvgPoolConfig{.name = "logits/MaxPool_0a_7x7", .kernel = 7, .stride = 1});
  try {
    (void)pool.output_shape({1, 6, 6, 3});
    FAIL() << "a 7x7 VALID window fit a 6x6 input";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("logits/MaxPool_0a_7x7"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace terngrad::train
