#include <algorithm>

#include "layer_util.h"
#include "terngrad/train/layers.h"

namespace terngrad::train {

ReLU::ReLU(std::string name) : Layer(std::move(name)) {
  if (this->name().empty()) detail::fail("ReLU", "name is empty");
}

Shape ReLU::output_shape(const Shape& in) const {
  if (in.empty()) detail::fail(name(), "input " + shape_string(in) + " has no batch dimension");
  return in;
}

void ReLU::forward(const ParamSet&, const Tensor& x, Tensor& y, LayerScratch*, const ForwardContext&) const {
  output_shape(x.shape);
  y.resize(x.shape);
  const float* in = x.ptr();
  float* out = y.ptr();
  for (int64_t i = 0; i < x.size(); ++i) out[i] = std::max(in[i], 0.0f);
}

void ReLU::backward(const ParamSet&, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx, GradSet&,
                    LayerScratch*) const {
  detail::check_same_shape(dy, x.shape, "dy", name());
  detail::check_same_shape(y, x.shape, "y", name());
  if (!dx) return;
  dx->resize(x.shape);
  const float* out = y.ptr();
  const float* g = dy.ptr();
  float* d = dx->ptr();
  for (int64_t i = 0; i < x.size(); ++i) d[i] = out[i] > 0.0f ? g[i] : 0.0f;
}

}  // namespace terngrad::train
