#include <algorithm>
#include <string>
#include <vector>

#include "im2col.h"
#include "layer_util.h"
#include "terngrad/train/layers.h"

namespace terngrad::train {

using detail::ConvGeometry;
using detail::fail;
using detail::view;

namespace {

// Patch block size in floats: a block of im2col rows is written and then
// read by the GEMM right away, so it should stay in L2 (1 MiB). On a LeNet
// step, 64 KiB to 1 MiB blocks ran alike; 16 MiB and the whole batch at once
// ran 1.5x slower.
constexpr int64_t kPatchBlockFloats = int64_t{1} << 18;

struct ConvScratch final : LayerScratch {
  std::vector<float> patches;   // one block of patch rows
  std::vector<float> dpatches;  // their gradient (backward)
  std::vector<float> dz;        // dy masked by the fused ReLU, one block
  std::vector<float> row;       // im2col's padded input row
  std::vector<float> db_block;  // bias gradient of one block
  std::vector<double> db;       // ... summed over blocks
  std::vector<float> zero_bias; // the bias forward adds when the layer has none
};

ConvGeometry conv_geometry(const Conv2DConfig& cfg, const std::string& name, const Shape& in) {
  if (in.size() != 4) fail(name, "input " + shape_string(in) + " is not [N, H, W, C]");
  ConvGeometry g;
  g.n = in[0], g.h = in[1], g.w = in[2], g.c = in[3];
  if (g.c <= 0 || g.c % cfg.groups != 0)
    fail(name, "input " + shape_string(in) + " has " + std::to_string(g.c) + " channels, not a positive multiple of groups = " +
                   std::to_string(cfg.groups));
  const WindowGeometry gy = window_geometry(g.h, cfg.kernel_h, cfg.stride, cfg.padding);
  const WindowGeometry gx = window_geometry(g.w, cfg.kernel_w, cfg.stride, cfg.padding);
  if (gy.out <= 0 || gx.out <= 0)
    fail(name, std::to_string(cfg.kernel_h) + "x" + std::to_string(cfg.kernel_w) + " " + padding_name(cfg.padding) +
                   " window does not fit input " + shape_string(in));
  g.oh = gy.out, g.ow = gx.out, g.f = cfg.filters;
  g.kh = cfg.kernel_h, g.kw = cfg.kernel_w, g.stride = cfg.stride;
  g.pad_top = gy.pad_before, g.pad_left = gx.pad_before;
  g.groups = cfg.groups;
  g.cg = g.c / cfg.groups;
  g.fg = cfg.filters / cfg.groups;
  g.k = g.kh * g.kw * g.cg;
  return g;
}

// Whole examples per block (at least one): keeps the indexing per example.
int64_t examples_per_block(const ConvGeometry& g) {
  return std::clamp<int64_t>(kPatchBlockFloats / std::max<int64_t>(g.pixels() * g.k, 1), 1, std::max<int64_t>(g.n, 1));
}

}  // namespace

Conv2D::Conv2D(Conv2DConfig cfg) : Layer(cfg.name), cfg_(std::move(cfg)) {
  const std::string& n = name();
  if (n.empty()) fail("Conv2D", "name is empty");
  auto positive = [&](const char* field, int64_t v) {
    if (v <= 0) fail(n, std::string(field) + " = " + std::to_string(v) + " must be positive");
  };
  positive("filters", cfg_.filters);
  positive("kernel_h", cfg_.kernel_h);
  positive("kernel_w", cfg_.kernel_w);
  positive("stride", cfg_.stride);
  positive("groups", cfg_.groups);
  if (cfg_.filters % cfg_.groups != 0)
    fail(n, "groups = " + std::to_string(cfg_.groups) + " does not divide filters = " + std::to_string(cfg_.filters));
  if (!(cfg_.init_stddev >= 0.0f)) fail(n, "init_stddev = " + std::to_string(cfg_.init_stddev) + " must be >= 0");
  if (!(cfg_.weight_decay >= 0.0f)) fail(n, "weight_decay = " + std::to_string(cfg_.weight_decay) + " must be >= 0");
}

Shape Conv2D::output_shape(const Shape& in) const {
  const ConvGeometry g = conv_geometry(cfg_, name(), in);
  return {g.n, g.oh, g.ow, g.f};
}

int64_t Conv2D::forward_macs_per_example(const Shape& in) const {
  const ConvGeometry g = conv_geometry(cfg_, name(), in);
  return g.pixels() * g.f * g.k;
}

void Conv2D::create_params(const Shape& in, ParamSet& params, std::mt19937_64& init_rng) {
  if (w_ != kNoParam) fail(name(), "create_params called twice");
  const ConvGeometry g = conv_geometry(cfg_, name(), in);
  Param w{name() + "/weights", Tensor({g.kh, g.kw, g.cg, g.f}), cfg_.weight_decay, false};
  init_weights(w.value.data, cfg_.init, cfg_.init_stddev, g.kh * g.kw * g.cg, g.kh * g.kw * g.f, init_rng);
  w_ = params.add(std::move(w));
  if (cfg_.bias) b_ = params.add(Param{name() + "/biases", Tensor({g.f}, cfg_.bias_init), 0.0f, false});
}

std::unique_ptr<LayerScratch> Conv2D::make_scratch() const { return std::make_unique<ConvScratch>(); }

void Conv2D::forward(const ParamSet& params, const Tensor& x, Tensor& y, LayerScratch* scratch,
                     const ForwardContext&) const {
  const ConvGeometry g = conv_geometry(cfg_, name(), x.shape);
  auto& s = detail::scratch_as<ConvScratch>(scratch, name());
  const float* w = detail::param_value(params, w_, {g.kh, g.kw, g.cg, g.f}, name()).ptr();
  // No biases (before a batch norm): add zeros, one code path.
  if (!cfg_.bias && static_cast<int64_t>(s.zero_bias.size()) != g.f) s.zero_bias.assign(g.f, 0.0f);
  const float* __restrict b = cfg_.bias ? detail::param_value(params, b_, {g.f}, name()).ptr() : s.zero_bias.data();
  y.resize({g.n, g.oh, g.ow, g.f});

  const int64_t block = examples_per_block(g);
  if (static_cast<int64_t>(s.patches.size()) < block * g.pixels() * g.k) s.patches.resize(block * g.pixels() * g.k);
  if (static_cast<int64_t>(s.row.size()) < g.row_buffer_floats()) s.row.resize(g.row_buffer_floats());
  for (int64_t n0 = 0; n0 < g.n; n0 += block) {
    const int64_t n1 = std::min(g.n, n0 + block), rows = (n1 - n0) * g.pixels();
    float* yb = y.ptr() + n0 * g.pixels() * g.f;
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      detail::im2col(g, x.ptr(), n0, n1, grp, s.patches.data(), s.row.data());
      view(yb + grp * g.fg, rows, g.fg, g.f).noalias() =
          view(static_cast<const float*>(s.patches.data()), rows, g.k, g.k) * view(w + grp * g.fg, g.k, g.fg, g.f);
    }
    // Bias and ReLU while the block is still in cache.
    for (int64_t r = 0; r < rows; ++r) {
      float* __restrict yr = yb + r * g.f;
      if (cfg_.relu) {
        for (int64_t f = 0; f < g.f; ++f) yr[f] = std::max(yr[f] + b[f], 0.0f);
      } else {
        for (int64_t f = 0; f < g.f; ++f) yr[f] += b[f];
      }
    }
  }
}

