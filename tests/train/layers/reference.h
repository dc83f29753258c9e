// Float64 reference implementations of the layers, written as directly as
// possible from the TensorFlow definitions (nested loops, no im2col, no
// shared code with the library), and the gradient-check harness that
// compares a layer's float32 forward and backward with them.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "terngrad/train/layer.h"

namespace terngrad::train::testing {

using Vec = std::vector<double>;

inline Vec to_double(const Tensor& t) { return Vec(t.data.begin(), t.data.end()); }

inline Tensor random_tensor(const Shape& shape, std::mt19937_64& rng, double lo = -1.0, double hi = 1.0) {
  Tensor t(shape);
  std::uniform_real_distribution<double> u(lo, hi);
  for (float& v : t.data) v = static_cast<float>(u(rng));
  return t;
}

// TF's window rule, restated here rather than taken from the library.
struct RefWindow {
  int64_t out, pad;
};
inline RefWindow ref_window(int64_t in, int64_t k, int64_t s, bool same) {
  if (same) {
    const int64_t out = (in + s - 1) / s;
    return {out, std::max<int64_t>((out - 1) * s + k - in, 0) / 2};
  }
  return {(in - k + s) / s, 0};  // ceil((in - k + 1) / s)
}

struct RefConv {
  int64_t n, h, w, c, f, kh, kw, stride, groups;
  bool same, relu;
  int64_t oh() const { return ref_window(h, kh, stride, same).out; }
  int64_t ow() const { return ref_window(w, kw, stride, same).out; }
};

// Pre-activation of output (n, oy, ox, o); weights [kh, kw, c/groups, f].
inline double ref_conv_z(const RefConv& p, const Vec& x, const Vec& wt, const Vec& b, int64_t n, int64_t oy, int64_t ox,
                         int64_t o) {
  const int64_t cg = p.c / p.groups, fg = p.f / p.groups, grp = o / fg;
  const int64_t pt = ref_window(p.h, p.kh, p.stride, p.same).pad, pl = ref_window(p.w, p.kw, p.stride, p.same).pad;
  double z = b[o];
  for (int64_t i = 0; i < p.kh; ++i) {
    for (int64_t j = 0; j < p.kw; ++j) {
      const int64_t iy = oy * p.stride - pt + i, ix = ox * p.stride - pl + j;
      if (iy < 0 || iy >= p.h || ix < 0 || ix >= p.w) continue;
      for (int64_t ci = 0; ci < cg; ++ci) {
        z += x[((n * p.h + iy) * p.w + ix) * p.c + grp * cg + ci] * wt[((i * p.kw + j) * cg + ci) * p.f + o];
      }
    }
  }
  return z;
}

inline Vec ref_conv(const RefConv& p, const Vec& x, const Vec& wt, const Vec& b) {
  Vec y;
  for (int64_t n = 0; n < p.n; ++n)
    for (int64_t oy = 0; oy < p.oh(); ++oy)
      for (int64_t ox = 0; ox < p.ow(); ++ox)
        for (int64_t o = 0; o < p.f; ++o) {
          const double z = ref_conv_z(p, x, wt, b, n, oy, ox, o);
          y.push_back(p.relu ? std::max(z, 0.0) : z);
        }
  return y;
}

// Exact float64 backward of ref_conv for upstream gradient dy (used where a
// numerical gradient over every element would be too slow).
inline void ref_conv_backward(const RefConv& p, const Vec& x, const Vec& wt, const Vec& b, const Vec& dy, Vec& dx,
                              Vec& dw, Vec& db) {
  const int64_t cg = p.c / p.groups, fg = p.f / p.groups;
  const int64_t pt = ref_window(p.h, p.kh, p.stride, p.same).pad, pl = ref_window(p.w, p.kw, p.stride, p.same).pad;
  dx.assign(x.size(), 0.0), dw.assign(wt.size(), 0.0), db.assign(b.size(), 0.0);
  size_t idx = 0;
  for (int64_t n = 0; n < p.n; ++n)
    for (int64_t oy = 0; oy < p.oh(); ++oy)
      for (int64_t ox = 0; ox < p.ow(); ++ox)
        for (int64_t o = 0; o < p.f; ++o, ++idx) {
          double g = dy[idx];
          if (p.relu && ref_conv_z(p, x, wt, b, n, oy, ox, o) <= 0.0) g = 0.0;
          if (g == 0.0) continue;
          db[o] += g;
          const int64_t grp = o / fg;
          for (int64_t i = 0; i < p.kh; ++i)
            for (int64_t j = 0; j < p.kw; ++j) {
              const int64_t iy = oy * p.stride - pt + i, ix = ox * p.stride - pl + j;
              if (iy < 0 || iy >= p.h || ix < 0 || ix >= p.w) continue;
              for (int64_t ci = 0; ci < cg; ++ci) {
                const size_t xi = ((n * p.h + iy) * p.w + ix) * p.c + grp * cg + ci;
                const size_t wi = ((i * p.kw + j) * cg + ci) * p.f + o;
                dw[wi] += g * x[xi];
                dx[xi] += g * wt[wi];
              }
            }
        }
}

struct RefPool {
  int64_t n, h, w, c, k, stride;
  bool same;
};
inline Vec ref_maxpool(const RefPool& p, const Vec& x) {
  const RefWindow wy = ref_window(p.h, p.k, p.stride, p.same), wx = ref_window(p.w, p.k, p.stride, p.same);
  Vec y;
  for (int64_t n = 0; n < p.n; ++n)
    for (int64_t oy = 0; oy < wy.out; ++oy)
      for (int64_t ox = 0; ox < wx.out; ++ox)
        for (int64_t ch = 0; ch < p.c; ++ch) {
          double m = -std::numeric_limits<double>::infinity();  // SAME padding is -inf
          for (int64_t i = 0; i < p.k; ++i)
            for (int64_t j = 0; j < p.k; ++j) {
              const int64_t iy = oy * p.stride - wy.pad + i, ix = ox * p.stride - wx.pad + j;
              if (iy >= 0 && iy < p.h && ix >= 0 && ix < p.w) m = std::max(m, x[((n * p.h + iy) * p.w + ix) * p.c + ch]);
            }
          y.push_back(m);
        }
  return y;
}

// tf.nn.avg_pool: SAME windows average their in-image cells only.
inline Vec ref_avgpool(const RefPool& p, const Vec& x) {
  const RefWindow wy = ref_window(p.h, p.k, p.stride, p.same), wx = ref_window(p.w, p.k, p.stride, p.same);
  Vec y;
  for (int64_t n = 0; n < p.n; ++n)
    for (int64_t oy = 0; oy < wy.out; ++oy)
      for (int64_t ox = 0; ox < wx.out; ++ox)
        for (int64_t ch = 0; ch < p.c; ++ch) {
          double sum = 0;
          int count = 0;
          for (int64_t i = 0; i < p.k; ++i)
            for (int64_t j = 0; j < p.k; ++j) {
              const int64_t iy = oy * p.stride - wy.pad + i, ix = ox * p.stride - wx.pad + j;
              if (iy >= 0 && iy < p.h && ix >= 0 && ix < p.w) sum += x[((n * p.h + iy) * p.w + ix) * p.c + ch], ++count;
            }
          y.push_back(sum / count);
        }
  return y;
}

// slim.batch_norm (center, no scale) over the last axis of a [rows, c]
// tensor: the batch's mean and biased variance (training) or the given ones.
inline Vec ref_batch_norm(const Vec& x, int64_t c, const Vec& beta, double eps, bool relu, const Vec* mean_in = nullptr,
                          const Vec* var_in = nullptr) {
  const int64_t rows = static_cast<int64_t>(x.size()) / c;
  Vec mean(c, 0.0), var(c, 0.0);
  if (mean_in) {
    mean = *mean_in, var = *var_in;
  } else {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t ch = 0; ch < c; ++ch) mean[ch] += x[r * c + ch] / rows;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t ch = 0; ch < c; ++ch) var[ch] += (x[r * c + ch] - mean[ch]) * (x[r * c + ch] - mean[ch]) / rows;
  }
  Vec y(x.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t ch = 0; ch < c; ++ch) {
      const double v = (x[r * c + ch] - mean[ch]) / std::sqrt(var[ch] + eps) + beta[ch];
      y[r * c + ch] = relu ? std::max(v, 0.0) : v;
    }
  return y;
}

