// Average pooling (layers.h): TF's avg_pool, whose SAME windows divide by the
// number of in-image cells.
#include <algorithm>
#include <string>

#include "layer_util.h"
#include "terngrad/train/layers.h"

namespace terngrad::train {

using detail::fail;

namespace {

using AvgGeometry = detail::PoolGeometry;

AvgGeometry avg_geometry(const AvgPoolConfig& cfg, const std::string& name, const Shape& in) {
  return detail::pool_geometry(name, in, cfg.kernel, cfg.stride, cfg.padding);
}

}  // namespace

AvgPool::AvgPool(AvgPoolConfig cfg) : Layer(cfg.name), cfg_(std::move(cfg)) {
  if (name().empty()) fail("AvgPool", "name is empty");
  if (cfg_.kernel <= 0) fail(name(), "kernel = " + std::to_string(cfg_.kernel) + " must be positive");
  if (cfg_.stride <= 0) fail(name(), "stride = " + std::to_string(cfg_.stride) + " must be positive");
}

Shape AvgPool::output_shape(const Shape& in) const {
  const AvgGeometry g = avg_geometry(cfg_, name(), in);
  return {g.n, g.oh, g.ow, g.c};
}

void AvgPool::forward(const ParamSet&, const Tensor& x, Tensor& y, LayerScratch*, const ForwardContext&) const {
  const AvgGeometry g = avg_geometry(cfg_, name(), x.shape);
  y.resize({g.n, g.oh, g.ow, g.c});
  const int64_t k = cfg_.kernel, st = cfg_.stride;
  for (int64_t n = 0; n < g.n; ++n) {
    const float* xn = x.ptr() + n * g.h * g.w * g.c;
    for (int64_t oy = 0; oy < g.oh; ++oy) {
      const int64_t y0 = std::max<int64_t>(oy * st - g.pad_top, 0), y1 = std::min<int64_t>(oy * st - g.pad_top + k, g.h);
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        const int64_t x0 = std::max<int64_t>(ox * st - g.pad_left, 0), x1 = std::min<int64_t>(ox * st - g.pad_left + k, g.w);
        float* __restrict out = y.ptr() + ((n * g.oh + oy) * g.ow + ox) * g.c;
        std::fill(out, out + g.c, 0.0f);
        for (int64_t iy = y0; iy < y1; ++iy)
          for (int64_t ix = x0; ix < x1; ++ix) {
            const float* __restrict src = xn + (iy * g.w + ix) * g.c;
            for (int64_t ch = 0; ch < g.c; ++ch) out[ch] += src[ch];
          }
        const float inv = 1.0f / static_cast<float>((y1 - y0) * (x1 - x0));
        for (int64_t ch = 0; ch < g.c; ++ch) out[ch] *= inv;
      }
    }
  }
}

void AvgPool::backward(const ParamSet&, const Tensor& x, const Tensor&, const Tensor& dy, Tensor* dx, GradSet&,
                       LayerScratch*) const {
  const AvgGeometry g = avg_geometry(cfg_, name(), x.shape);
  detail::check_same_shape(dy, {g.n, g.oh, g.ow, g.c}, "dy", name());
  if (!dx) return;
  dx->resize(x.shape);
  dx->fill(0.0f);  // overlapping windows accumulate
  const int64_t k = cfg_.kernel, st = cfg_.stride;
  for (int64_t n = 0; n < g.n; ++n) {
    float* dxn = dx->ptr() + n * g.h * g.w * g.c;
    for (int64_t oy = 0; oy < g.oh; ++oy) {
      const int64_t y0 = std::max<int64_t>(oy * st - g.pad_top, 0), y1 = std::min<int64_t>(oy * st - g.pad_top + k, g.h);
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        const int64_t x0 = std::max<int64_t>(ox * st - g.pad_left, 0), x1 = std::min<int64_t>(ox * st - g.pad_left + k, g.w);
        const float* __restrict d = dy.ptr() + ((n * g.oh + oy) * g.ow + ox) * g.c;
        const float inv = 1.0f / static_cast<float>((y1 - y0) * (x1 - x0));
        for (int64_t iy = y0; iy < y1; ++iy)
          for (int64_t ix = x0; ix < x1; ++ix) {
            float* __restrict dst = dxn + (iy * g.w + ix) * g.c;
            for (int64_t ch = 0; ch < g.c; ++ch) dst[ch] += d[ch] * inv;
          }
      }
    }
  }
}

}  // namespace terngrad::train
