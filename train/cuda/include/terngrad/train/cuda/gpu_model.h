// The GPU twin of a built CPU Model: one GpuLayer per layer, run in the same
// order with the same parameter indices. The CPU Model stays the owner of
// the layer configs and the initial weights; upload_params() copies them.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "terngrad/train/cuda/gpu_layer.h"
#include "terngrad/train/model.h"

namespace terngrad::train::cuda {

class GpuModel {
 public:
  // `cpu` must be built and must outlive this. Throws std::invalid_argument
  // naming the first layer without a GPU implementation.
  explicit GpuModel(const Model& cpu);

  struct Workspace {
    std::vector<DeviceTensor> acts;   // acts[i+1] = output of layer i (acts[0] unused: the input is the caller's)
    std::vector<DeviceTensor> dacts;  // gradient w.r.t. acts[i]
    std::vector<std::unique_ptr<GpuScratch>> scratch;
    DeviceTensor dlogits;
    DeviceBuffer row_loss;
  };
  Workspace make_workspace() const;

  DeviceParams upload_params(cudaStream_t stream) const;     // the CPU model's current values
  DeviceGrads make_grads() const;                            // zero-filled, shaped like the params

  // Model::forward_backward on the device: grads are zeroed, then filled;
  // the mean cross-entropy goes to *d_loss (device memory, no sync). fwd as
  // the CPU Model's (training, and the dropout seed of this step and worker).
  void forward_backward(GpuContext& ctx, Workspace& ws, const DeviceParams& params, const DeviceTensor& x,
                        const int32_t* d_labels, DeviceGrads& grads, float* d_loss, const ForwardContext& fwd) const;

  // Model::fold_state from this workspace's last training forward (batch
  // norm's batch statistics come down, the host state is updated; waits for
  // ctx's stream). Nothing for nets without state.
  void fold_state(GpuContext& ctx, Workspace& ws, StateSet& state) const;

  // Forward only, in evaluation mode (as Model::predict, batch norm at the
  // CPU model's moving statistics); returns the logits inside ws.
  const DeviceTensor& predict(GpuContext& ctx, Workspace& ws, const DeviceParams& params, const DeviceTensor& x) const;

  const Model& cpu() const { return cpu_; }

  // Throws std::invalid_argument naming the first label outside
  // [0, num_classes) and `who` (the CPU loss refuses those; on the device
  // they would index outside the logits).
  void check_labels(std::span<const int32_t> labels, const std::string& who) const;

 private:
  const Model& cpu_;
  std::vector<std::unique_ptr<GpuLayer>> layers_;
};

}  // namespace terngrad::train::cuda
