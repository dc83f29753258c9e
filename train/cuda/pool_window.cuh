// The window arithmetic max and average pooling share on the GPU (private to
// train_cuda): the geometry of a kernel x kernel pooling over an NHWC input,
// the in-image part of one output's window, and the outputs whose windows
// cover one input cell (what a gather-style backward visits). The same
// geometry as the CPU layers' (train/layers/layer_util.h pool_geometry).
#pragma once

#include <cstdint>

#include "terngrad/train/layers.h"

namespace terngrad::train::cuda::detail {

struct PoolGeom {
  int64_t n, h, w, c, oh, ow, pad_top, pad_left, k, stride;
};

// `out` is the CPU layer's output_shape(in), which validated the shapes.
inline PoolGeom pool_geom(const Shape& in, const Shape& out, int64_t kernel, int64_t stride, Padding padding) {
  const WindowGeometry gy = window_geometry(in[1], kernel, stride, padding);
  const WindowGeometry gx = window_geometry(in[2], kernel, stride, padding);
  return {in[0], in[1], in[2], in[3], out[1], out[2], gy.pad_before, gx.pad_before, kernel, stride};
}

// Rows [y0, y1) x columns [x0, x1) of output (oy, ox)'s window inside the image.
__device__ inline void window(const PoolGeom& g, int64_t oy, int64_t ox, int64_t& y0, int64_t& y1, int64_t& x0,
                              int64_t& x1) {
  y0 = max(oy * g.stride - g.pad_top, int64_t{0}), y1 = min(oy * g.stride - g.pad_top + g.k, g.h);
  x0 = max(ox * g.stride - g.pad_left, int64_t{0}), x1 = min(ox * g.stride - g.pad_left + g.k, g.w);
}

// Outputs [oy0, oy1] x [ox0, ox1] (inclusive) whose windows contain input
// cell (iy, ix): oy*stride - pad_top <= iy < oy*stride - pad_top + k.
__device__ inline void covering_outputs(const PoolGeom& g, int64_t iy, int64_t ix, int64_t& oy0, int64_t& oy1,
                                        int64_t& ox0, int64_t& ox1) {
  const int64_t py = iy + g.pad_top, px = ix + g.pad_left;
  oy0 = py - g.k + 1 > 0 ? (py - g.k + 1 + g.stride - 1) / g.stride : 0;
  oy1 = min(py / g.stride, g.oh - 1);
  ox0 = px - g.k + 1 > 0 ? (px - g.k + 1 + g.stride - 1) / g.stride : 0;
  ox1 = min(px / g.stride, g.ow - 1);
}

}  // namespace terngrad::train::cuda::detail
