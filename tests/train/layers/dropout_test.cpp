// Dropout: inverted scaling, identity in evaluation, masks a pure function
// of (seed, layer, element), and backward applying forward's mask. Dropout
// is linear in x for a fixed mask, so "dx = dy * mask / keep_prob" with
// forward's mask is its exact gradient.
#include <gtest/gtest.h>

#include "reference.h"
#include "terngrad/train/layers.h"

namespace terngrad::train {
namespace {

Tensor nonzero_input(const Shape& shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Tensor x = testing::random_tensor(shape, rng, 0.5, 1.5);
  return x;
}

Tensor run(const Dropout& d, const Tensor& x, bool training, uint64_t seed) {
  auto scratch = d.make_scratch();
  Tensor y;
  d.forward(ParamSet{}, x, y, scratch.get(), ForwardContext{training, seed});
  return y;
}

TEST(Dropout, EvaluationIsIdentity) {
  const Dropout d(DropoutConfig{.name = "dropout6", .keep_prob = 0.5f});
  const Tensor x = nonzero_input({4, 33}, 1);
  auto scratch = d.make_scratch();
  Tensor y, dx;
  GradSet grads;
  d.forward(ParamSet{}, x, y, scratch.get(), ForwardContext{false, 77});
  EXPECT_EQ(y.data, x.data);
  const Tensor dy = nonzero_input({4, 33}, 2);
  d.backward(ParamSet{}, x, y, dy, &dx, grads, scratch.get());
  EXPECT_EQ(dx.data, dy.data);
}

TEST(Dropout, KeepProbOneIsIdentityInTraining) {
  const Dropout d(DropoutConfig{.name = "dropout", .keep_prob = 1.0f});
  const Tensor x = nonzero_input({2, 10}, 1);
  EXPECT_EQ(run(d, x, true, 5).data, x.data);
}

TEST(Dropout, TrainingKeepsAFractionScaledByOneOverKeepProb) {
  const float keep = 0.3f;
  const Dropout d(DropoutConfig{.name = "dropout", .keep_prob = keep});
  const Tensor x = nonzero_input({16, 4096}, 3);
  const Tensor y = run(d, x, true, 12345);
  int64_t kept = 0;
  for (int64_t i = 0; i < x.size(); ++i) {
    if (y.data[i] != 0.0f) {
      ++kept;
      EXPECT_EQ(y.data[i], x.data[i] * (1.0f / keep)) << i;
    }
    EXPECT_EQ(y.data[i] != 0.0f, d.kept(12345, i)) << i;
  }
  // Binomial(65536, 0.3): standard deviation ~117; allow 5 of them.
  const double expected = keep * x.size();
  EXPECT_NEAR(static_cast<double>(kept), expected, 5 * std::sqrt(expected * (1 - keep)));
}

TEST(Dropout, MaskIsDeterministicPerSeedAndLayer) {
  const Dropout d6(DropoutConfig{.name = "dropout6", .keep_prob = 0.5f});
  const Dropout d7(DropoutConfig{.name = "dropout7", .keep_prob = 0.5f});
  const Tensor x = nonzero_input({8, 512}, 4);
  const Tensor a = run(d6, x, true, 42);
  EXPECT_EQ(run(d6, x, true, 42).data, a.data);   // same seed, fresh scratch
  EXPECT_NE(run(d6, x, true, 43).data, a.data);   // another step or worker
  EXPECT_NE(run(d7, x, true, 42).data, a.data);   // another layer, same seed
  // Element i's fate depends only on i, not on the batch size.
  Tensor head({2, 512});
  std::copy(x.data.begin(), x.data.begin() + head.size(), head.data.begin());
  const Tensor b = run(d6, head, true, 42);
  EXPECT_TRUE(std::equal(b.data.begin(), b.data.end(), a.data.begin()));
}

TEST(Dropout, BackwardAppliesForwardsMask) {
  const float keep = 0.6f;
  const Dropout d(DropoutConfig{.name = "fc7_dropout", .keep_prob = keep});
  const Tensor x = nonzero_input({3, 5, 7}, 5);
  auto scratch = d.make_scratch();
  Tensor y, dx;
  GradSet grads;
  d.forward(ParamSet{}, x, y, scratch.get(), ForwardContext{true, 99});
  const Tensor dy = nonzero_input({3, 5, 7}, 6);
  d.backward(ParamSet{}, x, y, dy, &dx, grads, scratch.get());
  ASSERT_EQ(dx.shape, x.shape);
  int64_t dropped = 0;
  for (int64_t i = 0; i < x.size(); ++i) {
    if (y.data[i] == 0.0f) {
      ++dropped;
      EXPECT_EQ(dx.data[i], 0.0f) << i;
    } else {
      EXPECT_EQ(dx.data[i], dy.data[i] * (1.0f / keep)) << i;
    }
  }
  EXPECT_GT(dropped, 0);
  EXPECT_LT(dropped, x.size());
}

TEST(Dropout, RejectsKeepProbOutsideUnitInterval) {
  for (float keep : {0.0f, -0.5f, 1.5f}) {
    try {
      Dropout d(DropoutConfig{.name = "dropout6", .keep_prob = keep});
      FAIL() << "accepted keep_prob " << keep;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("dropout6"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("keep_prob"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace terngrad::train
