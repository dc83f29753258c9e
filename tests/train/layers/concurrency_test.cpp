// Workers share the layers and the parameters and differ only in their
// scratch: concurrent forward/backward must give what a lone worker gives.
#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

#include "reference.h"
#include "terngrad/train/layers.h"

namespace terngrad::train {
namespace {

struct Net {
  std::vector<std::unique_ptr<Layer>> layers;
  ParamSet params;
};

Net make_net() {
  Net net;
  net.layers.push_back(std::make_unique<Conv2D>(Conv2DConfig{.name = "conv1", .filters = 8, .kernel_h = 3, .kernel_w = 3, .relu = true}));
  net.layers.push_back(std::make_unique<MaxPool>(MaxPoolConfig{.name = "pool1", .kernel = 3, .stride = 2, .padding = Padding::kSame}));
  net.layers.push_back(std::make_unique<LocalResponseNorm>(LocalResponseNormConfig{.name = "norm1", .depth_radius = 2, .alpha = 0.1f, .beta = 0.75f}));
  net.layers.push_back(std::make_unique<Conv2D>(Conv2DConfig{.name = "conv2", .filters = 8, .kernel_h = 3, .kernel_w = 3, .groups = 2}));
  net.layers.push_back(std::make_unique<ReLU>("relu2"));
  net.layers.push_back(std::make_unique<Dense>(DenseConfig{.name = "fc1", .units = 16, .relu = true}));
  net.layers.push_back(std::make_unique<Dropout>(DropoutConfig{.name = "dropout1", .keep_prob = 0.5f}));
  net.layers.push_back(std::make_unique<Dense>(DenseConfig{.name = "logits", .units = 5, .is_logits = true}));
  std::mt19937_64 rng(3);
  Shape s{1, 9, 9, 3};
  for (auto& l : net.layers) {
    l->create_params(s, net.params, rng);
    s = l->output_shape(s);
  }
  return net;
}

// One worker's step: every activation gradient and parameter gradient.
GradSet step(const Net& net, const Tensor& x, uint64_t seed) {
  std::vector<std::unique_ptr<LayerScratch>> scratch;
  for (const auto& l : net.layers) scratch.push_back(l->make_scratch());
  std::vector<Tensor> acts(net.layers.size() + 1), dacts(net.layers.size() + 1);
  GradSet grads;
  for (const Param& p : net.params.params) grads.emplace_back(p.value.shape);
  const ForwardContext ctx{true, seed};
  for (int repeat = 0; repeat < 3; ++repeat) {  // reused scratch, as in training
    for (auto& g : grads) g.fill(0.0f);
    const Tensor* in = &x;
    for (size_t i = 0; i < net.layers.size(); ++i) {
      net.layers[i]->forward(net.params, *in, acts[i + 1], scratch[i].get(), ctx);
      in = &acts[i + 1];
    }
    Tensor dy(in->shape, 1.0f);
    const Tensor* d = &dy;
    for (size_t i = net.layers.size(); i-- > 0;) {
      net.layers[i]->backward(net.params, i == 0 ? x : acts[i], acts[i + 1], *d, &dacts[i], grads, scratch[i].get());
      d = &dacts[i];
    }
  }
  grads.push_back(dacts[0]);
  return grads;
}

TEST(Concurrency, WorkersWithOwnScratchMatchALoneWorker) {
  const Net net = make_net();
  std::mt19937_64 rng(5);
  std::vector<Tensor> inputs;
  for (int w = 0; w < 4; ++w) inputs.push_back(testing::random_tensor({3, 9, 9, 3}, rng));
  std::vector<GradSet> alone;
  for (int w = 0; w < 4; ++w) alone.push_back(step(net, inputs[w], 100 + w));
  std::vector<GradSet> together(4);
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w) threads.emplace_back([&, w] { together[w] = step(net, inputs[w], 100 + w); });
  for (auto& t : threads) t.join();
  for (int w = 0; w < 4; ++w) {
    ASSERT_EQ(together[w].size(), alone[w].size());
    for (size_t i = 0; i < alone[w].size(); ++i) EXPECT_EQ(together[w][i].data, alone[w][i].data) << "worker " << w << " tensor " << i;
  }
}

}  // namespace
}  // namespace terngrad::train
