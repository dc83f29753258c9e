// AvgPool on the GPU, the CPU AvgPool (train/layers/avg_pool.cpp) its
// reference: TF's windows (asymmetric SAME padding, in-image cells counted),
// which cuDNN's pooling cannot express exactly (it pads symmetrically).
// Backward gathers per input cell (no atomics, deterministic).
#include <stdexcept>

#include "gpu_layers.h"
#include "kernels.h"
#include "terngrad/device/grid_stride.cuh"
#include "terngrad/train/cuda/errors.h"

namespace terngrad::train::cuda {

using terngrad::device::grid_stride_range;

using detail::blocks_for;
using detail::kThreads;

namespace {

struct Geom {
  int64_t n, h, w, c, oh, ow, pad_top, pad_left, k, stride;
};

__device__ inline void window(const Geom& g, int64_t oy, int64_t ox, int64_t& y0, int64_t& y1, int64_t& x0,
                              int64_t& x1) {
  y0 = max(oy * g.stride - g.pad_top, int64_t{0}), y1 = min(oy * g.stride - g.pad_top + g.k, g.h);
  x0 = max(ox * g.stride - g.pad_left, int64_t{0}), x1 = min(ox * g.stride - g.pad_left + g.k, g.w);
}

__global__ void avg_pool_forward(const float* x, float* y, Geom g) {
  const int64_t total = g.n * g.oh * g.ow * g.c;
  for (const int64_t o : grid_stride_range(total)) {
    const int64_t ch = o % g.c, ox = (o / g.c) % g.ow, oy = (o / (g.c * g.ow)) % g.oh, n = o / (g.c * g.ow * g.oh);
    int64_t y0, y1, x0, x1;
    window(g, oy, ox, y0, y1, x0, x1);
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
    const int64_t py = iy + g.pad_top, px = ix + g.pad_left;
    const int64_t oy0 = py - g.k + 1 > 0 ? (py - g.k + 1 + g.stride - 1) / g.stride : 0;
    const int64_t oy1 = min(py / g.stride, g.oh - 1);
    const int64_t ox0 = px - g.k + 1 > 0 ? (px - g.k + 1 + g.stride - 1) / g.stride : 0;
    const int64_t ox1 = min(px / g.stride, g.ow - 1);
    float sum = 0.0f;
    for (int64_t oy = oy0; oy <= oy1; ++oy)
      for (int64_t ox = ox0; ox <= ox1; ++ox) {
        int64_t y0, y1, x0, x1;
        window(g, oy, ox, y0, y1, x0, x1);
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
    const Shape out = output_shape(in);  // the CPU layer's validation and messages
    const AvgPoolConfig& c = pool_.config();
    const WindowGeometry gy = window_geometry(in[1], c.kernel, c.stride, c.padding);
    const WindowGeometry gx = window_geometry(in[2], c.kernel, c.stride, c.padding);
    return {in[0], in[1], in[2], in[3], out[1], out[2], gy.pad_before, gx.pad_before, c.kernel, c.stride};
  }

  const AvgPool& pool_;
};

}  // namespace

std::unique_ptr<GpuLayer> make_gpu_avg_pool(const AvgPool& cpu) { return std::make_unique<GpuAvgPool>(cpu); }

}  // namespace terngrad::train::cuda