void Conv2D::backward(const ParamSet& params, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx,
                      GradSet& grads, LayerScratch* scratch) const {
  const ConvGeometry g = conv_geometry(cfg_, name(), x.shape);
  auto& s = detail::scratch_as<ConvScratch>(scratch, name());
  const Shape out{g.n, g.oh, g.ow, g.f};
  detail::check_same_shape(dy, out, "dy", name());
  if (cfg_.relu) detail::check_same_shape(y, out, "y", name());
  const Shape wshape{g.kh, g.kw, g.cg, g.f};
  const float* w = detail::param_value(params, w_, wshape, name()).ptr();
  float* dw = detail::grad_tensor(grads, w_, wshape, name()).ptr();
  float* db = cfg_.bias ? detail::grad_tensor(grads, b_, {g.f}, name()).ptr() : nullptr;
  if (dx) {
    dx->resize(x.shape);
    dx->fill(0.0f);  // col2im accumulates
  }

  const int64_t block = examples_per_block(g);
  const int64_t block_rows = block * g.pixels();
  if (static_cast<int64_t>(s.patches.size()) < block_rows * g.k) s.patches.resize(block_rows * g.k);
  if (static_cast<int64_t>(s.row.size()) < g.row_buffer_floats()) s.row.resize(g.row_buffer_floats());
  if (dx && static_cast<int64_t>(s.dpatches.size()) < block_rows * g.k) s.dpatches.resize(block_rows * g.k);
  if (cfg_.relu && static_cast<int64_t>(s.dz.size()) < block_rows * g.f) s.dz.resize(block_rows * g.f);
  // The bias gradient sums over every output pixel of the batch (50176 rows
  // for LeNet's first layer): float within a block (vectorized), double
  // across blocks, so long sums lose fewer digits.
  s.db.assign(g.f, 0.0);
  s.db_block.resize(g.f);
  float* __restrict db_sum = s.db_block.data();

  for (int64_t n0 = 0; n0 < g.n; n0 += block) {
    const int64_t n1 = std::min(g.n, n0 + block), rows = (n1 - n0) * g.pixels();
    const float* dyb = dy.ptr() + n0 * g.pixels() * g.f;
    const float* dz = dyb;
    std::fill(s.db_block.begin(), s.db_block.end(), 0.0f);
    // dz = dy through the fused ReLU (y > 0, TF's ReluGrad); the bias
    // gradient is its column sum.
    if (cfg_.relu) {
      const float* yb = y.ptr() + n0 * g.pixels() * g.f;
      for (int64_t r = 0; r < rows; ++r) {
        const float* __restrict yr = yb + r * g.f;
        const float* __restrict dyr = dyb + r * g.f;
        float* __restrict dzr = s.dz.data() + r * g.f;
        for (int64_t f = 0; f < g.f; ++f) {
          dzr[f] = yr[f] > 0.0f ? dyr[f] : 0.0f;
          db_sum[f] += dzr[f];
        }
      }
      dz = s.dz.data();
    } else {
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t f = 0; f < g.f; ++f) db_sum[f] += dyb[r * g.f + f];
    }
    for (int64_t f = 0; f < g.f; ++f) s.db[f] += db_sum[f];
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      // Patches are recomputed rather than kept from forward (see layers.h).
      detail::im2col(g, x.ptr(), n0, n1, grp, s.patches.data(), s.row.data());
      const auto patches = view(static_cast<const float*>(s.patches.data()), rows, g.k, g.k);
      const auto dz_g = view(dz + grp * g.fg, rows, g.fg, g.f);
      view(dw + grp * g.fg, g.k, g.fg, g.f).noalias() += patches.transpose() * dz_g;
      if (dx) {
        view(s.dpatches.data(), rows, g.k, g.k).noalias() = dz_g * view(w + grp * g.fg, g.k, g.fg, g.f).transpose();
        detail::col2im_add(g, s.dpatches.data(), n0, n1, grp, dx->ptr());
      }
    }
  }
  if (db)
    for (int64_t f = 0; f < g.f; ++f) db[f] += static_cast<float>(s.db[f]);
}

}  // namespace terngrad::train
