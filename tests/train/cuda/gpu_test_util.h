// Shared by the GPU layer tests: the skip without a device, random inputs,
// the CPU-vs-GPU comparison of one layer's forward and backward, and a small
// model with dropout.
//
// Error measure: max_i |gpu_i - cpu_i| / max_i |cpu_i| (relative to the
// tensor's largest magnitude, so the many near-zero elements of a gradient
// do not turn rounding noise into huge ratios). Each test states its bound.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>

#include "terngrad/train/cuda/context.h"
#include "terngrad/train/cuda/device_tensor.h"
#include "terngrad/train/cuda/gpu_layer.h"
#include "terngrad/train/layer.h"
#include "terngrad/train/layers.h"
#include "terngrad/train/model.h"

#define TG_REQUIRE_GPU()                                                                       \
  do {                                                                                         \
    if (!::terngrad::train::cuda::gpu_available())                                             \
      GTEST_SKIP() << "no CUDA device: " << ::terngrad::train::cuda::gpu_unavailable_reason() \
                   << "; this GPU check needs a device (scripts/gpu_checks.sh)";               \
  } while (0)

namespace terngrad::train::cuda::testing {

inline Tensor random_tensor(const Shape& s, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  Tensor t(s);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  for (float& v : t.data) v = u(rng);
  return t;
}

// Integer-valued floats in [-range, range]: many exact ties (pooling's tie rule).
inline Tensor tied_tensor(const Shape& s, uint64_t seed, int range) {
  Tensor t(s);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> u(-range, range);
  for (float& v : t.data) v = static_cast<float>(u(rng));
  return t;
}

inline double relative_error(const Tensor& gpu, const Tensor& cpu) {
  EXPECT_EQ(shape_string(gpu.shape), shape_string(cpu.shape));
  if (gpu.size() != cpu.size()) return INFINITY;
  double diff = 0.0, mag = 0.0;
  for (int64_t i = 0; i < cpu.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(gpu.data[i]) - cpu.data[i]));
    mag = std::max(mag, std::abs(static_cast<double>(cpu.data[i])));
  }
  return mag > 0 ? diff / mag : diff;
}

// ||gpu - cpu|| / ||cpu|| (L2 norms, in double).
inline double relative_l2_error(const Tensor& gpu, const Tensor& cpu) {
  EXPECT_EQ(shape_string(gpu.shape), shape_string(cpu.shape));
  if (gpu.size() != cpu.size()) return INFINITY;
  double diff = 0.0, mag = 0.0;
  for (int64_t i = 0; i < cpu.size(); ++i) {
    const double d = static_cast<double>(gpu.data[i]) - cpu.data[i];
    diff += d * d;
    mag += static_cast<double>(cpu.data[i]) * cpu.data[i];
  }
  return mag > 0 ? std::sqrt(diff / mag) : std::sqrt(diff);
}

// Runs `layer` on the CPU and its GPU twin with the same parameters, input,
// output gradient and ForwardContext; checks y, dx and every parameter
// gradient against `bound`. params must already hold the layer's variables.
inline void expect_layer_matches(const Layer& layer, const ParamSet& params, const Tensor& x, double bound,
                                 uint64_t seed = 7, const ForwardContext& fwd = ForwardContext{true, 0}) {
  // CPU.
  auto cpu_scratch = layer.make_scratch();
  Tensor y, dx;
  layer.forward(params, x, y, cpu_scratch.get(), fwd);
  const Tensor dy = random_tensor(y.shape, seed);
  GradSet grads;
  for (const Param& p : params.params) grads.emplace_back(p.value.shape);
  layer.backward(params, x, y, dy, &dx, grads, cpu_scratch.get());

  // GPU.
  GpuContext ctx;
  auto gpu = make_gpu_layer(layer);
  auto gpu_scratch = gpu->make_scratch();
  DeviceParams dparams;
  DeviceGrads dgrads;
  for (const Param& p : params.params) {
    dparams.push_back(to_device(p.value));
    DeviceTensor g(p.value.shape);
    g.zero(ctx.stream());
    dgrads.push_back(std::move(g));
  }
  const DeviceTensor dx_in = to_device(x), ddy = to_device(dy);
  DeviceTensor dy_out, ddx;
  gpu->forward(ctx, dparams, dx_in, dy_out, gpu_scratch.get(), fwd);
  gpu->backward(ctx, dparams, dx_in, dy_out, ddy, &ddx, dgrads, gpu_scratch.get());
  ctx.synchronize();

  const double ey = relative_error(to_host(dy_out), y);
  EXPECT_LE(ey, bound) << layer.name() << " forward y";
  const double edx = relative_error(to_host(ddx), dx);
  EXPECT_LE(edx, bound) << layer.name() << " backward dx";
  for (size_t i = 0; i < params.size(); ++i) {
    const double eg = relative_error(to_host(dgrads[i]), grads[i]);
    EXPECT_LE(eg, bound) << layer.name() << " gradient of " << params.params[i].name;
  }
  std::cout << "[ errors   ] " << layer.name() << ": y " << ey << ", dx " << edx << " (bound " << bound << ")\n";
}


// A layer with weights and biases (Conv2D, Dense): fresh parameters, biases
// set to 0.1 so the bias path is exercised, a random input from input_seed,
// then expect_layer_matches.
template <typename BiasedLayer>
void expect_biased_layer_matches(BiasedLayer& layer, const Shape& in, uint64_t input_seed, double bound) {
  ParamSet params;
  std::mt19937_64 rng(1);
  layer.create_params(in, params, rng);
  for (float& b : params.params[layer.biases_index()].value.data) b = 0.1f;
  expect_layer_matches(layer, params, random_tensor(in, input_seed), bound);
}

// AlexNet's classifier (fc6, dropout6, fc7, dropout7, logits) at a small
// width: the part of AlexNet with dropout, cheap enough to run on the CPU.
inline std::unique_ptr<Model> alexnet_classifier() {
  auto m = std::make_unique<Model>("alexnet_classifier", Shape{6, 6, 16}, 10);
  m->add(std::make_unique<Dense>(DenseConfig{.name = "fc6", .units = 256, .relu = true}));
  m->add(std::make_unique<Dropout>(DropoutConfig{"dropout6", 0.5f}));
  m->add(std::make_unique<Dense>(DenseConfig{.name = "fc7", .units = 256, .relu = true}));
  m->add(std::make_unique<Dropout>(DropoutConfig{"dropout7", 0.5f}));
  m->add(std::make_unique<Dense>(DenseConfig{.name = "logits", .units = 10, .is_logits = true}));
  m->build(3);
  return m;
}

}  // namespace terngrad::train::cuda::testing
