// VirtualWorkers' failure contract: NaN gradients are reported with the
// codec's message (naming the non-finite element), and since the update was
// already enqueued when the device found them, the object refuses further
// use until a state is uploaded again. And evaluation on the device: the
// logits at the weights and at their average against the CPU model's.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "terngrad/train/cuda/virtual_workers.h"
#include "terngrad/train/models.h"
#include "terngrad/train/optimizer.h"

namespace terngrad::train::cuda {
namespace {

// Two LeNet workers, every variable with `codec`.
VirtualWorkersConfig two_workers(const Model& m, const std::string& codec, const std::string& optimizer) {
  VirtualWorkersConfig cfg;
  cfg.num_workers = 2;
  cfg.plan.assign(m.params().size(), codec);
  cfg.optimizer.name = optimizer;
  cfg.codec_seeds = {1, 2};
  cfg.dropout_seed = [](int64_t, int w) { return static_cast<uint64_t>(w); };
  return cfg;
}

TEST(VirtualWorkers, NonFiniteGradientsFailTheStepAndPoisonTheState) {
  TG_REQUIRE_GPU();
  const auto m = make_model("lenet", ModelOptions{}, 3);
  VirtualWorkers vw(*m, two_workers(*m, "terngrad:clip=2.5,share_scale=1", "momentum"));

  std::vector<Tensor> batches = {testing::random_tensor({4, 28, 28, 1}, 1), testing::random_tensor({4, 28, 28, 1}, 2)};
  const std::vector<std::vector<int32_t>> labels = {{0, 1, 2, 3}, {4, 5, 6, 7}};
  EXPECT_TRUE(std::isfinite(vw.step(0, batches, labels, 0.01f)));

  batches[1].data[17] = std::numeric_limits<float>::quiet_NaN();
  try {
    vw.step(1, batches, labels, 0.01f);
    FAIL() << "a NaN input (so NaN gradients) was not reported";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("is NaN"), std::string::npos) << e.what();
  }
  ParamSet host = m->params();
  EXPECT_THROW(vw.download_params(host), std::logic_error);
  EXPECT_THROW(vw.step(2, batches, labels, 0.01f), std::logic_error);

