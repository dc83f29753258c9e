// GPU optimizer kernels against the CPU optimizers (train/optim), three
// updates from the same weights and gradients, the same float expressions on
// both sides; they differ only where one compiler contracts a*b+c into an
// FMA and the other does not (GCC does under -march=native): bound 1e-6
// relative to the largest weight for all three.
#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "terngrad/train/cuda/errors.h"
#include "terngrad/train/cuda/gpu_optimizer.h"
#include "terngrad/train/optimizer.h"

namespace terngrad::train::cuda {
namespace {

void check(const std::string& name, double bound) {
  ParamSet params;
  params.add(Param{"a", testing::random_tensor({257}, 1)});
  params.add(Param{"b", testing::random_tensor({3, 5}, 2)});
  auto cpu = make_optimizer(name);
  GpuOptimizerOptions o;
  o.name = name;
  GpuOptimizer gpu(o);
  std::vector<DeviceTensor> dparams;
  for (const Param& p : params.params) dparams.push_back(to_device(p.value));
  for (int step = 0; step < 3; ++step) {
    GradSet grads;
    std::vector<DeviceTensor> dgrads;
    for (size_t v = 0; v < params.size(); ++v) {
      grads.push_back(testing::random_tensor(params.params[v].value.shape, 10 * step + v + 5));
      dgrads.push_back(to_device(grads.back()));
    }
    const float lr = 0.1f / (step + 1);
    cpu->apply(params, grads, lr);
    gpu.apply(dparams, dgrads, lr, nullptr);
  }
  TG_CUDA_CHECK(cudaDeviceSynchronize());
  for (size_t v = 0; v < params.size(); ++v)
    EXPECT_LE(testing::relative_error(to_host(dparams[v]), params.params[v].value), bound) << name << " param " << v;
}

TEST(GpuOptimizer, Sgd) {
  TG_REQUIRE_GPU();
  check("sgd", 1e-6);
}

TEST(GpuOptimizer, Momentum) {
  TG_REQUIRE_GPU();
  check("momentum", 1e-6);
}

TEST(GpuOptimizer, Adam) {
  TG_REQUIRE_GPU();
  check("adam", 1e-6);
}

TEST(GpuOptimizer, RefusesRmspropClearly) {
  // Host-side check: runs without a device.
  GpuOptimizerOptions o;
  o.name = "rmsprop";
  EXPECT_THROW(GpuOptimizer{o}, std::invalid_argument);
}

}  // namespace
}  // namespace terngrad::train::cuda
