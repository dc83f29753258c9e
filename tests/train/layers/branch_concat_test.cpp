// BranchConcat (GoogLeNet's Inception block) against a float64 reference
// built from the reference conv and max pool, concatenated on channels:
// forward, numerical dx and every branch parameter's gradient; and the
// recursion of parameters, state and folding into the branches.
#include <gtest/gtest.h>

#include "reference.h"
#include "terngrad/train/layers.h"

namespace terngrad::train {
namespace {

using testing::Vec;

std::unique_ptr<Layer> conv(const std::string& name, int64_t f, int64_t k) {
  return std::make_unique<Conv2D>(Conv2DConfig{.name = name, .filters = f, .kernel_h = k, .kernel_w = k,
                                               .init_stddev = 0.3f, .bias_init = 0.05f, .relu = true});
}

// A small Inception block: 1x1 | 1x1 -> 3x3 | maxpool 3x3/1 SAME -> 1x1.
BranchConcat block() {
  std::vector<BranchConcat::Branch> br(3);
  br[0].push_back(conv("mix/Branch_0/Conv2d_0a_1x1", 2, 1));
  br[1].push_back(conv("mix/Branch_1/Conv2d_0a_1x1", 3, 1));
  br[1].push_back(conv("mix/Branch_1/Conv2d_0b_3x3", 2, 3));
  br[2].push_back(std::make_unique<MaxPool>(MaxPoolConfig{"mix/Branch_2/MaxPool_0a_3x3", 3, 1, Padding::kSame}));
  br[2].push_back(conv("mix/Branch_2/Conv2d_0b_1x1", 3, 1));
  return BranchConcat("mix", std::move(br));
}

TEST(BranchConcat, ForwardAndBackwardMatchFloat64Reference) {
  BranchConcat mix = block();
  const int64_t n = 2, h = 4, w = 5, c = 3;
  ParamSet params;
  std::mt19937_64 rng(21);
  mix.create_params({n, h, w, c}, params, rng);
  ASSERT_EQ(params.size(), 8u);  // weights and biases of four convs, in branch order
  EXPECT_EQ(params.params[0].name, "mix/Branch_0/Conv2d_0a_1x1/weights");
  EXPECT_EQ(params.params[7].name, "mix/Branch_2/Conv2d_0b_1x1/biases");
  EXPECT_EQ(mix.output_shape({n, h, w, c}), (Shape{n, h, w, 7}));
  const Tensor x = testing::random_tensor({n, h, w, c}, rng);

  auto ref = [&](const Vec& xv, const std::vector<Vec>& p) {
    const testing::RefConv b0{n, h, w, c, 2, 1, 1, 1, 1, true, true};
    const testing::RefConv b1a{n, h, w, c, 3, 1, 1, 1, 1, true, true};
    const testing::RefConv b1b{n, h, w, 3, 2, 3, 3, 1, 1, true, true};
    const testing::RefConv b2{n, h, w, c, 3, 1, 1, 1, 1, true, true};
    const Vec y0 = testing::ref_conv(b0, xv, p[0], p[1]);
    const Vec y1 = testing::ref_conv(b1b, testing::ref_conv(b1a, xv, p[2], p[3]), p[4], p[5]);
    const Vec y2 = testing::ref_conv(b2, testing::ref_maxpool({n, h, w, c, 3, 1, true}, xv), p[6], p[7]);
    Vec y;
    for (int64_t r = 0; r < n * h * w; ++r) {
      y.insert(y.end(), y0.begin() + r * 2, y0.begin() + r * 2 + 2);
      y.insert(y.end(), y1.begin() + r * 2, y1.begin() + r * 2 + 2);
      y.insert(y.end(), y2.begin() + r * 3, y2.begin() + r * 3 + 3);
    }
    return y;
  };
  testing::GradCheck opt;
  opt.grad_rtol = 2e-4;
  testing::check_layer(mix, params, {0, 1, 2, 3, 4, 5, 6, 7}, x, ref, opt);
  EXPECT_EQ(mix.forward_macs_per_example({1, h, w, c}), h * w * (2 * 3 + 3 * 3 + 2 * 9 * 3 + 3 * 3));
}

TEST(BranchConcat, StateAndFoldReachTheBranches) {
  std::vector<BranchConcat::Branch> br(2);
  br[0].push_back(std::make_unique<BatchNorm>(BatchNormConfig{.name = "b0/BatchNorm", .decay = 0.5f}));
  br[1].push_back(conv("b1/conv", 2, 1));
  br[1].push_back(std::make_unique<BatchNorm>(BatchNormConfig{.name = "b1/BatchNorm", .decay = 0.5f}));
  BranchConcat mix("mix", std::move(br));
  const Shape in{2, 3, 3, 2};
  ParamSet params;
  StateSet state;
  std::mt19937_64 rng(3);
  mix.create_params(in, params, rng);
  mix.create_state(in, state);
  ASSERT_EQ(state.size(), 4u);
  EXPECT_EQ(state.vars[2].name, "b1/BatchNorm/moving_mean");
  auto scratch = mix.make_scratch();
  ForwardContext ctx;
  ctx.training = true;
  Tensor y;
  mix.forward(params, testing::random_tensor(in, rng, 1.0, 2.0), y, scratch.get(), ctx);
  mix.fold_state(scratch.get(), state);
  for (size_t i : {0u, 2u}) {
    double moved = 0;
    for (float v : state.vars[i].value.data) moved += std::fabs(v);
    EXPECT_GT(moved, 0.0) << state.vars[i].name << " was not folded";
  }
}

TEST(BranchConcat, MismatchedBranchesNameTheBlock) {
  std::vector<BranchConcat::Branch> br(2);
  br[0].push_back(conv("a", 2, 1));
  br[1].push_back(std::make_unique<MaxPool>(MaxPoolConfig{"p", 2, 2, Padding::kValid}));
  BranchConcat mix("Mixed_9z", std::move(br));
  try {
    (void)mix.output_shape({1, 4, 4, 3});
    FAIL() << "branches of different sizes were concatenated";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("Mixed_9z"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace terngrad::train
