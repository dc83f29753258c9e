// slim.batch_norm (center, no scale) for the CPU trainer; layers.h has the
// formulas. Per-channel sums run in double: GoogLeNet's first batch norm
// sums 112*112 = 12544 rows per example.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "layer_util.h"
#include "terngrad/train/layers.h"

namespace terngrad::train {

using detail::fail;

namespace {

struct BatchNormScratch final : LayerScratch {
  BatchNorm::Stats stats;    // the last forward's mean and variance
  std::vector<float> inv;    // 1 / sqrt(var + eps) per channel
  std::vector<double> acc, acc2;
  std::vector<double> m1, m2;  // backward's per-channel means of dz and dz * xhat
};

// Rows and channels of a [N, ..., C] tensor.
void rows_channels(const Shape& s, const std::string& name, int64_t& rows, int64_t& c) {
  if (s.size() < 2 || s.back() <= 0) fail(name, "input " + shape_string(s) + " is not [N, ..., C] with C > 0");
  c = s.back();
  rows = numel(s) / c;
}

}  // namespace

BatchNorm::BatchNorm(BatchNormConfig cfg) : Layer(cfg.name), cfg_(std::move(cfg)) {
  if (name().empty()) fail("BatchNorm", "name is empty");
  if (!(cfg_.epsilon > 0.0f)) fail(name(), "epsilon = " + std::to_string(cfg_.epsilon) + " must be positive");
  if (!(cfg_.decay >= 0.0f && cfg_.decay <= 1.0f)) fail(name(), "decay = " + std::to_string(cfg_.decay) + " must be in [0, 1]");
}

Shape BatchNorm::output_shape(const Shape& in) const {
  int64_t rows = 0, c = 0;
  rows_channels(in, name(), rows, c);
  return in;
}

void BatchNorm::create_params(const Shape& in, ParamSet& params, std::mt19937_64&) {
  if (beta_ != kNoParam) fail(name(), "create_params called twice");
  int64_t rows = 0, c = 0;
  rows_channels(in, name(), rows, c);
  beta_ = params.add(Param{name() + "/beta", Tensor({c}, 0.0f), 0.0f, false});
}

void BatchNorm::create_state(const Shape& in, StateSet& state) {
  if (mean_ != kNoParam) fail(name(), "create_state called twice");
  int64_t rows = 0, c = 0;
  rows_channels(in, name(), rows, c);
  mean_ = state.add(StateVar{name() + "/moving_mean", Tensor({c}, 0.0f)});
  var_ = state.add(StateVar{name() + "/moving_variance", Tensor({c}, 1.0f)});
}

std::unique_ptr<LayerScratch> BatchNorm::make_scratch() const { return std::make_unique<BatchNormScratch>(); }

const BatchNorm::Stats& BatchNorm::last_stats(const LayerScratch* scratch, const std::string& layer) {
  auto* s = dynamic_cast<const BatchNormScratch*>(scratch);
  if (!s) fail(layer, "needs the scratch from its own make_scratch()");
  return s->stats;
}

void BatchNorm::fold(const std::vector<float>& batch_mean, const std::vector<float>& batch_variance,
                     StateSet& state) const {
  if (var_ >= state.size()) fail(name(), "fold_state before create_state");
  Tensor& mm = state.vars[mean_].value;
  Tensor& mv = state.vars[var_].value;
  if (batch_mean.size() != static_cast<size_t>(mm.size()) || batch_variance.size() != static_cast<size_t>(mv.size()))
    fail(name(), "batch statistics of " + std::to_string(batch_mean.size()) + " channels for moving statistics of " +
                     shape_string(mm.shape));
  const float one_minus_decay = 1.0f - cfg_.decay;
  for (int64_t c = 0; c < mm.size(); ++c) {
    mm.data[c] -= one_minus_decay * (mm.data[c] - batch_mean[c]);
    mv.data[c] -= one_minus_decay * (mv.data[c] - batch_variance[c]);
  }
}

void BatchNorm::fold_state(const LayerScratch* scratch, StateSet& state) const {
  const Stats& st = last_stats(scratch, name());
  if (!st.training) fail(name(), "fold_state needs a training forward on this scratch (the last one was evaluation or none)");
  fold(st.mean, st.variance, state);
}

void BatchNorm::forward(const ParamSet& params, const Tensor& x, Tensor& y, LayerScratch* scratch,
                        const ForwardContext& ctx) const {
  int64_t rows = 0, c = 0;
  rows_channels(x.shape, name(), rows, c);
  auto& s = detail::scratch_as<BatchNormScratch>(scratch, name());
  const float* beta = detail::param_value(params, beta_, {c}, name()).ptr();
  s.stats.mean.resize(c);
  s.stats.variance.resize(c);
  s.inv.resize(c);
  s.stats.training = ctx.training;
  if (ctx.training) {
    // Two passes (mean, then squared deviations): no cancellation when the
    // mean is large against the spread.
    s.acc.assign(c, 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x.ptr() + r * c;
      for (int64_t ch = 0; ch < c; ++ch) s.acc[ch] += xr[ch];
    }
    for (int64_t ch = 0; ch < c; ++ch) s.stats.mean[ch] = static_cast<float>(s.acc[ch] / static_cast<double>(rows));
    s.acc2.assign(c, 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x.ptr() + r * c;
      for (int64_t ch = 0; ch < c; ++ch) {
        const double d = static_cast<double>(xr[ch]) - s.stats.mean[ch];
        s.acc2[ch] += d * d;
      }
    }
    for (int64_t ch = 0; ch < c; ++ch) s.stats.variance[ch] = static_cast<float>(s.acc2[ch] / static_cast<double>(rows));
  } else {
    if (!ctx.state) fail(name(), "an evaluation forward needs the model state (ForwardContext::state)");
    if (var_ >= ctx.state->size()) fail(name(), "evaluation before create_state");
    const Tensor& mm = ctx.state->vars[mean_].value;
    const Tensor& mv = ctx.state->vars[var_].value;
    if (mm.shape != Shape{c} || mv.shape != Shape{c})
      fail(name(), "moving statistics " + shape_string(mm.shape) + " do not fit input " + shape_string(x.shape));
    std::copy(mm.data.begin(), mm.data.end(), s.stats.mean.begin());
    std::copy(mv.data.begin(), mv.data.end(), s.stats.variance.begin());
  }
  for (int64_t ch = 0; ch < c; ++ch) s.inv[ch] = 1.0f / std::sqrt(s.stats.variance[ch] + cfg_.epsilon);
  y.resize(x.shape);
  const float* __restrict mean = s.stats.mean.data();
  const float* __restrict inv = s.inv.data();
  for (int64_t r = 0; r < rows; ++r) {
    const float* __restrict xr = x.ptr() + r * c;
    float* __restrict yr = y.ptr() + r * c;
    for (int64_t ch = 0; ch < c; ++ch) {
      const float v = (xr[ch] - mean[ch]) * inv[ch] + beta[ch];
      yr[ch] = cfg_.relu ? std::max(v, 0.0f) : v;
    }
  }
}

void BatchNorm::backward(const ParamSet&, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx,
                         GradSet& grads, LayerScratch* scratch) const {
  int64_t rows = 0, c = 0;
  rows_channels(x.shape, name(), rows, c);
  detail::check_same_shape(dy, x.shape, "dy", name());
  if (cfg_.relu) detail::check_same_shape(y, x.shape, "y", name());
  auto& s = detail::scratch_as<BatchNormScratch>(scratch, name());
  if (s.inv.size() != static_cast<size_t>(c)) fail(name(), "backward without a forward on this scratch");
  float* dbeta = detail::grad_tensor(grads, beta_, {c}, name()).ptr();
  const float* __restrict mean = s.stats.mean.data();
  const float* __restrict inv = s.inv.data();
  // dz = dy through the ReLU; sum_dz and sum_dz_xhat per channel.
  auto dz_at = [&](int64_t i) { return cfg_.relu && !(y.data[i] > 0.0f) ? 0.0f : dy.data[i]; };
  s.acc.assign(c, 0.0);
  s.acc2.assign(c, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t ch = 0; ch < c; ++ch) {
      const int64_t i = r * c + ch;
      const double dz = dz_at(i);
      s.acc[ch] += dz;
      s.acc2[ch] += dz * ((x.data[i] - mean[ch]) * inv[ch]);
    }
  }
  for (int64_t ch = 0; ch < c; ++ch) dbeta[ch] += static_cast<float>(s.acc[ch]);
  if (!dx) return;
  dx->resize(x.shape);
  if (!s.stats.training) {
    // Constant statistics: y is affine in x.
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t ch = 0; ch < c; ++ch) dx->data[r * c + ch] = dz_at(r * c + ch) * inv[ch];
    return;
  }
  // Through the batch mean and variance (no gamma):
  //   dx = inv * (dz - mean(dz) - xhat * mean(dz * xhat)).
  // In double: the two means cancel most of dz when dz hardly varies over a
  // channel (GoogLeNet's last blocks, behind the global average pool, with a
  // batch of a few examples), and float32 means and xhat would leave their
  // rounding, magnified by that cancellation, in dx.
  s.m1.resize(c);
  s.m2.resize(c);
  double* __restrict m1 = s.m1.data();
  double* __restrict m2 = s.m2.data();
  for (int64_t ch = 0; ch < c; ++ch) {
    m1[ch] = s.acc[ch] / static_cast<double>(rows);
    m2[ch] = s.acc2[ch] / static_cast<double>(rows);
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t ch = 0; ch < c; ++ch) {
      const int64_t i = r * c + ch;
      const double xhat = (static_cast<double>(x.data[i]) - mean[ch]) * inv[ch];
      dx->data[i] = static_cast<float>(inv[ch] * (dz_at(i) - m1[ch] - xhat * m2[ch]));
    }
}

}  // namespace terngrad::train
