// AvgPool on the GPU, the CPU AvgPool (train/layers/avg_pool.cpp) its
// reference: TF's windows (asymmetric SAME padding, in-image cells counted),
// which cuDNN's pooling cannot express exactly (it pads symmetrically).
// Backward gathers per input cell (no atomics, deterministic).
#include <stdexcept>

#include "gpu_layers.h"
#include "kernels.h"
#include "pool_window.cuh"
#include "terngrad/device/grid_stride.cuh"
#include "terngrad/train/cuda/errors.h"

namespace terngrad::train::cuda {

using terngrad::device::grid_stride_range;

using detail::blocks_for;
using detail::kThreads;

namespace {

using Geom = detail::PoolGeom;

__global__ void avg_pool_forward(const float* x, float* y, Geom g) {
  const int64_t total = g.n * g.oh * g.ow * g.c;
  for (const int64_t o : grid_stride_range(total)) {
    const int64_t ch = o % g.c, ox = (o / g.c) % g.ow, oy = (o / (g.c * g.ow)) % g.oh, n = o / (g.c * g.ow * g.oh);
    int64_t y0, y1, x0, x1;
    detail::window(g, oy, ox, y0, y1, x0, x1);
    const float* xn = x + n * g.h * g.w * g.c;
    float sum = 0.0f;
    for (int64_t iy = y0; iy < y1; ++iy)
      for (int64_t ix = x0; ix < x1; ++ix) sum += xn[(iy * g.w + ix) * g.c + ch];
    y[o] = sum * (1.0f / static_cast<float>((y1 - y0) * (x1 - x0)));
  }
}

__global__ void avg_pool_backward(const float* dy, float* dx, Geom g) {
  const int64_t total = g.n * g.h * g.w * g.c;
  for (const int64_t i : grid_stride_range(total)) {
    const int64_t ch = i % g.c, ix = (i / g.c) % g.w, iy = (i / (g.c * g.w)) % g.h, n = i / (g.c * g.w * g.h);
    int64_t oy0, oy1, ox0, ox1;
    detail::covering_outputs(g, iy, ix, oy0, oy1, ox0, ox1);
    float sum = 0.0f;
    for (int64_t oy = oy0; oy <= oy1; ++oy)
      for (int64_t ox = ox0; ox <= ox1; ++ox) {
        int64_t y0, y1, x0, x1;
        detail::window(g, oy, ox, y0, y1, x0, x1);
        sum += dy[((n * g.oh + oy) * g.ow + ox) * g.c + ch] * (1.0f / static_cast<float>((y1 - y0) * (x1 - x0)));
      }
    dx[i] = sum;
  }
}

class GpuAvgPool final : public GpuLayer {
 public:
  explicit GpuAvgPool(const AvgPool& cpu) : GpuLayer(cpu), pool_(cpu) {}

  void forward(GpuContext& ctx, const DeviceParams&, const DeviceTensor& x, DeviceTensor& y, GpuScratch*,
               const ForwardContext&) const override {
    const Geom g = geometry(x.shape);
    y.resize({g.n, g.oh, g.ow, g.c});
    if (y.size() == 0) return;
    avg_pool_forward<<<blocks_for(y.size()), kThreads, 0, ctx.stream()>>>(x.ptr(), y.ptr(), g);
    TG_CUDA_CHECK_LAUNCH();
  }

  void backward(GpuContext& ctx, const DeviceParams&, const DeviceTensor& x, const DeviceTensor&,
                const DeviceTensor& dy, DeviceTensor* dx, DeviceGrads&, GpuScratch*) const override {
    const Geom g = geometry(x.shape);
    if (dy.shape != Shape{g.n, g.oh, g.ow, g.c})
      throw std::invalid_argument(pool_.name() + " (GPU): dy has shape " + shape_string(dy.shape));
    if (!dx) return;
    dx->resize(x.shape);
    if (x.size() == 0) return;
    avg_pool_backward<<<blocks_for(x.size()), kThreads, 0, ctx.stream()>>>(dy.ptr(), dx->ptr(), g);
    TG_CUDA_CHECK_LAUNCH();
  }

 private:
  Geom geometry(const Shape& in) const {
    const AvgPoolConfig& c = pool_.config();
    return detail::pool_geom(in, output_shape(in), c.kernel, c.stride, c.padding);  // output_shape validates
  }

  const AvgPool& pool_;
};

}  // namespace

std::unique_ptr<GpuLayer> make_gpu_avg_pool(const AvgPool& cpu) { return std::make_unique<GpuAvgPool>(cpu); }

}  // namespace terngrad::train::cuda
