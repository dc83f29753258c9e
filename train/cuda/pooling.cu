// MaxPool on the GPU, the CPU MaxPool (train/layers/pooling.cpp) its
// reference. An own kernel rather than cuDNN pooling because cuDNN pads
// symmetrically, while TF's SAME puts the odd padding cell after (CifarNet's
// 3x3/2 SAME pooling of 24 -> 12 pads 0 before and 1 after), and because the
// CPU layer's tie rule (first cell in row-major window order wins) decides
// where the gradient goes; both are matched exactly here, so forward and
// backward agree with the CPU bit for bit.
#include <algorithm>
#include <stdexcept>

#include "gpu_layers.h"
#include "terngrad/device/grid_stride.cuh"
#include "terngrad/train/cuda/errors.h"
#include "kernels.h"
#include "pool_window.cuh"

namespace terngrad::train::cuda {

using terngrad::device::grid_stride_range;

using detail::blocks_for;
using detail::kThreads;

namespace {

using detail::PoolGeomOf;

// One thread per output element. Argmax is the offset within the example,
// as in the CPU layer's scratch. I: the index width (int32_t where the
// tensors fit it, pool_window.cuh).
template <class I>
__global__ void max_pool_forward(const float* x, float* y, int32_t* argmax, PoolGeomOf<I> g) {
  const I total = g.n * g.oh * g.ow * g.c;
  for (const int64_t o64 : grid_stride_range(static_cast<int64_t>(total))) {
    const I o = static_cast<I>(o64);
    const I ch = o % g.c, ox = (o / g.c) % g.ow, oy = (o / (g.c * g.ow)) % g.oh, n = o / (g.c * g.ow * g.oh);
    // Only in-image cells: SAME's -inf padding never wins.
    I y0, y1, x0, x1;
    detail::window(g, oy, ox, y0, y1, x0, x1);
    const float* xn = x + static_cast<int64_t>(n) * g.h * g.w * g.c;
    int32_t best_at = static_cast<int32_t>((y0 * g.w + x0) * g.c + ch);
    float best = xn[best_at];
    for (I iy = y0; iy < y1; ++iy) {
      for (I ix = (iy == y0 ? x0 + 1 : x0); ix < x1; ++ix) {
        const int32_t at = static_cast<int32_t>((iy * g.w + ix) * g.c + ch);
        const float v = xn[at];
        if (v > best) best = v, best_at = at;  // strictly greater: ties keep the first
      }
    }
    y[o] = best;
    argmax[o] = best_at;
  }
}

// One thread per input cell: gathers the gradients of the windows whose
// argmax is this cell, in ascending output order (the CPU scatters in that
// order, so the sums round identically). No atomics, deterministic.
template <class I>
__global__ void max_pool_backward(const float* dy, const int32_t* argmax, float* dx, PoolGeomOf<I> g) {
  const I total = g.n * g.h * g.w * g.c;
  for (const int64_t i64 : grid_stride_range(static_cast<int64_t>(total))) {
    const I i = static_cast<I>(i64);
    const I ch = i % g.c, ix = (i / g.c) % g.w, iy = (i / (g.c * g.w)) % g.h, n = i / (g.c * g.w * g.h);
    const int32_t cell = static_cast<int32_t>((iy * g.w + ix) * g.c + ch);
    I oy0, oy1, ox0, ox1;
    detail::covering_outputs(g, iy, ix, oy0, oy1, ox0, ox1);
    float sum = 0.0f;
    const I base = n * g.oh * g.ow * g.c;
    for (I oy = oy0; oy <= oy1; ++oy)
      for (I ox = ox0; ox <= ox1; ++ox) {
        const I o = base + (oy * g.ow + ox) * g.c + ch;
        if (argmax[o] == cell) sum += dy[o];
      }
    dx[i] = sum;
  }
}

struct PoolGpuScratch final : GpuScratch {
  DeviceBuffer argmax;
};

class GpuMaxPool final : public GpuLayer {
 public:
  explicit GpuMaxPool(const MaxPool& cpu) : GpuLayer(cpu), pool_(cpu) {}

  std::unique_ptr<GpuScratch> make_scratch() const override { return std::make_unique<PoolGpuScratch>(); }

  void forward(GpuContext& ctx, const DeviceParams&, const DeviceTensor& x, DeviceTensor& y,
               GpuScratch* scratch, const ForwardContext&) const override {
    auto& s = scratch_of(scratch);
    const detail::PoolGeom g = geometry(x.shape);
    y.resize({g.n, g.oh, g.ow, g.c});
    s.argmax.reserve(static_cast<size_t>(y.size()) * sizeof(int32_t));
    if (y.size() == 0) return;
    if (detail::fits_32_bits(g))
      max_pool_forward<<<blocks_for(y.size()), kThreads, 0, ctx.stream()>>>(x.ptr(), y.ptr(), s.argmax.as<int32_t>(),
                                                                          detail::narrow(g));
    else
      max_pool_forward<<<blocks_for(y.size()), kThreads, 0, ctx.stream()>>>(x.ptr(), y.ptr(), s.argmax.as<int32_t>(), g);
    TG_CUDA_CHECK_LAUNCH();
  }

  void backward(GpuContext& ctx, const DeviceParams&, const DeviceTensor& x, const DeviceTensor&,
                const DeviceTensor& dy, DeviceTensor* dx, DeviceGrads&, GpuScratch* scratch) const override {
    auto& s = scratch_of(scratch);
    const detail::PoolGeom g = geometry(x.shape);
    if (dy.shape != Shape{g.n, g.oh, g.ow, g.c})
      throw std::invalid_argument(pool_.name() + " (GPU): dy has shape " + shape_string(dy.shape));
    if (!dx) return;
    if (s.argmax.capacity() < static_cast<size_t>(dy.size()) * sizeof(int32_t))
      throw std::invalid_argument(pool_.name() + " (GPU): backward without a forward on this scratch");
    dx->resize(x.shape);
    if (x.size() == 0) return;
    if (detail::fits_32_bits(g))
      max_pool_backward<<<blocks_for(x.size()), kThreads, 0, ctx.stream()>>>(dy.ptr(), s.argmax.as<int32_t>(),
                                                                           dx->ptr(), detail::narrow(g));
    else
      max_pool_backward<<<blocks_for(x.size()), kThreads, 0, ctx.stream()>>>(dy.ptr(), s.argmax.as<int32_t>(),
                                                                           dx->ptr(), g);
    TG_CUDA_CHECK_LAUNCH();
  }

 private:
  PoolGpuScratch& scratch_of(GpuScratch* scratch) const {
    auto* s = dynamic_cast<PoolGpuScratch*>(scratch);
    if (!s) throw std::invalid_argument(pool_.name() + " (GPU): needs the scratch from its own make_scratch()");
    return *s;
  }

  detail::PoolGeom geometry(const Shape& in) const {
    const MaxPoolConfig& c = pool_.config();
    return detail::pool_geom(in, output_shape(in), c.kernel, c.stride, c.padding);  // output_shape validates
  }

  const MaxPool& pool_;
};

}  // namespace

std::unique_ptr<GpuLayer> make_gpu_max_pool(const MaxPool& cpu) { return std::make_unique<GpuMaxPool>(cpu); }

}  // namespace terngrad::train::cuda
