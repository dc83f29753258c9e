// The device half of one GPU replica of a ps/worker cluster: one worker's
// step split at the points where the network comes in, so that only these
// cross the host boundary:
//   compute_gradient   batch up, forward/backward + weight decay, local
//                      TernGrad scales down (the exchange_scales input);
//   encode_slice       CUDA encode of a shard of a ternary variable with the
//                      whole variable's statistics, packed bytes down (push);
//   upload_packed_sum  the pulled aggregate up as packed bytes (ternary sum
//                      payload or a single TernGrad payload), decoded on the
//                      device;
//   apply              average and optimizer on the device.
// fp32 variables (small: biases, the logits layer by default) travel as their
// float32 values either way: download_gradient / upload_sum_floats.
//
// The arithmetic is VirtualWorkers' (virtual_workers.h) for one worker, so a
// cluster of these replicas computes what the in-process GPU trainer computes
// with as many virtual workers.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "terngrad/quantize/cuda.h"
#include "terngrad/quantize/cuda_sum.h"
#include "terngrad/train/cuda/context.h"
#include "terngrad/train/cuda/device_train_state.h"
#include "terngrad/train/cuda/gpu_codec_step.h"
#include "terngrad/train/cuda/gpu_model.h"
#include "terngrad/train/cuda/gpu_optimizer.h"

namespace terngrad::train::cuda {

struct DeviceReplicaConfig {
  std::vector<std::string> plan;  // codec spec per variable (TrainingSession::plan())
  GpuOptimizerOptions optimizer;
  uint64_t codec_seed = 0;  // this worker's codec stream (stream_seed(seed, 0, w, kCodec))
  bool moving_average = false;  // keep a moving average of the weights (update_average())
};

class DeviceReplica {
 public:
  // cpu_model: built, outlives this; its current weights are uploaded.
  DeviceReplica(const Model& cpu_model, DeviceReplicaConfig cfg);

  // Gradient of the batch (weight decay included) and the local scales;
  // waits for the device and returns the mean cross-entropy. dropout_seed:
  // this worker's at this step (stream_seed(seed, step, w, kDropout)).
  float compute_gradient(const Tensor& x, const std::vector<int32_t>& labels, uint64_t dropout_seed);
  // After compute_gradient: this replica's batch statistics folded into the
  // host model state (batch norm's moving averages; each replica keeps its
  // own copy, the chief's is the one it checkpoints and evaluates).
  void fold_state(StateSet& state) { gpu_.fold_state(ctx_, ws_, state); }
  // Local TernGrad scale per variable (0 where the codec shares none).
  const std::vector<float>& local_scales() const { return scales_; }
  bool ternary(size_t v) const { return codecs_.at(v).ternary; }

  // Ternary variable v, elements [begin, begin + count): encoded on the
  // device with the whole variable's statistics and shared_scale (the
  // exchanged max), then out (max_encoded_bytes(count) bytes) receives the
  // packed payload. The CPU codec's encode_slices gives the same bytes.
  void encode_slice(size_t v, int64_t step, float shared_scale, uint64_t begin, uint64_t count,
                    std::span<uint8_t> out);
  // fp32 variable v's gradient, for the host-side fp32 codec.
  void download_gradient(size_t v, std::span<float> out);

  // The aggregate of elements [begin, begin + aggregate's count) of ternary
  // variable v as pulled: a ternary sum payload or a single TernGrad payload
  // is uploaded as it is and decoded on the device. Returns false (nothing
  // done) for any other form (the float32 sum of payloads with different
  // scales), which the caller decodes on the host for upload_sum_floats.
  bool upload_packed_sum(size_t v, uint64_t begin, uint64_t count, std::span<const uint8_t> aggregate);
  // Decoded sum values of elements [begin, begin + sum.size()) of variable v.
  void upload_sum_floats(size_t v, uint64_t begin, std::span<const float> sum);

  // sums *= 1/replicas, then the optimizer at lr; checks the codec and waits.
  void apply(float lr, int replicas);

  // After apply(): the moving average's update with the CPU average's
  // 1 - decay_at(step) (config.moving_average must be set).
  void update_average(float one_minus_decay);

  // The device weights into params (evaluation, export), and params' values
  // onto the device (an asynchronous replica's pulled weights).
  void download_params(ParamSet& params);
  void upload_params(const ParamSet& params);
  // Weights, optimizer slots and steps, average: to the host objects
  // (checkpoints) and back (resuming); see device_train_state.h.
  void download_state(const HostTrainState& host);
  void upload_state(const HostTrainState& host);

 private:
  const Model& model_;
  DeviceReplicaConfig cfg_;
  GpuModel gpu_;
  std::vector<VariableCodec> codecs_;
  GpuContext ctx_;  // one stream orders the whole step
  GpuModel::Workspace ws_;
  std::unique_ptr<DeviceTrainState> state_;
  DeviceGrads grads_, sums_;
  DeviceTensor x_;
  DeviceBuffer labels_, loss_, payload_, staging_;
  std::unique_ptr<quantize::cuda::Workspace> codec_ws_;
  quantize::cuda::SumDecoder sum_decoder_;
  DeviceBuffer device_scales_;  // the local scales before they come down
  std::vector<float> scales_;
};

}  // namespace terngrad::train::cuda
