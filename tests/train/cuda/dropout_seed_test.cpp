// The dropout seed reaches the GPU layers through VirtualWorkers: every
// worker's forward at a step uses the seed the config's function gives for
// (step, worker), so the step's loss is the mean of the CPU Model's losses
// under those seeds (the in-process GPU trainer passes the CPU trainer's
// stream_seed(seed, step, w, kDropout) this way). Loss to 1e-5 relative, as
// in gpu_model_test.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "gpu_test_util.h"
#include "terngrad/train/cuda/virtual_workers.h"

namespace terngrad::train::cuda {
namespace {

uint64_t test_seed(int64_t step, int w) { return static_cast<uint64_t>(step) * 1000 + static_cast<uint64_t>(w) + 1; }

VirtualWorkersConfig fp32_sgd(const Model& m, int workers) {
  VirtualWorkersConfig cfg;
  cfg.num_workers = workers;
  cfg.plan.assign(m.params().size(), "fp32");
  cfg.optimizer.name = "sgd";
  for (int w = 0; w < workers; ++w) cfg.codec_seeds.push_back(100 + w);
  return cfg;
}

TEST(GpuDropoutSeed, EachWorkerDropsWithItsSeedOfTheStep) {
  TG_REQUIRE_GPU();
  const auto m = testing::alexnet_classifier();
  constexpr int kWorkers = 2;
  constexpr int64_t kBatch = 4, kStep = 5;
  std::vector<std::pair<int64_t, int>> asked;
  VirtualWorkersConfig cfg = fp32_sgd(*m, kWorkers);
  cfg.dropout_seed = [&asked](int64_t step, int w) {
    asked.emplace_back(step, w);
    return test_seed(step, w);
  };

  std::vector<Tensor> batches;
  std::vector<std::vector<int32_t>> labels;
  double cpu_mean = 0;
  for (int w = 0; w < kWorkers; ++w) {
    batches.push_back(testing::random_tensor({kBatch, 6, 6, 16}, 10 + w));
    labels.push_back({0, 3, 7, 9});
    auto ws = m->make_workspace();
    GradSet grads = m->make_grads();
    cpu_mean += m->forward_backward(ws, batches[w], labels[w], grads, ForwardContext{true, test_seed(kStep, w)});
  }
  cpu_mean /= kWorkers;

  VirtualWorkers vw(*m, cfg);  // uploads the same initial weights
  const float loss = vw.step(kStep, batches, labels, 0.01f);
  EXPECT_NEAR(loss, cpu_mean, 1e-5 * cpu_mean);
  EXPECT_EQ(asked, (std::vector<std::pair<int64_t, int>>{{kStep, 0}, {kStep, 1}}));
}

TEST(GpuDropoutSeed, VirtualWorkersRefuseAConfigWithoutSeedFunction) {
  TG_REQUIRE_GPU();
  const auto m = testing::alexnet_classifier();
  try {
    VirtualWorkers vw(*m, fp32_sgd(*m, 1));
    FAIL() << "a config without a dropout seed function was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("dropout seed"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace terngrad::train::cuda
