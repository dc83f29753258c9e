// The window arithmetic max and average pooling share on the GPU (private to
// train_cuda): the geometry of a kernel x kernel pooling over an NHWC input,
// the in-image part of one output's window, and the outputs whose windows
// cover one input cell (what a gather-style backward visits). The same
// geometry as the CPU layers' (train/layers/layer_util.h pool_geometry).
// Host-device, and in either index width: a kernel over a tensor of fewer
// than 2^31 elements does its index arithmetic in 32 bits (a 64-bit integer
// division is a long instruction sequence on the GPU), and the CPU tests check
// the two widths against each other and against a brute-force search.
#pragma once

#include <cstdint>
#include <limits>

#include "terngrad/train/layers.h"

#ifndef TG_HOST_DEVICE
#if defined(__CUDACC__)
#define TG_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define TG_HOST_DEVICE inline
#endif
#endif

namespace terngrad::train::cuda::detail {

template <class I>
struct PoolGeomOf {
  I n, h, w, c, oh, ow, pad_top, pad_left, k, stride;
};
using PoolGeom = PoolGeomOf<int64_t>;

// `out` is the CPU layer's output_shape(in), which validated the shapes.
inline PoolGeom pool_geom(const Shape& in, const Shape& out, int64_t kernel, int64_t stride, Padding padding) {
  const WindowGeometry gy = window_geometry(in[1], kernel, stride, padding);
  const WindowGeometry gx = window_geometry(in[2], kernel, stride, padding);
  return {in[0], in[1], in[2], in[3], out[1], out[2], gy.pad_before, gx.pad_before, kernel, stride};
}

// Whether every index a pooling kernel forms fits 32 bits: element offsets
// stay below the input's and the output's sizes, window bounds below
// h + k and w + k.
inline bool fits_32_bits(const PoolGeom& g) {
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  return g.n * g.h * g.w * g.c <= kMax && g.n * g.oh * g.ow * g.c <= kMax && g.h + g.k <= kMax &&
         g.w + g.k <= kMax && (g.oh + 1) * g.stride <= kMax && (g.ow + 1) * g.stride <= kMax;
}

inline PoolGeomOf<int32_t> narrow(const PoolGeom& g) {
  auto n32 = [](int64_t v) { return static_cast<int32_t>(v); };
  return {n32(g.n),  n32(g.h),       n32(g.w),        n32(g.c), n32(g.oh),
          n32(g.ow), n32(g.pad_top), n32(g.pad_left), n32(g.k), n32(g.stride)};
}

template <class I>
TG_HOST_DEVICE I imax(I a, I b) { return a > b ? a : b; }
template <class I>
TG_HOST_DEVICE I imin(I a, I b) { return a < b ? a : b; }

// Rows [y0, y1) x columns [x0, x1) of output (oy, ox)'s window inside the image.
template <class I>
TG_HOST_DEVICE void window(const PoolGeomOf<I>& g, I oy, I ox, I& y0, I& y1, I& x0, I& x1) {
  y0 = imax<I>(oy * g.stride - g.pad_top, 0), y1 = imin<I>(oy * g.stride - g.pad_top + g.k, g.h);
  x0 = imax<I>(ox * g.stride - g.pad_left, 0), x1 = imin<I>(ox * g.stride - g.pad_left + g.k, g.w);
}

// Outputs [oy0, oy1] x [ox0, ox1] (inclusive) whose windows contain input
// cell (iy, ix): oy*stride - pad_top <= iy < oy*stride - pad_top + k.
template <class I>
TG_HOST_DEVICE void covering_outputs(const PoolGeomOf<I>& g, I iy, I ix, I& oy0, I& oy1, I& ox0, I& ox1) {
  const I py = iy + g.pad_top, px = ix + g.pad_left;
  oy0 = py - g.k + 1 > 0 ? (py - g.k + 1 + g.stride - 1) / g.stride : 0;
  oy1 = imin<I>(py / g.stride, g.oh - 1);
  ox0 = px - g.k + 1 > 0 ? (px - g.k + 1 + g.stride - 1) / g.stride : 0;
  ox1 = imin<I>(px / g.stride, g.ow - 1);
}

}  // namespace terngrad::train::cuda::detail
