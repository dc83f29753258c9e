// Helpers shared by the layer implementations (private to this library):
// error messages that name the layer, scratch and parameter look-ups that
// check what they are given, and the Eigen views the GEMMs run on.
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "terngrad/train/layer.h"
#include "terngrad/train/layers.h"

namespace terngrad::train::detail {

// Row-major views: tensors are row-major, so a block of rows of an NHWC
// activation is a [rows, channels] row-major matrix with no copy.
using RowMajorMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixView = Eigen::Map<RowMajorMatrix, Eigen::Unaligned, Eigen::OuterStride<>>;
using ConstMatrixView = Eigen::Map<const RowMajorMatrix, Eigen::Unaligned, Eigen::OuterStride<>>;

inline MatrixView view(float* p, int64_t rows, int64_t cols, int64_t row_stride) {
  return MatrixView(p, rows, cols, Eigen::OuterStride<>(row_stride));
}
inline ConstMatrixView view(const float* p, int64_t rows, int64_t cols, int64_t row_stride) {
  return ConstMatrixView(p, rows, cols, Eigen::OuterStride<>(row_stride));
}

[[noreturn]] inline void fail(const std::string& layer, const std::string& what) {
  throw std::invalid_argument(layer + ": " + what);
}

// The layer's own scratch type, or an error naming the layer (a scratch made
// by another layer, or none, is a wiring bug in the caller).
template <class S>
S& scratch_as(LayerScratch* scratch, const std::string& layer) {
  auto* s = dynamic_cast<S*>(scratch);
  if (!s) fail(layer, "needs the scratch from its own make_scratch(), got " + std::string(scratch ? "another layer's" : "none"));
  return *s;
}

// The value of parameter `index`, checked against the shape the layer expects.
inline const Tensor& param_value(const ParamSet& params, size_t index, const Shape& expected, const std::string& layer) {
  if (index >= params.size()) fail(layer, "forward/backward before create_params (no parameter index " + std::to_string(index) + ")");
  const Param& p = params.params[index];
  if (p.value.shape != expected)
    fail(layer, "parameter " + p.name + " has shape " + shape_string(p.value.shape) + ", the input needs " + shape_string(expected));
  return p.value;
}

inline Tensor& grad_tensor(GradSet& grads, size_t index, const Shape& expected, const std::string& layer) {
  if (index >= grads.size()) fail(layer, "gradient set has " + std::to_string(grads.size()) + " tensors, no index " + std::to_string(index));
  Tensor& g = grads[index];
  if (g.shape != expected) fail(layer, "gradient " + std::to_string(index) + " has shape " + shape_string(g.shape) + ", expected " + shape_string(expected));
  return g;
}

// The windows of a kernel x kernel pooling over an NHWC input: output size
// and the top/left padding, shared by max and average pooling. A window that
// does not fit is an error naming the layer and the input.
struct PoolGeometry {
  int64_t n, h, w, c, oh, ow, pad_top, pad_left;
};
inline PoolGeometry pool_geometry(const std::string& layer, const Shape& in, int64_t kernel, int64_t stride,
                                  Padding padding) {
  if (in.size() != 4) fail(layer, "input " + shape_string(in) + " is not [N, H, W, C]");
  const WindowGeometry gy = window_geometry(in[1], kernel, stride, padding);
  const WindowGeometry gx = window_geometry(in[2], kernel, stride, padding);
  if (gy.out <= 0 || gx.out <= 0)
    fail(layer, std::to_string(kernel) + "x" + std::to_string(kernel) + " " + padding_name(padding) +
                    " window does not fit input " + shape_string(in));
  return {in[0], in[1], in[2], in[3], gy.out, gx.out, gy.pad_before, gx.pad_before};
}

// dy must be shaped like the layer's output.
inline void check_same_shape(const Tensor& t, const Shape& expected, const char* what, const std::string& layer) {
  if (t.shape != expected) fail(layer, std::string(what) + " has shape " + shape_string(t.shape) + ", expected " + shape_string(expected));
}

}  // namespace terngrad::train::detail
