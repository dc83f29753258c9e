// Dense float32 tensors for the CPU trainer. Row-major; images are NHWC
// (batch, height, width, channels), as in the TensorFlow models TernGrad used,
// so a convolution's im2col rows and a fully connected layer's input are
// contiguous.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace terngrad::train {

using Shape = std::vector<int64_t>;

int64_t numel(const Shape& s);
std::string shape_string(const Shape& s);  // "[64, 28, 28, 1]"

struct Tensor {
  Shape shape;
  std::vector<float> data;

  Tensor() = default;
  explicit Tensor(Shape s, float fill = 0.0f) : shape(std::move(s)), data(numel(shape), fill) {}

  int64_t size() const { return static_cast<int64_t>(data.size()); }
  int64_t dim(size_t i) const { return shape.at(i); }
  float* ptr() { return data.data(); }
  const float* ptr() const { return data.data(); }
  // Reshapes, reusing the allocation when it is large enough (steady-state
  // training steps allocate nothing).
  void resize(const Shape& s) {
    shape = s;
    data.resize(static_cast<size_t>(numel(s)));
  }
  void fill(float v) { data.assign(data.size(), v); }
};

}  // namespace terngrad::train
