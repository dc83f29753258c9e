// The paper's networks: shapes, parameter counts and FLOPs as in their definitions.
#include <limits>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

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

// params_needed comes before the forward pass reads any element it names:
// each variable whole before its layer, except a Dense layer's weights,
// requested a row block at a time, in order. A replica that fills the
// variables only as far as they are requested (as the overlapped step
// applies the last step's sums) gets the loss and gradients of a model that
// held them all along, bit for bit. grads_part_ready reports each Dense
// layer's weight gradient a row block at a time.
TEST(Models, ParamsNeededComesBeforeTheForwardPassReadsTheElements) {
  auto m = tt::make_model("lenet", {}, 1);
  auto ws = m->make_workspace();
  auto grads = m->make_grads(), late_grads = m->make_grads();
  tt::Tensor x({2, 28, 28, 1});
  for (size_t i = 0; i < x.data.size(); ++i) x.data[i] = std::sin(0.01f * static_cast<float>(i));
  const std::vector<int32_t> y = {3, 7};
  tt::ForwardContext ctx;
  ctx.training = true;
  const float loss = m->forward_backward(ws, x, y, grads, ctx);
  std::vector<std::vector<float>> kept;
  for (auto& p : m->params().params) {
    kept.push_back(p.value.data);
    std::fill(p.value.data.begin(), p.value.data.end(), std::numeric_limits<float>::quiet_NaN());
  }
  std::vector<std::pair<size_t, int64_t>> calls, parts;
  const float late_loss = m->forward_backward(
      ws, x, y, late_grads, ctx, {},
      [&](size_t v, int64_t elements) {
        calls.emplace_back(v, elements);
        std::copy_n(kept[v].begin(), elements, m->params().params[v].value.data.begin());
      },
      [&](float, size_t v, int64_t elements) { parts.emplace_back(v, elements); });
  // conv1 and conv2 whole; fc3's 2450 x 500 weights in blocks of 65 rows,
  // then its biases; the logits layer's 500 x 10 weights in one block.
  std::vector<std::pair<size_t, int64_t>> expected = {{0, 500}, {1, 20}, {2, 25000}, {3, 50}};
  for (int64_t rows = 65; rows < 2450 + 65; rows += 65) expected.emplace_back(4, std::min<int64_t>(rows, 2450) * 500);
  for (auto c : std::vector<std::pair<size_t, int64_t>>{{5, 500}, {6, 5000}, {7, 10}}) expected.push_back(c);
  EXPECT_EQ(calls, expected);
  // The weight gradients of the two Dense layers are reported done in row
  // blocks of about 64 Ki weights (131 rows of fc3's), last layer first.
  std::vector<std::pair<size_t, int64_t>> expected_parts = {{6, 5000}};
  for (int64_t rows = 131; rows < 2450 + 131; rows += 131) expected_parts.emplace_back(4, std::min<int64_t>(rows, 2450) * 500);
  EXPECT_EQ(parts, expected_parts);
  EXPECT_EQ(late_loss, loss);
  for (size_t v = 0; v < grads.size(); ++v) EXPECT_EQ(late_grads[v].data, grads[v].data) << v;
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

// A forward/backward at 224 from the initial weights: the loss is near
// log(classes), every variable gets a gradient, the batch norm state folds
// and evaluation (at the moving statistics) gives finite logits.
void check_step(tt::Model& m, int64_t batch, float loss_tolerance) {
  auto ws = m.make_workspace();
  auto grads = m.make_grads();
  std::mt19937_64 rng(4);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  tt::Tensor x({batch, 224, 224, 3});
  for (float& v : x.data) v = u(rng);
  std::vector<int32_t> y;
  for (int64_t i = 0; i < batch; ++i) y.push_back(static_cast<int32_t>(7 + 300 * i));
  tt::ForwardContext ctx;
  ctx.training = true;
  ctx.dropout_seed = 9;
  const float loss = m.forward_backward(ws, x, y, grads, ctx);
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_NEAR(loss, std::log(static_cast<float>(m.num_classes())), loss_tolerance);
  for (size_t v = 0; v < grads.size(); ++v) {
    double gsum = 0;
    for (float g : grads[v].data) gsum += std::fabs(g);
    EXPECT_TRUE(std::isfinite(gsum)) << m.params().params[v].name;
    EXPECT_GT(gsum, 0) << m.params().params[v].name << " got no gradient";
  }
  const std::vector<float> before = m.state().vars.front().value.data;
  m.fold_state(ws);
  EXPECT_NE(m.state().vars.front().value.data, before) << "fold_state left " << m.state().vars.front().name;
  const tt::Tensor& logits = m.predict(ws, x);
  ASSERT_EQ(logits.shape, (tt::Shape{batch, m.num_classes()}));
  for (float v : logits.data) ASSERT_TRUE(std::isfinite(v));
}

struct Mixed {
  int64_t b0, b1a, b1b, b2a, b2b, b3;
};

TEST(Models, GoogLeNetMatchesItsDefinition) {
  tt::ModelOptions o;
  o.num_classes = 1000;
  auto m = tt::make_model("googlenet", o, 1);
  // Parameters and MACs from inception_v1.py's table: convs have no biases
  // but a batch norm beta per filter; the logits a bias.
  int64_t params = 0, macs = 0, cin = 3;
  auto conv = [&](int64_t k, int64_t f, int64_t hw, int64_t in) {
    params += k * k * in * f + f;
    macs += hw * hw * k * k * in * f;
  };
  conv(7, 64, 112, 3);
  conv(1, 64, 56, 64);
  conv(3, 192, 56, 64);
  cin = 192;
  auto mixed = [&](const Mixed& x, int64_t hw) {
    conv(1, x.b0, hw, cin);
    conv(1, x.b1a, hw, cin);
    conv(3, x.b1b, hw, x.b1a);
    conv(1, x.b2a, hw, cin);
    conv(3, x.b2b, hw, x.b2a);
    conv(1, x.b3, hw, cin);
    cin = x.b0 + x.b1b + x.b2b + x.b3;
  };
  mixed({64, 96, 128, 16, 32, 32}, 28);
  mixed({128, 128, 192, 32, 96, 64}, 28);
  mixed({192, 96, 208, 16, 48, 64}, 14);
  mixed({160, 112, 224, 24, 64, 64}, 14);
  mixed({128, 128, 256, 24, 64, 64}, 14);
  mixed({112, 144, 288, 32, 64, 64}, 14);
  mixed({256, 160, 320, 32, 128, 128}, 14);
  mixed({256, 160, 320, 32, 128, 128}, 7);
  mixed({384, 192, 384, 48, 128, 128}, 7);
  EXPECT_EQ(cin, 1024);
  params += 1024 * 1000 + 1000;
  macs += 1024 * 1000;
  EXPECT_EQ(param_count(*m), params);
  EXPECT_NEAR(static_cast<double>(params), 6.6e6, 0.1e6);
  EXPECT_EQ(m->forward_macs_per_example(), macs);
  EXPECT_NEAR(static_cast<double>(macs), 1.5e9, 0.1e9);
  // 57 convs, each with a beta and a moving mean and variance.
  EXPECT_EQ(m->params().size(), 57u * 2 + 2);
  EXPECT_EQ(m->state().size(), 57u * 2);
  const auto& ps = m->params().params;
  EXPECT_EQ(ps[0].name, "Conv2d_1a_7x7/weights");
  EXPECT_EQ(ps[1].name, "Conv2d_1a_7x7/BatchNorm/beta");
  EXPECT_EQ(m->state().vars[0].name, "Conv2d_1a_7x7/BatchNorm/moving_mean");
  EXPECT_EQ(m->state().vars[1].name, "Conv2d_1a_7x7/BatchNorm/moving_variance");
  bool seen = false, quirk = false;
  for (const auto& p : ps) {
    seen |= p.name == "Mixed_3b/Branch_1/Conv2d_0b_3x3/weights";
    quirk |= p.name == "Mixed_5b/Branch_2/Conv2d_0a_3x3/weights";  // inception_v1.py's name
    const bool weights = p.name.ends_with("/weights");
    EXPECT_FLOAT_EQ(p.weight_decay, weights ? 4e-5f : 0.0f) << p.name;
    EXPECT_EQ(p.is_logits, p.name.starts_with("logits/")) << p.name;
  }
  EXPECT_TRUE(seen);
  EXPECT_TRUE(quirk);
  EXPECT_EQ(ps.back().name, "logits/Conv2d_0c_1x1/biases");
  check_step(*m, 2, 1.0f);
}

TEST(Models, VggAMatchesItsDefinition) {
  tt::ModelOptions o;
  o.num_classes = 1000;
  auto m = tt::make_model("vgg_a", o, 1);
  int64_t params = 0, macs = 0;
  auto conv = [&](int64_t in, int64_t f, int64_t hw) {
    params += 9 * in * f + f;  // weights and batch norm beta
    macs += hw * hw * 9 * in * f;
  };
  auto fc = [&](int64_t in, int64_t out) {
    params += in * out + out;
    macs += in * out;
  };
  conv(3, 64, 224);
  conv(64, 128, 112);
  conv(128, 256, 56);
  conv(256, 256, 56);
  conv(256, 512, 28);
  conv(512, 512, 28);
  conv(512, 512, 14);
  conv(512, 512, 14);
  fc(7 * 7 * 512, 4096);
  fc(4096, 4096);
  fc(4096, 1000);
  EXPECT_EQ(param_count(*m), params);
  EXPECT_NEAR(static_cast<double>(params), 132.9e6, 0.1e6);
  EXPECT_EQ(m->forward_macs_per_example(), macs);
  EXPECT_NEAR(static_cast<double>(macs), 7.6e9, 0.1e9);
  EXPECT_EQ(m->state().size(), 16u);
  const auto& ps = m->params().params;
  EXPECT_EQ(ps[0].name, "conv1/weights");
  EXPECT_EQ(ps[1].name, "conv1/BatchNorm/beta");
  EXPECT_EQ(ps.back().name, "fc16/biases");
  for (const auto& p : ps) {
    EXPECT_FLOAT_EQ(p.weight_decay, p.name.ends_with("/weights") ? 5e-4f : 0.0f) << p.name;
    EXPECT_EQ(p.is_logits, p.name.starts_with("fc16/")) << p.name;
  }
  // Glorot uniform: conv1's weights within sqrt(6 / (27 + 576)).
  float wmax = 0;
  for (float v : ps[0].value.data) wmax = std::max(wmax, std::fabs(v));
  EXPECT_LE(wmax, std::sqrt(6.0f / (27 + 576)));
  EXPECT_GT(wmax, 0.9f * std::sqrt(6.0f / (27 + 576)));
  // Glorot-initialized fc14 sums 25088 batch-normalized, max-pooled ReLU
  // features, so the logits start with a spread of about 3 (loss ~ 11 at
  // 1000 classes, not log(1000) = 6.9): the definition's, not a bug.
  check_step(*m, 1, 5.0f);
}

TEST(Models, NetsWithoutBatchNormHaveNoState) {
  for (const char* net : {"lenet", "cifarnet", "alexnet"}) EXPECT_TRUE(tt::make_model(net, {}, 1)->state().empty()) << net;
}

TEST(Models, UnknownNetIsAnError) { EXPECT_THROW(tt::make_model("resnet", {}, 1), std::invalid_argument); }

}  // namespace