  // A complete state again: usable.
  auto optimizer = make_optimizer("momentum");
  optimizer->init(host);
  vw.upload_state(HostTrainState{&host, optimizer.get(), nullptr});
  batches[1].data[17] = 0.5f;
  EXPECT_TRUE(std::isfinite(vw.step(2, batches, labels, 0.01f)));
}

// stage() + step_staged() is step(): the same losses and weights bit for
// bit, and a staged batch serves several steps (what gpu_train_step_bench
// times, the batches already on the device).
TEST(VirtualWorkers, StagedStepsAreTheStepsOnTheSameBatches) {
  TG_REQUIRE_GPU();
  const auto m = make_model("lenet", ModelOptions{}, 3);
  const std::string codec = "terngrad:clip=2.5,share_scale=1";
  VirtualWorkers direct(*m, two_workers(*m, codec, "momentum"));
  VirtualWorkers staged(*m, two_workers(*m, codec, "momentum"));
  EXPECT_THROW(staged.step_staged(0, 0.01f), std::logic_error);  // nothing staged yet

  const std::vector<Tensor> batches = {testing::random_tensor({4, 28, 28, 1}, 1),
                                       testing::random_tensor({4, 28, 28, 1}, 2)};
  const std::vector<std::vector<int32_t>> labels = {{0, 1, 2, 3}, {4, 5, 6, 7}};
  EXPECT_THROW(staged.stage(batches, {{0, 1, 2, 3}}), std::invalid_argument);  // one label vector short
  staged.stage(batches, labels);
  for (int64_t s = 0; s < 3; ++s) EXPECT_EQ(direct.step(s, batches, labels, 0.01f), staged.step_staged(s, 0.01f));
  ParamSet a = m->params(), b = m->params();
  direct.download_params(a);
  staged.download_params(b);
  for (size_t v = 0; v < a.size(); ++v) EXPECT_EQ(a.params[v].value.data, b.params[v].value.data) << "variable " << v;
}

// Issuing each worker's launches from its own host thread (the default) is
// the same work on the same streams: the same losses and weights bit for bit
// as one thread issuing all, on one weight copy and on two (devices {0, 0}:
// the peer copies of scales and payloads are issued from the threads too).
TEST(VirtualWorkers, HostThreadsGiveTheSameStepsBitForBit) {
  TG_REQUIRE_GPU();
  const auto m = make_model("lenet", ModelOptions{}, 3);
  for (const std::vector<int>& devices : {std::vector<int>{}, std::vector<int>{0, 0}}) {
    SCOPED_TRACE(devices.empty() ? "one weight copy" : "two weight copies");
    auto config = [&](bool threads) {
      VirtualWorkersConfig cfg = two_workers(*m, "terngrad:clip=2.5,share_scale=1", "momentum");
      cfg.num_workers = 4;
      cfg.codec_seeds = {1, 2, 3, 4};
      cfg.devices = devices;
      cfg.host_threads = threads;
      return cfg;
    };
    VirtualWorkers threaded(*m, config(true)), serial(*m, config(false));
    std::vector<Tensor> batches;
    std::vector<std::vector<int32_t>> labels;
    for (int w = 0; w < 4; ++w) {
      batches.push_back(testing::random_tensor({8, 28, 28, 1}, 10 + w));
      labels.push_back({0, 1, 2, 3, 4, 5, 6, 7});
    }
    for (int64_t s = 0; s < 4; ++s)  // step 0 is issued from one thread either way; 1-3 from four
      EXPECT_EQ(threaded.step(s, batches, labels, 0.01f), serial.step(s, batches, labels, 0.01f)) << "step " << s;
    ParamSet a = m->params(), b = m->params();
    threaded.download_params(a);
    serial.download_params(b);
    for (size_t v = 0; v < a.size(); ++v) EXPECT_EQ(a.params[v].value.data, b.params[v].value.data) << "variable " << v;
    for (size_t v = 0; v < a.size(); ++v)
      EXPECT_EQ(threaded.payload_to_host(3, v), serial.payload_to_host(3, v)) << "worker 3's payload, variable " << v;
  }
}

TEST(VirtualWorkers, PredictMatchesTheCpuModelAtTheWeightsAndTheAverage) {
  TG_REQUIRE_GPU();
  const auto m = make_model("lenet", ModelOptions{}, 3);
  VirtualWorkersConfig cfg = two_workers(*m, "fp32", "sgd");
  cfg.moving_average = true;
  VirtualWorkers vw(*m, cfg);
  const Tensor x = testing::random_tensor({16, 28, 28, 1}, 9);
  auto ws = m->make_workspace();
  Tensor gpu;
  vw.predict(x, false, gpu);
  EXPECT_LE(testing::relative_error(gpu, m->predict(ws, x)), 1e-4);

  // One step, then an average of the new weights (decay 0): the average's
  // logits are the trained weights' logits, which moved. TF's update,
  // shadow -= (1 - decay) * (shadow - w), leaves shadow - (shadow - w) at
  // decay 0: w to within the rounding of the difference (an H100 gave logits
  // 1 ulp apart, 2026-11-27), not w bit for bit.
  const std::vector<Tensor> batches = {testing::random_tensor({4, 28, 28, 1}, 1),
                                       testing::random_tensor({4, 28, 28, 1}, 2)};
  vw.step(0, batches, {{0, 1, 2, 3}, {4, 5, 6, 7}}, 0.1f);
  vw.update_average(1.0f);
  Tensor trained, averaged;
  vw.predict(x, false, trained);
  vw.predict(x, true, averaged);
  EXPECT_LE(testing::relative_error(averaged, trained), 1e-6);
  EXPECT_NE(trained.data, gpu.data) << "the step did not change the weights";
  ParamSet now = m->params();
  vw.download_params(now);
  auto moved = make_model("lenet", ModelOptions{}, 3);
  moved->params() = now;
  auto ws2 = moved->make_workspace();
  EXPECT_LE(testing::relative_error(trained, moved->predict(ws2, x)), 1e-4);
}

}  // namespace
}  // namespace terngrad::train::cuda
