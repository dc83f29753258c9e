// Virtual workers spread over several GPUs: every GPU holds a copy of the
// weights, receives the other GPUs' packed payloads (fp32 gradients for fp32
// variables), and sums all workers in worker order, so the weights must come
// out bit-identical to the one-GPU run's. Listing device 0 twice runs the
// whole several-GPU path (separate weight copies, peer copies, cross-device
// events) on one GPU; two physical GPUs are checked where a machine has them.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "terngrad/train/cuda/virtual_workers.h"
#include "terngrad/train/models.h"

namespace terngrad::train::cuda {
namespace {

constexpr int kWorkers = 4;
constexpr int64_t kBatch = 8, kSteps = 4;

VirtualWorkersConfig config(const Model& m, const std::string& codec, std::vector<int> devices) {
  VirtualWorkersConfig cfg;
  cfg.num_workers = kWorkers;
  cfg.plan.assign(m.params().size(), codec);
  cfg.plan.back() = "fp32";  // the logits' biases travel as float32, as by default
  cfg.optimizer.name = "momentum";
  cfg.moving_average = true;
  for (int w = 0; w < kWorkers; ++w) cfg.codec_seeds.push_back(500 + w);
  cfg.dropout_seed = [](int64_t step, int w) { return static_cast<uint64_t>(step * 31 + w); };
  cfg.devices = std::move(devices);
  return cfg;
}

struct Run {
  std::vector<float> losses;
  ParamSet weights;
  std::vector<std::vector<uint8_t>> payloads;  // the last step's, worker by worker, first variable
};

Run train(const std::string& codec, std::vector<int> devices) {
  const auto m = make_model("lenet", ModelOptions{}, 3);
  VirtualWorkers vw(*m, config(*m, codec, std::move(devices)));
  Run r;
  for (int64_t step = 0; step < kSteps; ++step) {
    std::vector<Tensor> batches;
    std::vector<std::vector<int32_t>> labels;
    for (int w = 0; w < kWorkers; ++w) {
      batches.push_back(testing::random_tensor({kBatch, 28, 28, 1}, 1000 * step + w));
      labels.emplace_back();
      for (int64_t i = 0; i < kBatch; ++i) labels.back().push_back(static_cast<int32_t>((i * 7 + w + step) % 10));
    }
    r.losses.push_back(vw.step(step, batches, labels, 0.05f));
    vw.update_average(0.1f);
  }
  r.weights = m->params();
  vw.download_params(r.weights);
  for (int w = 0; w < kWorkers; ++w) r.payloads.push_back(vw.payload_to_host(w, 0));
  return r;
}

void expect_same_run(const Run& a, const Run& b) {
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.payloads, b.payloads);
  ASSERT_EQ(a.weights.size(), b.weights.size());
  for (size_t v = 0; v < a.weights.size(); ++v)
    EXPECT_EQ(a.weights.params[v].value.data, b.weights.params[v].value.data) << a.weights.params[v].name;
}

TEST(MultiDevice, DeviceListedTwiceTrainsTheOneDeviceWeights) {
  TG_REQUIRE_GPU();
  for (const std::string codec : {"terngrad:clip=2.5,share_scale=1", "terngrad:clip=2.5,share_scale=0", "fp32"}) {
    SCOPED_TRACE(codec);
    expect_same_run(train(codec, {0}), train(codec, {0, 0}));
  }
}

TEST(MultiDevice, TwoGpusTrainTheOneDeviceWeights) {
  TG_REQUIRE_GPU();
  if (gpu_count() < 2)
    GTEST_SKIP() << "needs 2 CUDA devices, this machine has " << gpu_count()
                 << " (the same path runs on one GPU in DeviceListedTwiceTrainsTheOneDeviceWeights)";
  for (const std::string codec : {"terngrad:clip=2.5,share_scale=1", "fp32"}) {
    SCOPED_TRACE(codec);
    expect_same_run(train(codec, {0}), train(codec, {0, 1}));
  }
}

TEST(MultiDevice, BadDeviceListsAreRefusedByName) {
  const auto m = make_model("lenet", ModelOptions{}, 3);
  auto refused = [&](std::vector<int> devices, const std::string& needle) {
    try {
      VirtualWorkersConfig cfg = config(*m, "fp32", std::move(devices));
      cfg.num_workers = 2;
      cfg.codec_seeds.resize(2);
      VirtualWorkers vw(*m, cfg);
      ADD_FAILURE() << "accepted; expected a message containing \"" << needle << "\"";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  refused({0, 0, 0}, "3 devices for 2 workers");
  refused({99, 0}, "device 99 does not exist");
}

}  // namespace
}  // namespace terngrad::train::cuda