inline Vec ref_lrn(const Vec& x, int64_t c, int64_t radius, double bias, double alpha, double beta) {
  Vec y(x.size());
  for (size_t p = 0; p < x.size() / c; ++p)
    for (int64_t ch = 0; ch < c; ++ch) {
      double sq = 0;
      for (int64_t k = ch - radius; k <= ch + radius; ++k)
        if (k >= 0 && k < c) sq += x[p * c + k] * x[p * c + k];
      y[p * c + ch] = x[p * c + ch] / std::pow(bias + alpha * sq, beta);
    }
  return y;
}

inline Vec ref_dense(const Vec& x, int64_t n, int64_t d, const Vec& wt, const Vec& b, int64_t units, bool relu) {
  Vec y(n * units);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t u = 0; u < units; ++u) {
      double z = b[u];
      for (int64_t k = 0; k < d; ++k) z += x[r * d + k] * wt[k * units + u];
      y[r * units + u] = relu ? std::max(z, 0.0) : z;
    }
  return y;
}

// ---------------------------------------------------------------------------
// Gradient check.
//
// The layer runs in float32 on (x, params); the reference runs in float64 on
// the same values. Forward: every output within fwd_rtol * max|y_ref| of the
// reference. Backward: with the scalar loss L = sum(y * r) for a fixed random
// r, dx and every parameter gradient are compared with central differences
// of the float64 reference (step h), element by element:
//   |analytic - numeric| <= grad_rtol * (|numeric| + max|numeric over the tensor|).
// The float64 numeric side is accurate to ~1e-9, so the tolerance measures
// the layer's float32 rounding only.

