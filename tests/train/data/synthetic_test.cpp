// Synthetic data: deterministic, and learnable by a trivial classifier on
// a test set made with another seed.
#include <cmath>

#include "terngrad/train/datasets.h"
#include "terngrad/train/input_pipeline.h"
#include "test_util.h"

namespace {

using namespace terngrad::train;
using namespace tg_test;

TEST(Synthetic, DeterministicForArguments) {
  const Dataset a = make_synthetic(20, 12, 10, 3, 7, 42), b = make_synthetic(20, 12, 10, 3, 7, 42);
  EXPECT_EQ(a.images, b.images);
  EXPECT_EQ(a.labels, b.labels);
  const Dataset c = make_synthetic(20, 12, 10, 3, 7, 43);
  EXPECT_NE(a.images, c.images);
  check_dataset(a, "synthetic");
  EXPECT_EQ(a.num_classes, 7);
  EXPECT_THROW(make_synthetic(1, 0, 4, 1, 2, 1), std::invalid_argument);
}

TEST(Synthetic, LearnableAcrossSeedsAfterStandardization) {
  // Nearest class mean, fitted on the train set, on a test set from another
  // seed: far above chance (10%) means the class structure survives
  // per-image standardization and is shared between seeds.
  const int classes = 10;
  const Dataset train = make_synthetic(500, 24, 24, 3, classes, 1), test = make_synthetic(200, 24, 24, 3, classes, 2);
  auto preprocess = [](const Dataset& d) {
    std::vector<int64_t> idx(d.count);
    for (int64_t i = 0; i < d.count; ++i) idx[i] = i;
    Tensor x;
    std::vector<int32_t> labels;
    fill_batch(d, idx, Preprocess::kStandardize, 0, x, labels);
    return x;
  };
  const Tensor xt = preprocess(train), xs = preprocess(test);
  const int64_t per = 24 * 24 * 3;
  std::vector<double> mean(classes * per, 0.0);
  std::vector<int> n(classes, 0);
  for (int64_t i = 0; i < train.count; ++i) {
    ++n[train.labels[i]];
    for (int64_t k = 0; k < per; ++k) mean[train.labels[i] * per + k] += xt.data[i * per + k];
  }
  for (int c = 0; c < classes; ++c)
    for (int64_t k = 0; k < per; ++k) mean[c * per + k] /= std::max(n[c], 1);
  int correct = 0;
  for (int64_t i = 0; i < test.count; ++i) {
    int best = -1;
    double best_d = 1e300;
    for (int c = 0; c < classes; ++c) {
      double dist = 0;
      for (int64_t k = 0; k < per; ++k) dist += std::pow(xs.data[i * per + k] - mean[c * per + k], 2);
      if (dist < best_d) best_d = dist, best = c;
    }
    correct += best == test.labels[i];
  }
  EXPECT_GT(correct, 180) << correct << " of 200";
}

}  // namespace
