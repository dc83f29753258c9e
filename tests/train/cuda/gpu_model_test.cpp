// The whole GPU model against the CPU Model: forward_backward of LeNet and
// CifarNet on the same batch and weights. Loss to 1e-5 relative; every
// parameter gradient to 1e-4 of its largest magnitude (the per-layer bounds,
// compounded through 6 and 9 layers).
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include "gpu_test_util.h"
#include "terngrad/train/cuda/errors.h"
#include "terngrad/train/cuda/gpu_model.h"
#include "terngrad/train/layers.h"
#include "terngrad/train/models.h"

namespace terngrad::train::cuda {
namespace {

void check_model(const std::string& net, int64_t batch) {
  auto model = make_model(net, ModelOptions{}, 3);
  Shape in{batch};
  for (int64_t d : model->input_shape()) in.push_back(d);
  const Tensor x = testing::random_tensor(in, 4);
  std::vector<int32_t> labels(batch);
  for (int64_t i = 0; i < batch; ++i) labels[i] = static_cast<int32_t>(i % 10);

  auto ws = model->make_workspace();
  GradSet grads = model->make_grads();
  const float loss = model->forward_backward(ws, x, labels, grads, ForwardContext{true, 0});

  GpuModel gpu(*model);
  GpuContext ctx;
  auto gws = gpu.make_workspace();
  const DeviceParams params = gpu.upload_params(ctx.stream());
  DeviceGrads dgrads = gpu.make_grads();
  const DeviceTensor dx = to_device(x);
  DeviceBuffer dlabels(batch * sizeof(int32_t)), dloss(sizeof(float));
  TG_CUDA_CHECK(cudaMemcpy(dlabels.data(), labels.data(), batch * sizeof(int32_t), cudaMemcpyHostToDevice));
  gpu.forward_backward(ctx, gws, params, dx, dlabels.as<int32_t>(), dgrads, dloss.as<float>());
  ctx.synchronize();
  float gloss = 0;
  TG_CUDA_CHECK(cudaMemcpy(&gloss, dloss.data(), sizeof(float), cudaMemcpyDeviceToHost));
  EXPECT_NEAR(gloss, loss, 1e-5 * std::abs(loss)) << net;
  for (size_t v = 0; v < grads.size(); ++v)
    EXPECT_LE(testing::relative_error(to_host(dgrads[v]), grads[v]), 1e-4) << net << " " << model->params().params[v].name;
}

TEST(GpuModel, LeNetForwardBackwardMatchesCpu) {
  TG_REQUIRE_GPU();
  check_model("lenet", 16);
}

TEST(GpuModel, CifarNetForwardBackwardMatchesCpu) {
  TG_REQUIRE_GPU();
  check_model("cifarnet", 8);
}

TEST(GpuModel, DropoutIsRefusedNamingTheLayer) {
  // Dropout (AlexNet) has no GPU twin yet: construction must fail with the
  // layer's name. Host code: runs without a device.
  Model m("tiny", {4, 4, 1}, 10);
  m.add(std::make_unique<Dense>(DenseConfig{.name = "fc", .units = 8, .relu = true}));
  m.add(std::make_unique<Dropout>(DropoutConfig{"dropout6", 0.5f}));
  m.add(std::make_unique<Dense>(DenseConfig{.name = "logits", .units = 10, .is_logits = true}));
  m.build(1);
  try {
    GpuModel gpu(m);
    FAIL() << "a model with dropout was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("dropout6"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace terngrad::train::cuda
