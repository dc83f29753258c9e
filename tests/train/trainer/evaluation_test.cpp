// Evaluation through another backend's logits (what a --device=gpu run
// passes): the same batches, preprocessing and counting as the CPU
// evaluation, so the CPU model's logits through that path give the CPU's
// accuracy exactly, and a backend that always answers class 0 scores the
// test set's share of class 0.
#include <gtest/gtest.h>

#include <algorithm>

#include "session.h"  // private to the trainer: the evaluation it runs

namespace tt = terngrad::train;
namespace td = terngrad::train::detail;

TEST(Evaluation, AnotherBackendsLogitsAreCountedLikeTheCpus) {
  tt::TrainConfig c;
  c.net = "lenet";
  c.dataset = "synthetic";
  c.synthetic_examples = 256;
  c.eval_batch_size = 48;  // not a divisor of the test set: a short last batch
  c.moving_average_decay = 0.99;
  c.quiet = true;
  td::TrainingSession s(c, 1, {0});

  tt::TrainResult cpu;
  s.evaluate_into(cpu);
  ASSERT_GT(cpu.eval_examples, c.eval_batch_size);

  tt::Model::Workspace ws = s.model().make_workspace();
  td::TrainingSession::DeviceLogits same;
  same.raw = [&](const tt::Tensor& x, tt::Tensor& logits) { logits = s.model().predict(ws, x); };
  same.average = same.raw;  // the average starts at the weights
  tt::TrainResult other;
  s.evaluate_into(other, &same);
  EXPECT_EQ(other.eval_examples, cpu.eval_examples);
  EXPECT_EQ(other.top1, cpu.top1);
  EXPECT_EQ(other.top5, cpu.top5);
  EXPECT_EQ(other.ema_top1, cpu.ema_top1);

  td::TrainingSession::DeviceLogits zero;
  zero.raw = [&](const tt::Tensor& x, tt::Tensor& logits) {
    logits = tt::Tensor({x.dim(0), s.model().num_classes()});
    for (int64_t i = 0; i < x.dim(0); ++i) logits.data[i * s.model().num_classes()] = 1.0f;
  };
  zero.average = zero.raw;
  tt::TrainResult constant;
  s.evaluate_into(constant, &zero);
  const auto& labels = s.data().test.labels;
  const auto zeros = std::count(labels.begin(), labels.begin() + constant.eval_examples, 0);
  EXPECT_DOUBLE_EQ(constant.top1, static_cast<double>(zeros) / constant.eval_examples);
}