using RefFn = std::function<Vec(const Vec& x, const std::vector<Vec>& params)>;

struct GradCheck {
  double fwd_rtol = 1e-5;
  double grad_rtol = 1e-4;
  double h = 1e-6;
  bool check_dx = true;
  bool training = false;  // the forward's ForwardContext::training (batch norm's batch statistics)
};

inline void expect_close(const std::string& what, const Vec& analytic, const Vec& numeric, double rtol) {
  ASSERT_EQ(analytic.size(), numeric.size()) << what;
  double scale = 0;
  for (double v : numeric) scale = std::max(scale, std::fabs(v));
  int reported = 0;
  for (size_t i = 0; i < numeric.size(); ++i) {
    const double tol = rtol * (std::fabs(numeric[i]) + scale) + 1e-12;
    if (std::fabs(analytic[i] - numeric[i]) > tol && reported++ < 5) {
      ADD_FAILURE() << what << "[" << i << "]: layer " << analytic[i] << ", reference " << numeric[i] << " (tolerance "
                    << tol << ")";
    }
  }
}

inline double weighted_sum(const Vec& y, const Vec& r) {
  double s = 0;
  for (size_t i = 0; i < y.size(); ++i) s += y[i] * r[i];
  return s;
}

// Runs the whole check; params are the layer's own (indices first..first+k).
inline void check_layer(const Layer& layer, ParamSet& params, const std::vector<size_t>& param_idx, const Tensor& x,
                        const RefFn& ref, const GradCheck& opt, uint64_t seed = 99) {
  std::mt19937_64 rng(seed);
  auto scratch = layer.make_scratch();
  ForwardContext ctx;
  ctx.training = opt.training;
  Tensor y;
  layer.forward(params, x, y, scratch.get(), ctx);
  ASSERT_EQ(y.shape, layer.output_shape(x.shape));

  const Vec xd = to_double(x);
  std::vector<Vec> pd;
  for (size_t i : param_idx) pd.push_back(to_double(params.value(i)));
  const Vec yref = ref(xd, pd);
  expect_close(layer.name() + " forward", to_double(y), yref, opt.fwd_rtol);

  const Tensor r = random_tensor(y.shape, rng);
  const Vec rd = to_double(r);
  // Gradients start non-zero: backward must add to them.
  GradSet grads;
  for (const Param& p : params.params) grads.emplace_back(p.value.shape, 0.25f);
  Tensor dx;
  layer.backward(params, x, y, r, opt.check_dx ? &dx : nullptr, grads, scratch.get());

  auto numeric = [&](Vec& v, const std::function<Vec()>& eval) {
    Vec g(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      const double keep = v[i];
      v[i] = keep + opt.h;
      const double up = weighted_sum(eval(), rd);
      v[i] = keep - opt.h;
      const double down = weighted_sum(eval(), rd);
      v[i] = keep;
      g[i] = (up - down) / (2 * opt.h);
    }
    return g;
  };
  Vec xv = xd;
  std::vector<Vec> pv = pd;
  if (opt.check_dx) {
    ASSERT_EQ(dx.shape, x.shape);
    expect_close(layer.name() + " dx", to_double(dx), numeric(xv, [&] { return ref(xv, pv); }), opt.grad_rtol);
  }
  for (size_t k = 0; k < param_idx.size(); ++k) {
    Vec analytic = to_double(grads[param_idx[k]]);
    for (double& v : analytic) v -= 0.25;
    expect_close(params.params[param_idx[k]].name + " gradient", analytic,
                 numeric(pv[k], [&] { return ref(xv, pv); }), opt.grad_rtol);
  }
}

}  // namespace terngrad::train::testing
