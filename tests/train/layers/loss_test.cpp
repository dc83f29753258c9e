// Softmax cross-entropy against a float64 reference (loss, analytic and
// numerical gradient), its stability, and top-k counting.
#include <gtest/gtest.h>

#include <cmath>

#include "reference.h"
#include "terngrad/train/loss.h"

namespace terngrad::train {
namespace {

using testing::Vec;

// Mean over rows of log(sum_j exp(z_j)) - z_label, in float64 (log-sum-exp
// shifted by the row maximum).
double ref_loss(const Vec& z, int64_t n, int64_t c, const std::vector<int32_t>& labels) {
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    double m = z[i * c];
    for (int64_t j = 1; j < c; ++j) m = std::max(m, z[i * c + j]);
    double s = 0;
    for (int64_t j = 0; j < c; ++j) s += std::exp(z[i * c + j] - m);
    total += m + std::log(s) - z[i * c + labels[i]];
  }
  return total / n;
}

TEST(SoftmaxCrossEntropy, LossAndGradientMatchFloat64Reference) {
  const int64_t n = 5, c = 7;
  std::mt19937_64 rng(8);
  const Tensor logits = testing::random_tensor({n, c}, rng, -4.0, 4.0);
  const std::vector<int32_t> labels{0, 6, 3, 3, 1};
  Tensor grad;
  const float loss = softmax_cross_entropy(logits, labels, grad);
  Vec z = testing::to_double(logits);
  const double ref = ref_loss(z, n, c, labels);
  EXPECT_NEAR(loss, ref, 1e-6 * std::fabs(ref));
  ASSERT_EQ(grad.shape, (Shape{n, c}));
  // Central differences of the float64 loss, step 1e-6; tolerance 1e-5 of
  // the largest gradient entry plus 1e-4 relative.
  Vec numeric(z.size());
  for (size_t i = 0; i < z.size(); ++i) {
    const double keep = z[i];
    z[i] = keep + 1e-6;
    const double up = ref_loss(z, n, c, labels);
    z[i] = keep - 1e-6;
    const double down = ref_loss(z, n, c, labels);
    z[i] = keep;
    numeric[i] = (up - down) / 2e-6;
  }
  testing::expect_close("dlogits", testing::to_double(grad), numeric, 1e-4);
  // Each row of (softmax - onehot) / N sums to 0.
  for (int64_t i = 0; i < n; ++i) {
    double s = 0;
    for (int64_t j = 0; j < c; ++j) s += grad.data[i * c + j];
    EXPECT_NEAR(s, 0.0, 1e-7);
  }
}

TEST(SoftmaxCrossEntropy, StableForHugeLogits) {
  Tensor logits({2, 4});
  logits.data = {1e4f, 1e4f - 30, -1e4f, 0,      // large, near each other
                 88.0f, 89.0f, 90.0f, -200.0f};  // exp() of them would overflow float
  const std::vector<int32_t> labels{1, 2};
  Tensor grad;
  const float loss = softmax_cross_entropy(logits, labels, grad);
  EXPECT_NEAR(loss, ref_loss(testing::to_double(logits), 2, 4, labels), 1e-6 * std::fabs(loss));
  for (float g : grad.data) ASSERT_TRUE(std::isfinite(g));

  // Near float's limits the label's probability underflows to 0 and the
  // gradient is exactly (softmax - onehot) / N.
  Tensor extreme({1, 3});
  extreme.data = {-3e38f, 3e38f, 0.0f};
  const float big = softmax_cross_entropy(extreme, std::vector<int32_t>{2}, grad);
  EXPECT_FLOAT_EQ(big, 3e38f);
  EXPECT_EQ(grad.data, (std::vector<float>{0.0f, 1.0f, -1.0f}));
}

TEST(SoftmaxCrossEntropy, RejectsBadLabelsAndShapes) {
  Tensor logits({2, 3}, 0.0f), grad;
  EXPECT_THROW(softmax_cross_entropy(logits, std::vector<int32_t>{0, 3}, grad), std::invalid_argument);
  EXPECT_THROW(softmax_cross_entropy(logits, std::vector<int32_t>{-1, 0}, grad), std::invalid_argument);
  EXPECT_THROW(softmax_cross_entropy(logits, std::vector<int32_t>{0}, grad), std::invalid_argument);
  EXPECT_THROW(softmax_cross_entropy(Tensor({2, 3, 1}), std::vector<int32_t>{0, 0}, grad), std::invalid_argument);
  EXPECT_EQ(softmax_cross_entropy(Tensor({0, 3}), std::vector<int32_t>{}, grad), 0.0f);
}

TEST(TopK, CountsWithDeterministicTies) {
  Tensor logits({4, 6});
  logits.data = {0, 1, 5, 2, 3, 4,     // label 5 (logit 4) ranks 2nd
                 1, 1, 1, 1, 1, 1,     // all tied: rank = label index
                 1, 1, 1, 1, 1, 1,
                 9, 8, 7, 6, 5, 4};    // label 5 ranks 6th
  const std::vector<int32_t> labels{5, 0, 5, 5};
  int64_t top1 = -1, top5 = -1;
  topk_correct(logits, labels, top1, top5);
  EXPECT_EQ(top1, 1);  // row 1: tied, lowest index wins
  EXPECT_EQ(top5, 2);  // rows 0 and 1; row 2's label ranks 6th among ties
  EXPECT_EQ(topk_count(logits, labels, 2), 2);
  EXPECT_EQ(topk_count(logits, labels, 6), 4);
  EXPECT_EQ(topk_count(logits, labels, 0), 0);
}

TEST(TopK, NanLabelLogitNeverCounts) {
  Tensor logits({1, 3});
  logits.data = {0.0f, std::nanf(""), -1.0f};
  int64_t top1 = 0, top5 = 0;
  topk_correct(logits, std::vector<int32_t>{1}, top1, top5);
  EXPECT_EQ(top1, 0);
  EXPECT_EQ(top5, 0);
  EXPECT_THROW(topk_count(logits, std::vector<int32_t>{3}, 1), std::invalid_argument);
}

}  // namespace
}  // namespace terngrad::train
