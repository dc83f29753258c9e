#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "layer_util.h"
#include "terngrad/train/layers.h"

namespace terngrad::train {

using detail::fail;
using detail::view;

namespace {

struct DenseScratch final : LayerScratch {
  std::vector<float> dz;  // dy masked by the fused ReLU (backward_params, read by backward_input)
};

// Rows and row length of the input flattened to [N, D].
struct Flat {
  int64_t n, d;
};

Flat flatten(const std::string& name, const Shape& in) {
  if (in.size() < 2) fail(name, "input " + shape_string(in) + " is not [N, ...] with at least one feature dimension");
  int64_t d = 1;
  for (size_t i = 1; i < in.size(); ++i) d *= in[i];
  if (d <= 0) fail(name, "input " + shape_string(in) + " has no features");
  return {in[0], d};
}

}  // namespace

Dense::Dense(DenseConfig cfg) : Layer(cfg.name), cfg_(std::move(cfg)) {
  if (name().empty()) fail("Dense", "name is empty");
  if (cfg_.units <= 0) fail(name(), "units = " + std::to_string(cfg_.units) + " must be positive");
  if (!(cfg_.init_stddev >= 0.0f)) fail(name(), "init_stddev = " + std::to_string(cfg_.init_stddev) + " must be >= 0");
  if (!(cfg_.weight_decay >= 0.0f)) fail(name(), "weight_decay = " + std::to_string(cfg_.weight_decay) + " must be >= 0");
}

Shape Dense::output_shape(const Shape& in) const { return {flatten(name(), in).n, cfg_.units}; }

int64_t Dense::forward_macs_per_example(const Shape& in) const { return flatten(name(), in).d * cfg_.units; }

void Dense::create_params(const Shape& in, ParamSet& params, std::mt19937_64& init_rng) {
  if (w_ != kNoParam) fail(name(), "create_params called twice");
  const Flat f = flatten(name(), in);
  Param w{name() + "/weights", Tensor({f.d, cfg_.units}), cfg_.weight_decay, cfg_.is_logits};
  init_weights(w.value.data, cfg_.init, cfg_.init_stddev, w.value.shape[0], cfg_.units, init_rng);
  w_ = params.add(std::move(w));
  b_ = params.add(Param{name() + "/biases", Tensor({cfg_.units}, cfg_.bias_init), 0.0f, cfg_.is_logits});
}

std::unique_ptr<LayerScratch> Dense::make_scratch() const { return std::make_unique<DenseScratch>(); }

int64_t Dense::block_rows(int64_t d, int64_t units) {
  // About 32 Ki weights a block (half a 256 KiB shard of the network's, so a
  // block waits for one new shard at most, and a shard's gradient is done a
  // block after its first row), and at least 64 rows so that each product
  // stays a GEMM worth packing. Measured against one GEMM over all rows
  // (Eigen, AVX-512, one core): the forward pass as fast or faster for
  // LeNet's fc3, CifarNet's local3 and AlexNet's fc6 at batch 32 and 128.
  const int64_t rows = std::max<int64_t>(64, (int64_t{1} << 15) / std::max<int64_t>(units, 1));
  return std::min(rows, d);
}

int64_t Dense::grad_block_rows(int64_t d, int64_t units) {
  // About 64 Ki weights (a 256 KiB shard's), at least 128 rows. Unlike the
  // forward pass's, each block is a product of its own, so smaller blocks
  // cost more here: against one GEMM (Eigen, AVX-512, one core) these are
  // 1.03x the time for LeNet's fc3 at batch 32 and 1.07x for AlexNet's fc6
  // at batch 128, where blocks of 32 Ki weights and 64 rows were 1.1-1.17x.
  const int64_t rows = std::max<int64_t>(128, (int64_t{1} << 16) / std::max<int64_t>(units, 1));
  return std::min(rows, d);
}

void Dense::forward(const ParamSet& params, const Tensor& x, Tensor& y, LayerScratch*,
                    const ForwardContext& ctx) const {
  const Flat f = flatten(name(), x.shape);
  const int64_t u = cfg_.units;
  const float* w = detail::param_value(params, w_, {f.d, u}, name()).ptr();
  const float* b = detail::param_value(params, b_, {u}, name()).ptr();
  y.resize({f.n, u});
  auto y_m = view(y.ptr(), f.n, u, u);
  y_m.setZero();
  const int64_t rows = block_rows(f.d, u);
  for (int64_t r = 0; r < f.d; r += rows) {
    const int64_t k = std::min(rows, f.d - r);
    if (ctx.params_needed) (*ctx.params_needed)(w_, (r + k) * u);
    y_m.noalias() += view(x.ptr() + r, f.n, k, f.d) * view(w + r * u, k, u, u);
  }
  if (ctx.params_needed) (*ctx.params_needed)(b_, u);
  for (int64_t r = 0; r < f.n; ++r) {
    float* yr = y.ptr() + r * u;
    if (cfg_.relu) {
      for (int64_t j = 0; j < u; ++j) yr[j] = std::max(yr[j] + b[j], 0.0f);
    } else {
      for (int64_t j = 0; j < u; ++j) yr[j] += b[j];
    }
  }
}

void Dense::backward(const ParamSet& params, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx,
                     GradSet& grads, LayerScratch* scratch) const {
  backward_params(params, x, y, dy, grads, scratch, nullptr);
  backward_input(params, x, y, dy, dx, scratch);
}

void Dense::backward_params(const ParamSet& params, const Tensor& x, const Tensor& y, const Tensor& dy,
                            GradSet& grads, LayerScratch* scratch, const GradsDone* done) const {
  const Flat f = flatten(name(), x.shape);
  const int64_t u = cfg_.units;
  detail::check_same_shape(dy, {f.n, u}, "dy", name());
  detail::param_value(params, w_, {f.d, u}, name());
  float* dw = detail::grad_tensor(grads, w_, {f.d, u}, name()).ptr();
  float* db = detail::grad_tensor(grads, b_, {u}, name()).ptr();
  const float* dz = dy.ptr();
  if (cfg_.relu) {
    detail::check_same_shape(y, {f.n, u}, "y", name());
    auto& s = detail::scratch_as<DenseScratch>(scratch, name());
    if (s.dz.size() < static_cast<size_t>(dy.size())) s.dz.resize(dy.size());
    for (int64_t i = 0; i < dy.size(); ++i) s.dz[i] = y.data[i] > 0.0f ? dy.data[i] : 0.0f;
    dz = s.dz.data();
  }
  for (int64_t r = 0; r < f.n; ++r)
    for (int64_t j = 0; j < u; ++j) db[j] += dz[r * u + j];
  const auto dz_m = view(dz, f.n, u, u);
  const int64_t rows = grad_block_rows(f.d, u);
  for (int64_t r = 0; r < f.d; r += rows) {
    const int64_t k = std::min(rows, f.d - r);
    view(dw + r * u, k, u, u).noalias() += view(x.ptr() + r, f.n, k, f.d).transpose() * dz_m;
    if (done) (*done)(w_, (r + k) * u);
  }
}

void Dense::backward_input(const ParamSet& params, const Tensor& x, const Tensor&, const Tensor& dy, Tensor* dx,
                           LayerScratch* scratch) const {
  if (!dx) return;
  const Flat f = flatten(name(), x.shape);
  const int64_t u = cfg_.units;
  detail::check_same_shape(dy, {f.n, u}, "dy", name());
  const float* w = detail::param_value(params, w_, {f.d, u}, name()).ptr();
  const float* dz = dy.ptr();
  if (cfg_.relu) {  // the masked gradient backward_params() left in the scratch
    const auto& s = detail::scratch_as<DenseScratch>(scratch, name());
    if (s.dz.size() < static_cast<size_t>(dy.size()))
      throw std::logic_error(name() + ": backward_input before backward_params");
    dz = s.dz.data();
  }
  dx->resize(x.shape);
  view(dx->ptr(), f.n, f.d, f.d).noalias() = view(dz, f.n, u, u) * view(w, f.d, u, u).transpose();
}

}  // namespace terngrad::train
