// What a GPU training process updates on the device: the weights, the
// optimizer slots and, when the run keeps one, the moving average of the
// weights. Its host form is exactly the CPU trainer's (a ParamSet, an
// Optimizer's TensorFlow-named slots and step count, an
// ExponentialMovingAverage's shadows), so the trainer checkpoints a GPU run
// with the CPU code and format: a GPU run resumes a CPU run's checkpoint and
// the other way round, and evaluation (raw and EMA weights) is the CPU's.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "terngrad/train/cuda/gpu_layer.h"  // DeviceParams, DeviceGrads
#include "terngrad/train/cuda/gpu_optimizer.h"
#include "terngrad/train/layer.h"
#include "terngrad/train/moving_average.h"
#include "terngrad/train/optimizer.h"

namespace terngrad::train::cuda {

// The host objects a DeviceTrainState is copied to and from (not owned).
struct HostTrainState {
  ParamSet* params = nullptr;
  Optimizer* optimizer = nullptr;                // same name as the device optimizer
  ExponentialMovingAverage* average = nullptr;   // null when the run keeps none
};

class DeviceTrainState {
 public:
  // Uploads params' current values; slots start at zero, the average (if
  // with_average) at the weights, as on the CPU.
  DeviceTrainState(const ParamSet& params, GpuOptimizerOptions optimizer, bool with_average, cudaStream_t stream);

  DeviceParams& params() { return params_; }
  const DeviceParams& params() const { return params_; }
  bool has_average() const { return !shadows_.empty(); }
  // The moving average of the weights (empty without one).
  const DeviceParams& average() const { return shadows_; }

  // params -= optimizer(grads) at rate lr, on `stream`.
  void apply(const DeviceGrads& grads, float lr, cudaStream_t stream);
  // shadow -= one_minus_decay * (shadow - weight) for every parameter: the
  // CPU average's update with its 1 - decay_at(step) (the caller computes it
  // with ExponentialMovingAverage::decay_at, so the rule lives in one place).
  void update_average(float one_minus_decay, cudaStream_t stream);

  // Everything to the host objects (waits for `stream`). Throws
  // std::invalid_argument naming the mismatch (parameter names or sizes,
  // optimizer name or slot count, an average on one side only).
  void download(const HostTrainState& host, cudaStream_t stream) const;
  // Everything from the host objects, e.g. after TrainingSession::restore()
  // (waits for `stream`). Same checks as download().
  void upload(const HostTrainState& host, cudaStream_t stream);
  // Only the weights, either way (evaluation; an asynchronous replica's
  // pulled values). Wait for `stream`.
  void download_params(ParamSet& params, cudaStream_t stream) const;
  void upload_params(const ParamSet& params, cudaStream_t stream);

 private:
  void check(const HostTrainState& host, const char* what) const;
  void check_params(const ParamSet& params, const char* what) const;

  std::vector<std::string> names_;
  DeviceParams params_;
  GpuOptimizer optimizer_;
  DeviceParams shadows_;
};

}  // namespace terngrad::train::cuda
