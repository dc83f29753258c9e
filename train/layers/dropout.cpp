#include <algorithm>
#include <cmath>
#include <string>

#include "layer_util.h"
#include "terngrad/train/layers.h"

namespace terngrad::train {

namespace {

struct DropoutScratch final : LayerScratch {
  // What forward did, so backward applies the same mask (or none).
  bool active = false;
  uint64_t seed = 0;
};

// SplitMix64's output function: a bijective 64-bit mixer whose outputs for
// consecutive inputs are statistically independent.
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// FNV-1a of the layer name: a stable salt, so fc6 and fc7 draw different
// masks from the same step seed.
uint64_t name_salt(const std::string& s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char ch : s) h = (h ^ ch) * 0x100000001B3ull;
  return h;
}

}  // namespace

Dropout::Dropout(DropoutConfig cfg) : Layer(cfg.name), cfg_(std::move(cfg)) {
  if (name().empty()) detail::fail("Dropout", "name is empty");
  if (!(cfg_.keep_prob > 0.0f && cfg_.keep_prob <= 1.0f))
    detail::fail(name(), "keep_prob = " + std::to_string(cfg_.keep_prob) + " must be in (0, 1]");
  salt_ = name_salt(name());
  threshold_ = static_cast<uint64_t>(std::ldexp(static_cast<double>(cfg_.keep_prob), 32));
}

namespace {
// Counter-based: element `index` of the stream keyed by (seed, layer) is
// SplitMix64's output at that position, computable in any order.
inline uint64_t stream_key(uint64_t seed, uint64_t salt) { return mix64(seed ^ salt); }
inline bool kept_in(uint64_t key, uint64_t index, uint64_t threshold) {
  return (mix64(key + 0x9E3779B97F4A7C15ull * (index + 1)) >> 32) < threshold;
}
}  // namespace

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
