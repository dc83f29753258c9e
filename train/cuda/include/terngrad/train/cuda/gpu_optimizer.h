// Optimizer updates on the device, the CPU optimizers (train/optim/*.cpp,
// TensorFlow 1.x rules) their reference: the same per-element expressions,
// so one update of the same inputs agrees to an ulp or so (FMA contraction
// differs between GCC -march=native and nvcc). Slots are device tensors in
// the CPU's slot order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "terngrad/train/cuda/device_tensor.h"

namespace terngrad::train::cuda {

struct GpuOptimizerOptions {
  std::string name = "momentum";  // sgd | momentum | adam
  float momentum = 0.9f;
  bool nesterov = false;
  double beta1 = 0.9, beta2 = 0.999;
  float epsilon = 1e-8f;
};

class GpuOptimizer {
 public:
  // Throws std::invalid_argument for an optimizer without a GPU kernel
  // (rmsprop), naming it.
  explicit GpuOptimizer(GpuOptimizerOptions options);

  // Creates zero slots shaped like params (idempotent).
  void init(const std::vector<DeviceTensor>& params);
  // One update in place on `stream`; t counts updates (Adam's bias correction).
  void apply(std::vector<DeviceTensor>& params, const std::vector<DeviceTensor>& grads, float lr,
             cudaStream_t stream);
  int64_t steps() const { return steps_; }
  // Restoring a checkpoint: the updates already applied (Adam's t).
  void set_steps(int64_t steps) { steps_ = steps; }
  const std::string& name() const { return o_.name; }
  std::vector<std::vector<DeviceTensor>>& slots() { return slots_; }  // [param][slot]
  const std::vector<std::vector<DeviceTensor>>& slots() const { return slots_; }

 private:
  GpuOptimizerOptions o_;
  std::vector<std::vector<DeviceTensor>> slots_;
  int64_t steps_ = 0;
};

}  // namespace terngrad::train::cuda
