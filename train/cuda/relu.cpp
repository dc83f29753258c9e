// ReLU on the GPU; the CPU ReLU (train/layers/activations.cpp) its reference:
// dx = dy where y > 0 (TF's ReluGrad), so the two agree exactly.
#include <stdexcept>

#include "gpu_layers.h"
#include "kernels.h"

namespace terngrad::train::cuda {

namespace {

class GpuReLU final : public GpuLayer {
 public:
  explicit GpuReLU(const ReLU& cpu) : GpuLayer(cpu) {}

  void forward(GpuContext& ctx, const DeviceParams&, const DeviceTensor& x, DeviceTensor& y,
               GpuScratch*, const ForwardContext&) const override {
    y.resize(output_shape(x.shape));
    detail::relu_forward(y.ptr(), x.ptr(), x.size(), ctx.stream());
  }

  void backward(GpuContext& ctx, const DeviceParams&, const DeviceTensor& x, const DeviceTensor& y,
                const DeviceTensor& dy, DeviceTensor* dx, DeviceGrads&, GpuScratch*) const override {
    if (dy.shape != x.shape || y.shape != x.shape)
      throw std::invalid_argument(cpu().name() + " (GPU): dy " + shape_string(dy.shape) + " and y " +
                                  shape_string(y.shape) + " must have the input's shape " + shape_string(x.shape));
    if (!dx) return;
    dx->resize(x.shape);
    detail::relu_grad(dx->ptr(), y.ptr(), dy.ptr(), x.size(), ctx.stream());
  }
};

}  // namespace

std::unique_ptr<GpuLayer> make_gpu_relu(const ReLU& cpu) { return std::make_unique<GpuReLU>(cpu); }

}  // namespace terngrad::train::cuda
