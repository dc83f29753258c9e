// The update kernels: one thread per element, the expressions of
// train/optim/momentum.cpp and adam.cpp.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "terngrad/device/grid_stride.cuh"
#include "terngrad/train/cuda/errors.h"
#include "terngrad/train/cuda/gpu_optimizer.h"
#include "kernels.h"

namespace terngrad::train::cuda {

using terngrad::device::grid_stride_range;

using detail::blocks_for;
using detail::kThreads;

namespace {

__global__ void sgd_kernel(float* w, const float* g, int64_t n, float lr) {
  for (const int64_t i : grid_stride_range(n))
    w[i] -= lr * g[i];
}

__global__ void momentum_kernel(float* w, const float* g, float* accum, int64_t n, float lr, float m, bool nesterov) {
  for (const int64_t i : grid_stride_range(n)) {
    accum[i] = m * accum[i] + g[i];
    if (nesterov)
      w[i] -= lr * g[i] + lr * m * accum[i];
    else
      w[i] -= lr * accum[i];
  }
}

__global__ void adam_kernel(float* w, const float* g, float* m, float* v, int64_t n, float lr_t, float b1, float b2,
                            float c1, float c2, float eps) {
  for (const int64_t i : grid_stride_range(n)) {
    m[i] = b1 * m[i] + c1 * g[i];
    v[i] = b2 * v[i] + c2 * g[i] * g[i];
    w[i] -= lr_t * m[i] / (sqrtf(v[i]) + eps);
  }
}

size_t slot_count(const std::string& name) { return name == "adam" ? 2 : name == "momentum" ? 1 : 0; }

}  // namespace

GpuOptimizer::GpuOptimizer(GpuOptimizerOptions options) : o_(std::move(options)) {
  if (o_.name != "sgd" && o_.name != "momentum" && o_.name != "adam")
    throw std::invalid_argument("optimizer \"" + o_.name + "\" has no GPU implementation (sgd, momentum, adam)");
}

void GpuOptimizer::init(const std::vector<DeviceTensor>& params) {
  if (!slots_.empty()) return;
  for (const DeviceTensor& p : params) {
    std::vector<DeviceTensor> s;
    for (size_t k = 0; k < slot_count(o_.name); ++k) {
      DeviceTensor t(p.shape);
      t.zero(nullptr);
      s.push_back(std::move(t));
    }
    slots_.push_back(std::move(s));
  }
  TG_CUDA_CHECK(cudaStreamSynchronize(nullptr));
}

void GpuOptimizer::apply(std::vector<DeviceTensor>& params, const std::vector<DeviceTensor>& grads, float lr,
                         cudaStream_t stream) {
  init(params);
  if (grads.size() != params.size())
    throw std::invalid_argument("GPU optimizer: " + std::to_string(grads.size()) + " gradients for " +
                                std::to_string(params.size()) + " parameters");
  ++steps_;
  // Adam's corrected rate in double from the integer step, as on the CPU.
  const double td = static_cast<double>(steps_);
  const auto lr_t = static_cast<float>(lr * std::sqrt(1.0 - std::pow(o_.beta2, td)) / (1.0 - std::pow(o_.beta1, td)));
  for (size_t v = 0; v < params.size(); ++v) {
    const int64_t n = params[v].size();
    if (grads[v].size() != n) throw std::invalid_argument("GPU optimizer: gradient " + std::to_string(v) + " size mismatch");
    if (n == 0) continue;
    if (o_.name == "sgd") {
      sgd_kernel<<<blocks_for(n), kThreads, 0, stream>>>(params[v].ptr(), grads[v].ptr(), n, lr);
    } else if (o_.name == "momentum") {
      momentum_kernel<<<blocks_for(n), kThreads, 0, stream>>>(params[v].ptr(), grads[v].ptr(), slots_[v][0].ptr(), n, lr,
                                                          o_.momentum, o_.nesterov);
    } else {
      adam_kernel<<<blocks_for(n), kThreads, 0, stream>>>(
          params[v].ptr(), grads[v].ptr(), slots_[v][0].ptr(), slots_[v][1].ptr(), n, lr_t,
          static_cast<float>(o_.beta1), static_cast<float>(o_.beta2), static_cast<float>(1.0 - o_.beta1),
          static_cast<float>(1.0 - o_.beta2), o_.epsilon);
    }
    TG_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace terngrad::train::cuda
