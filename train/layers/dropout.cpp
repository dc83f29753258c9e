// Inverted dropout on the CPU; the mask itself is terngrad/train/dropout_mask.h,
// shared with the GPU twin (train/cuda/dropout.cu).
#include <algorithm>
#include <string>

#include "layer_util.h"
#include "terngrad/train/dropout_mask.h"
#include "terngrad/train/layers.h"

namespace terngrad::train {

using dropout_mask::kept_in;
using dropout_mask::stream_key;

namespace {

struct DropoutScratch final : LayerScratch {
  // What forward did, so backward applies the same mask (or none).
  bool active = false;
  uint64_t seed = 0;
};

}  // namespace

Dropout::Dropout(DropoutConfig cfg) : Layer(cfg.name), cfg_(std::move(cfg)) {
  if (name().empty()) detail::fail("Dropout", "name is empty");
  if (!(cfg_.keep_prob > 0.0f && cfg_.keep_prob <= 1.0f))
    detail::fail(name(), "keep_prob = " + std::to_string(cfg_.keep_prob) + " must be in (0, 1]");
  salt_ = dropout_mask::name_salt(name());
  threshold_ = dropout_mask::keep_threshold(cfg_.keep_prob);
}

bool Dropout::kept(uint64_t seed, uint64_t index) const { return kept_in(stream_key(seed, salt_), index, threshold_); }

Shape Dropout::output_shape(const Shape& in) const {
  if (in.empty()) detail::fail(name(), "input " + shape_string(in) + " has no batch dimension");
  return in;
}

std::unique_ptr<LayerScratch> Dropout::make_scratch() const { return std::make_unique<DropoutScratch>(); }

void Dropout::forward(const ParamSet&, const Tensor& x, Tensor& y, LayerScratch* scratch,
                      const ForwardContext& ctx) const {
  output_shape(x.shape);
  auto& s = detail::scratch_as<DropoutScratch>(scratch, name());
  s.active = ctx.training && cfg_.keep_prob < 1.0f;
  s.seed = ctx.dropout_seed;
  y.resize(x.shape);
  if (!s.active) {
    std::copy(x.data.begin(), x.data.end(), y.data.begin());
    return;
  }
  const float scale = 1.0f / cfg_.keep_prob;
  const uint64_t key = stream_key(s.seed, salt_);
  for (int64_t i = 0; i < x.size(); ++i) y.data[i] = kept_in(key, i, threshold_) ? x.data[i] * scale : 0.0f;
}

void Dropout::backward(const ParamSet&, const Tensor& x, const Tensor&, const Tensor& dy, Tensor* dx, GradSet&,
                       LayerScratch* scratch) const {
  detail::check_same_shape(dy, x.shape, "dy", name());
  if (!dx) return;
  auto& s = detail::scratch_as<DropoutScratch>(scratch, name());
  dx->resize(x.shape);
  if (!s.active) {
    std::copy(dy.data.begin(), dy.data.end(), dx->data.begin());
    return;
  }
  const float scale = 1.0f / cfg_.keep_prob;
  const uint64_t key = stream_key(s.seed, salt_);
  for (int64_t i = 0; i < x.size(); ++i) dx->data[i] = kept_in(key, i, threshold_) ? dy.data[i] * scale : 0.0f;
}

}  // namespace terngrad::train
