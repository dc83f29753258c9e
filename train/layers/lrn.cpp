#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "layer_util.h"
#include "terngrad/train/layers.h"

namespace terngrad::train {

using detail::fail;

namespace {

// scale^-beta. CifarNet and AlexNet use beta = 0.75, where two square roots
// are several times cheaper than pow() and as accurate.
inline float pow_neg_beta(float scale, float beta) {
  if (beta == 0.75f) {
    const float r = std::sqrt(scale);
    return 1.0f / (r * std::sqrt(r));
  }
  if (beta == 0.5f) return 1.0f / std::sqrt(scale);
  return std::pow(scale, -beta);
}

struct LrnScratch final : LayerScratch {
  std::vector<float> scale;   // bias + alpha * sqr_sum per element, from forward
  std::vector<float> p;       // scale^-beta per element, from forward (backward needs it again)
  // One pixel's working rows. `padded` has depth_radius zeros on each side,
  // so every channel's window is the same 2r+1 consecutive floats and the
  // window sums vectorize across channels.
  std::vector<float> padded;  // x^2 (forward), dy * x * scale^(-beta-1) (backward)
  std::vector<float> sum;     // window sums
};

// sum[c] = sum of padded[c .. c + 2r] for c < channels, accumulated in the
// order k = 0..2r (the padding zeros add exactly nothing).
void window_sums(const float* __restrict padded, float* __restrict sum, int64_t channels, int64_t r) {
  for (int64_t ch = 0; ch < channels; ++ch) sum[ch] = padded[ch];
  for (int64_t k = 1; k <= 2 * r; ++k)
    for (int64_t ch = 0; ch < channels; ++ch) sum[ch] += padded[ch + k];
}

// p[c] = scale[c]^-beta for one pixel, the branch on beta outside the loop.
void pow_neg_beta_row(const float* __restrict scale, float* __restrict p, int64_t channels, float beta) {
  if (beta == 0.75f) {
    for (int64_t ch = 0; ch < channels; ++ch) p[ch] = pow_neg_beta(scale[ch], 0.75f);
  } else if (beta == 0.5f) {
    for (int64_t ch = 0; ch < channels; ++ch) p[ch] = pow_neg_beta(scale[ch], 0.5f);
  } else {
    for (int64_t ch = 0; ch < channels; ++ch) p[ch] = pow_neg_beta(scale[ch], beta);
  }
}

// Sizes the per-pixel rows for c channels; the padding of `padded` is
// zeroed here and never written afterwards.
void prepare_rows(LrnScratch& s, int64_t c, int64_t r) {
  s.padded.assign(c + 2 * r, 0.0f);
  if (s.sum.size() < static_cast<size_t>(c)) s.sum.resize(c);
}

void check_input(const std::string& name, const Shape& in) {
  if (in.size() != 4) fail(name, "input " + shape_string(in) + " is not [N, H, W, C]");
}

}  // namespace

LocalResponseNorm::LocalResponseNorm(LocalResponseNormConfig cfg) : Layer(cfg.name), cfg_(std::move(cfg)) {
  if (name().empty()) fail("LocalResponseNorm", "name is empty");
  if (cfg_.depth_radius < 0) fail(name(), "depth_radius = " + std::to_string(cfg_.depth_radius) + " must be >= 0");
  // bias > 0 keeps the scale positive, so scale^-beta is finite for x = 0.
  if (!(cfg_.bias > 0.0f)) fail(name(), "bias = " + std::to_string(cfg_.bias) + " must be > 0");
  if (!(cfg_.alpha >= 0.0f)) fail(name(), "alpha = " + std::to_string(cfg_.alpha) + " must be >= 0");
  if (!(cfg_.beta >= 0.0f)) fail(name(), "beta = " + std::to_string(cfg_.beta) + " must be >= 0");
}

Shape LocalResponseNorm::output_shape(const Shape& in) const {
  check_input(name(), in);
  return in;
}

std::unique_ptr<LayerScratch> LocalResponseNorm::make_scratch() const { return std::make_unique<LrnScratch>(); }

void LocalResponseNorm::forward(const ParamSet&, const Tensor& x, Tensor& y, LayerScratch* scratch,
                                const ForwardContext&) const {
  check_input(name(), x.shape);
  auto& s = detail::scratch_as<LrnScratch>(scratch, name());
  y.resize(x.shape);
  if (s.scale.size() < static_cast<size_t>(x.size())) s.scale.resize(x.size()), s.p.resize(x.size());
  const int64_t c = x.shape[3], pixels = x.size() / std::max<int64_t>(c, 1), r = cfg_.depth_radius;
  prepare_rows(s, c, r);
  float* sq = s.padded.data() + r;
  for (int64_t p = 0; p < pixels; ++p) {
    const float* __restrict xp = x.ptr() + p * c;
    float* __restrict yp = y.ptr() + p * c;
    float* __restrict sp = s.scale.data() + p * c;
    float* __restrict pp = s.p.data() + p * c;
    for (int64_t ch = 0; ch < c; ++ch) sq[ch] = xp[ch] * xp[ch];
    window_sums(s.padded.data(), s.sum.data(), c, r);
    for (int64_t ch = 0; ch < c; ++ch) sp[ch] = cfg_.bias + cfg_.alpha * s.sum[ch];
    pow_neg_beta_row(sp, pp, c, cfg_.beta);
    for (int64_t ch = 0; ch < c; ++ch) yp[ch] = xp[ch] * pp[ch];
  }
}

void LocalResponseNorm::backward(const ParamSet&, const Tensor& x, const Tensor&, const Tensor& dy, Tensor* dx,
                                 GradSet&, LayerScratch* scratch) const {
  check_input(name(), x.shape);
  detail::check_same_shape(dy, x.shape, "dy", name());
  if (!dx) return;
  auto& s = detail::scratch_as<LrnScratch>(scratch, name());
  if (s.scale.size() < static_cast<size_t>(x.size())) fail(name(), "backward without a forward on this scratch");
  dx->resize(x.shape);
  const int64_t c = x.shape[3], pixels = x.size() / std::max<int64_t>(c, 1), r = cfg_.depth_radius;
  prepare_rows(s, c, r);
  // y[c] = x[c] * scale[c]^-beta with scale[c] = bias + alpha * sum_{|c'-c|<=r} x[c']^2, so
  //   dx[k] = dy[k] * scale[k]^-beta
  //         - 2 * alpha * beta * x[k] * sum_{|c-k|<=r} dy[c] * x[c] * scale[c]^(-beta-1)
  // (the window is symmetric: k is in c's window exactly when c is in k's).
  const float coef = 2.0f * cfg_.alpha * cfg_.beta;
  float* t = s.padded.data() + r;
  for (int64_t p = 0; p < pixels; ++p) {
    const float* __restrict xp = x.ptr() + p * c;
    const float* __restrict dyp = dy.ptr() + p * c;
    const float* __restrict sp = s.scale.data() + p * c;
    const float* __restrict pp = s.p.data() + p * c;
    float* __restrict dxp = dx->ptr() + p * c;
    for (int64_t ch = 0; ch < c; ++ch) t[ch] = dyp[ch] * xp[ch] * pp[ch] / sp[ch];
    window_sums(s.padded.data(), s.sum.data(), c, r);
    for (int64_t ch = 0; ch < c; ++ch) dxp[ch] = dyp[ch] * pp[ch] - coef * xp[ch] * s.sum[ch];
  }
}

}  // namespace terngrad::train
