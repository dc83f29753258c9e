// The GPU twin of a CPU layer (train/layer.h). A GpuLayer is built from its
// CPU layer and reads that layer's config and parameter indices, so the two
// always agree on geometry, padding and parameter layout: parameters and
// gradients are DeviceTensors in the ParamSet's order and shapes (conv
// weights HWIO, dense weights [D, units]), activations NHWC. A CPU
// ParamSet uploaded element for element is a valid DeviceParams.
//
// Supported: Conv2D (cuDNN), MaxPool (own kernel: TF's asymmetric SAME
// padding and first-wins tie rule, which cuDNN pooling cannot express),
// LocalResponseNorm (own NHWC kernel, TF's un-normalized alpha), Dense
// (cuBLAS), ReLU, Dropout (the CPU layer's counter-based mask,
// terngrad/train/dropout_mask.h, so both draw the same mask from one seed),
// BatchNorm (own NHWC kernels; the moving statistics stay the host Model's
// state), AvgPool (own kernel, TF's windows), BranchConcat (its branches'
// twins, channel slices as strided copies).
#pragma once

#include <memory>
#include <vector>

#include "terngrad/train/cuda/context.h"
#include "terngrad/train/cuda/device_tensor.h"
#include "terngrad/train/layer.h"

namespace terngrad::train::cuda {

using DeviceParams = std::vector<DeviceTensor>;
using DeviceGrads = std::vector<DeviceTensor>;

// Per-worker state kept between forward and backward (argmax, LRN scales,
// cuDNN descriptors). Workers never share one.
struct GpuScratch {
  virtual ~GpuScratch() = default;
};

class GpuLayer {
 public:
  virtual ~GpuLayer() = default;
  const Layer& cpu() const { return cpu_; }
  Shape output_shape(const Shape& in) const { return cpu_.output_shape(in); }

  virtual std::unique_ptr<GpuScratch> make_scratch() const { return nullptr; }

  // Same contracts as Layer::forward / Layer::backward, ordered on ctx's
  // stream: y is resized; backward writes *dx (when non-null) and ADDS the
  // parameter gradients into grads. fwd is the CPU layer's ForwardContext
  // (training flag, dropout seed, model state): Dropout reads the seed, an
  // evaluation-mode BatchNorm the state; a forward with the same fwd as the
  // CPU layer's draws the same mask.
  virtual void forward(GpuContext& ctx, const DeviceParams& params, const DeviceTensor& x, DeviceTensor& y,
                       GpuScratch* scratch, const ForwardContext& fwd) const = 0;
  virtual void backward(GpuContext& ctx, const DeviceParams& params, const DeviceTensor& x, const DeviceTensor& y,
                        const DeviceTensor& dy, DeviceTensor* dx, DeviceGrads& grads, GpuScratch* scratch) const = 0;

  // Layer::fold_state on the device's statistics: folds the batch statistics
  // of the last training forward on `scratch` into the HOST model state
  // (batch norm downloads 2 x C floats and applies the CPU layer's rule;
  // waits for ctx's stream). Evaluation forwards read that host state
  // through fwd.state. Nothing for layers without state.
  virtual void fold_state(GpuContext& ctx, GpuScratch* scratch, StateSet& state) const {
    (void)ctx, (void)scratch, (void)state;
  }

 protected:
  explicit GpuLayer(const Layer& cpu) : cpu_(cpu) {}

 private:
  const Layer& cpu_;  // outlives this (owned by the Model the GPU model mirrors)
};

// The GPU twin of `cpu`; throws std::invalid_argument naming the layer when
// it has none (or needs a configuration cuDNN cannot express).
std::unique_ptr<GpuLayer> make_gpu_layer(const Layer& cpu);

}  // namespace terngrad::train::cuda
