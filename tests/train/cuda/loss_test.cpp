// GPU softmax cross-entropy against the CPU loss: loss and dlogits to 1e-6
// relative (same formula, double sums; expf may differ from std::exp by an ulp).
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include "gpu_test_util.h"
#include "terngrad/train/cuda/errors.h"
#include "terngrad/train/cuda/loss.h"
#include "terngrad/train/loss.h"

namespace terngrad::train::cuda {
namespace {

TEST(GpuSoftmaxCrossEntropy, MatchesCpu) {
  TG_REQUIRE_GPU();
  const Tensor logits = testing::random_tensor({64, 10}, 21, -8.0f, 8.0f);
  std::vector<int32_t> labels(64);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>((i * 7) % 10);
  Tensor dlogits;
  const float loss = terngrad::train::softmax_cross_entropy(logits, labels, dlogits);

  GpuContext ctx;
  const DeviceTensor d_logits = to_device(logits);
  DeviceBuffer d_labels(labels.size() * sizeof(int32_t)), d_loss(sizeof(float)), rows;
  TG_CUDA_CHECK(cudaMemcpy(d_labels.data(), labels.data(), labels.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  DeviceTensor d_dlogits;
  softmax_cross_entropy(ctx, d_logits, d_labels.as<int32_t>(), d_dlogits, d_loss.as<float>(), rows);
  ctx.synchronize();
  float gpu_loss = 0;
  TG_CUDA_CHECK(cudaMemcpy(&gpu_loss, d_loss.data(), sizeof(float), cudaMemcpyDeviceToHost));
  EXPECT_NEAR(gpu_loss, loss, 1e-6 * std::abs(loss));
  EXPECT_LE(testing::relative_error(to_host(d_dlogits), dlogits), 1e-6);
}

TEST(DeviceTensor, RoundTripIsExact) {
  TG_REQUIRE_GPU();
  const Tensor t = testing::random_tensor({3, 4, 5}, 22);
  const Tensor back = to_host(to_device(t));
  EXPECT_EQ(back.shape, t.shape);
  EXPECT_EQ(back.data, t.data);
}

TEST(GpuAvailability, AnswersWithoutThrowing) {
  // Runs everywhere: the question "is there a GPU" must never throw, and
  // without one the reason must be a readable sentence.
  const bool available = gpu_available();
  if (!available) {
    EXPECT_FALSE(gpu_unavailable_reason().empty());
  }
  std::cout << "[ gpu      ] " << (available ? "device present" : gpu_unavailable_reason()) << "\n";
}

}  // namespace
}  // namespace terngrad::train::cuda
