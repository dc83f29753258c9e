// The paper's networks: shapes, parameter counts and FLOPs as in their definitions.
#include <gtest/gtest.h>

#include "terngrad/train/models.h"

namespace tt = terngrad::train;

namespace {

int64_t param_count(const tt::Model& m) {
  int64_t n = 0;
  for (const auto& p : m.params().params) n += p.value.size();
  return n;
}

TEST(Models, LeNetMatchesItsDefinition) {
  auto m = tt::make_model("lenet", {}, 1);
  // conv1 5*5*1*20+20, conv2 5*5*20*50+50, fc3 2450*500+500, logits 500*10+10
  EXPECT_EQ(param_count(*m), 520 + 25050 + 1225500 + 5010);
  EXPECT_EQ(m->forward_macs_per_example(), 28 * 28 * 20 * 25 + 14 * 14 * 50 * 500 + 2450 * 500 + 500 * 10);
  EXPECT_EQ(m->params().params.back().name, "logits/biases");
  EXPECT_TRUE(m->params().params.back().is_logits);
  EXPECT_FLOAT_EQ(m->params().params[0].weight_decay, 5e-4f);
}

TEST(Models, CifarNetMatchesItsDefinition) {
  auto m = tt::make_model("cifarnet", {}, 1);
  // conv1 5*5*3*64+64, conv2 5*5*64*64+64, local3 2304*384+384, local4 384*192+192, softmax 192*10+10
  EXPECT_EQ(param_count(*m), 4864 + 102464 + 885120 + 73920 + 1930);
  for (const auto& p : m->params().params) {
    const bool fc_weights = p.name == "local3/weights" || p.name == "local4/weights";
    EXPECT_FLOAT_EQ(p.weight_decay, fc_weights ? 0.004f : 0.0f) << p.name;
  }
}

TEST(Models, AlexNetRunsForwardBackward) {
  tt::ModelOptions o;
  o.num_classes = 1001;
  auto m = tt::make_model("alexnet", o, 1);
  // About 61M parameters, most in fc6/fc7 (fc6 sees 6*6*256 = 9216 inputs).
  EXPECT_NEAR(static_cast<double>(param_count(*m)), 62.4e6, 1.5e6);
  auto ws = m->make_workspace();
  auto grads = m->make_grads();
  tt::Tensor x({2, 224, 224, 3}, 0.1f);
  std::vector<int32_t> y = {3, 1000};
  tt::ForwardContext ctx;
  ctx.training = true;
  const float loss = m->forward_backward(ws, x, y, grads, ctx);
  EXPECT_NEAR(loss, std::log(1001.0f), 0.5f);  // near-uniform logits at init
  double gsum = 0;
  for (const auto& g : grads)
    for (float v : g.data) gsum += std::fabs(v);
  EXPECT_GT(gsum, 0);
}

TEST(Models, UnknownNetIsAnError) { EXPECT_THROW(tt::make_model("resnet", {}, 1), std::invalid_argument); }

}  // namespace
