// BatchNorm against the float64 reference: training forward (batch
// statistics) and its full backward through the mean and variance,
// evaluation at the moving statistics, and the moving-average fold.
#include <gtest/gtest.h>

#include "reference.h"
#include "terngrad/train/layers.h"

namespace terngrad::train {
namespace {

using testing::Vec;

struct BnCase {
  const char* label;
  Shape shape;
  bool relu;
};
std::ostream& operator<<(std::ostream& os, const BnCase& c) { return os << c.label; }

class BatchNormGradient : public ::testing::TestWithParam<BnCase> {};

TEST_P(BatchNormGradient, TrainingForwardAndBackwardMatchFloat64Reference) {
  const BnCase c = GetParam();
  BatchNorm bn(BatchNormConfig{.name = "conv/BatchNorm", .epsilon = 0.001f, .decay = 0.9f, .relu = c.relu});
  ParamSet params;
  StateSet state;
  std::mt19937_64 rng(5);
  bn.create_params(c.shape, params, rng);
  bn.create_state(c.shape, state);
  ASSERT_EQ(params.size(), 1u);
  EXPECT_EQ(params.params[0].name, "conv/BatchNorm/beta");
  for (float& b : params.params[0].value.data) b = static_cast<float>(std::uniform_real_distribution<>(-0.3, 0.3)(rng));
  // Channels with different means and spreads.
  Tensor x = testing::random_tensor(c.shape, rng);
  const int64_t ch = c.shape.back();
  for (int64_t i = 0; i < x.size(); ++i) x.data[i] = x.data[i] * (1.0f + 0.5f * (i % ch)) + 0.2f * (i % ch);
  testing::GradCheck opt;
  opt.training = true;
  opt.grad_rtol = 5e-4;
  opt.fwd_rtol = 1e-5;
  testing::check_layer(bn, params, {0}, x,
                       [&](const Vec& xv, const std::vector<Vec>& p) { return testing::ref_batch_norm(xv, ch, p[0], 0.001, c.relu); },
                       opt);
}

INSTANTIATE_TEST_SUITE_P(Shapes, BatchNormGradient,
                         ::testing::Values(BnCase{"nhwc_relu", {2, 3, 4, 5}, true},
                                           BnCase{"nhwc_linear", {2, 3, 3, 4}, false},
                                           BnCase{"dense_rows", {6, 7}, false},
                                           BnCase{"one_example", {1, 4, 4, 3}, true}),
                         [](const ::testing::TestParamInfo<BnCase>& info) { return std::string(info.param.label); });

TEST(BatchNorm, EvaluationUsesTheMovingStatisticsAndFoldFollowsTheMovingAverage) {
  const Shape shape{2, 3, 3, 4};
  BatchNorm bn(BatchNormConfig{.name = "bn", .epsilon = 0.001f, .decay = 0.9f, .relu = false});
  ParamSet params;
  StateSet state;
  std::mt19937_64 rng(7);
  bn.create_params(shape, params, rng);
  bn.create_state(shape, state);
  ASSERT_EQ(state.size(), 2u);
  EXPECT_EQ(state.vars[0].name, "bn/moving_mean");
  EXPECT_EQ(state.vars[1].name, "bn/moving_variance");
  for (float v : state.vars[0].value.data) EXPECT_EQ(v, 0.0f);
  for (float v : state.vars[1].value.data) EXPECT_EQ(v, 1.0f);

  const Tensor x = testing::random_tensor(shape, rng, 0.5, 2.0);
  auto scratch = bn.make_scratch();
  Tensor y;
  ForwardContext train;
  train.training = true;
  bn.forward(params, x, y, scratch.get(), train);
  const BatchNorm::Stats& st = BatchNorm::last_stats(scratch.get(), "bn");
  bn.fold_state(scratch.get(), state);
  // moving -= 0.1 * (moving - batch) from (0, 1).
  const Vec xd = testing::to_double(x);
  for (int64_t c = 0; c < 4; ++c) {
    double mean = 0, var = 0;
    for (int64_t r = 0; r < 18; ++r) mean += xd[r * 4 + c] / 18;
    for (int64_t r = 0; r < 18; ++r) var += (xd[r * 4 + c] - mean) * (xd[r * 4 + c] - mean) / 18;
    EXPECT_NEAR(st.mean[c], mean, 1e-6);
    EXPECT_NEAR(state.vars[0].value.data[c], 0.1 * mean, 1e-6);
    EXPECT_NEAR(state.vars[1].value.data[c], 0.9 + 0.1 * var, 1e-6);
  }

  // Evaluation reads the state; without one it names the layer.
  ForwardContext eval;
  EXPECT_THROW(bn.forward(params, x, y, scratch.get(), eval), std::invalid_argument);
  eval.state = &state;
  bn.forward(params, x, y, scratch.get(), eval);
  const Vec mm = testing::to_double(state.vars[0].value), mv = testing::to_double(state.vars[1].value);
  const Vec ref = testing::ref_batch_norm(xd, 4, testing::to_double(params.value(0)), 0.001, false, &mm, &mv);
  testing::expect_close("evaluation forward", testing::to_double(y), ref, 1e-5);
  // An evaluation forward records no batch statistics to fold.
  EXPECT_THROW(bn.fold_state(scratch.get(), state), std::invalid_argument);
}

TEST(BatchNorm, EvaluationBackwardTreatsTheStatisticsAsConstants) {
  const Shape shape{2, 2, 2, 3};
  BatchNorm bn(BatchNormConfig{.name = "bn", .epsilon = 0.001f, .decay = 0.9f, .relu = true});
  ParamSet params;
  StateSet state;
  std::mt19937_64 rng(8);
  bn.create_params(shape, params, rng);
  bn.create_state(shape, state);
  for (float& v : state.vars[0].value.data) v = 0.1f;
  for (float& v : state.vars[1].value.data) v = 2.0f;
  const Vec mm = testing::to_double(state.vars[0].value), mv = testing::to_double(state.vars[1].value);
  const Tensor x = testing::random_tensor(shape, rng);
  // check_layer runs evaluation mode unless told otherwise; point it at the state.
  struct WithState final : Layer {
    const BatchNorm& bn;
    const StateSet& st;
    WithState(const BatchNorm& b, const StateSet& s) : Layer("bn"), bn(b), st(s) {}
    Shape output_shape(const Shape& in) const override { return bn.output_shape(in); }
    std::unique_ptr<LayerScratch> make_scratch() const override { return bn.make_scratch(); }
    void forward(const ParamSet& p, const Tensor& x, Tensor& y, LayerScratch* s, const ForwardContext& c) const override {
      ForwardContext ctx = c;
      ctx.state = &st;
      bn.forward(p, x, y, s, ctx);
    }
    void backward(const ParamSet& p, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx, GradSet& g,
                  LayerScratch* s) const override {
      bn.backward(p, x, y, dy, dx, g, s);
    }
  } layer(bn, state);
  testing::check_layer(layer, params, {0}, x,
                       [&](const Vec& xv, const std::vector<Vec>& p) {
                         return testing::ref_batch_norm(xv, 3, p[0], 0.001, true, &mm, &mv);
                       },
                       testing::GradCheck{});
}

TEST(BatchNorm, ErrorsNameTheLayer) {
  EXPECT_THROW(BatchNorm(BatchNormConfig{.name = "bn", .epsilon = 0.0f}), std::invalid_argument);
  BatchNorm bn(BatchNormConfig{.name = "Mixed_3b/BatchNorm"});
  try {
    (void)bn.output_shape({4});
    FAIL() << "a rank-1 input was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("Mixed_3b/BatchNorm"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace terngrad::train
