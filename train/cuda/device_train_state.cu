// DeviceTrainState: the device weights, optimizer and moving average, and
// their copies to and from the CPU trainer's objects.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "terngrad/device/grid_stride.cuh"
#include "terngrad/train/cuda/device_train_state.h"
#include "terngrad/train/cuda/errors.h"
#include "kernels.h"

namespace terngrad::train::cuda {

using terngrad::device::grid_stride_range;

using detail::blocks_for;
using detail::kThreads;

namespace {

// The CPU's expression (train/optim/moving_average.cpp), element for element.
__global__ void moving_average_kernel(float* shadow, const float* value, int64_t n, float one_minus_decay) {
  for (const int64_t i : grid_stride_range(n))
    shadow[i] -= one_minus_decay * (shadow[i] - value[i]);
}

void require_same_size(const Tensor& host, const DeviceTensor& dev, const std::string& name) {
  if (host.size() != dev.size())
    throw std::invalid_argument("GPU training state: " + name + " has " + std::to_string(host.size()) +
                                " elements on the host, " + std::to_string(dev.size()) + " on the device");
}

void copy_to_device(const Tensor& host, DeviceTensor& dev, const std::string& name, cudaStream_t stream) {
  require_same_size(host, dev, name);
  if (host.size() > 0)
    TG_CUDA_CHECK(cudaMemcpyAsync(dev.ptr(), host.ptr(), static_cast<size_t>(host.size()) * sizeof(float),
                                  cudaMemcpyHostToDevice, stream));
}

void copy_to_host(const DeviceTensor& dev, Tensor& host, const std::string& name, cudaStream_t stream) {
  require_same_size(host, dev, name);
  if (host.size() > 0)
    TG_CUDA_CHECK(cudaMemcpyAsync(host.ptr(), dev.ptr(), static_cast<size_t>(host.size()) * sizeof(float),
                                  cudaMemcpyDeviceToHost, stream));
}

}  // namespace

DeviceTrainState::DeviceTrainState(const ParamSet& params, GpuOptimizerOptions optimizer, bool with_average,
                                   cudaStream_t stream)
    : optimizer_(std::move(optimizer)) {
  for (const Param& p : params.params) {
    names_.push_back(p.name);
    params_.emplace_back(p.value.shape);
    copy_to_device(p.value, params_.back(), p.name, stream);
    if (with_average) {
      shadows_.emplace_back(p.value.shape);
      copy_to_device(p.value, shadows_.back(), p.name, stream);
    }
  }
  TG_CUDA_CHECK(cudaStreamSynchronize(stream));
  optimizer_.init(params_);
}

void DeviceTrainState::apply(const DeviceGrads& grads, float lr, cudaStream_t stream) {
  optimizer_.apply(params_, grads, lr, stream);
}

void DeviceTrainState::update_average(float one_minus_decay, cudaStream_t stream) {
  for (size_t v = 0; v < shadows_.size(); ++v) {
    const int64_t n = shadows_[v].size();
    if (n == 0) continue;
    moving_average_kernel<<<blocks_for(n), kThreads, 0, stream>>>(shadows_[v].ptr(), params_[v].ptr(), n, one_minus_decay);
    TG_CUDA_CHECK_LAUNCH();
  }
}

void DeviceTrainState::check_params(const ParamSet& ps, const char* what) const {
  const std::string where = std::string("GPU training state ") + what + ": ";
  if (ps.size() != params_.size())
    throw std::invalid_argument(where + std::to_string(ps.size()) + " host parameters for " +
                                std::to_string(params_.size()) + " on the device");
  for (size_t v = 0; v < params_.size(); ++v)
    if (ps.params[v].name != names_[v] || ps.params[v].value.size() != params_[v].size())
      throw std::invalid_argument(where + "parameter " + std::to_string(v) + " is '" + ps.params[v].name + "' with " +
                                  std::to_string(ps.params[v].value.size()) + " elements on the host, '" + names_[v] +
                                  "' with " + std::to_string(params_[v].size()) + " on the device");
}

void DeviceTrainState::check(const HostTrainState& host, const char* what) const {
  const std::string where = std::string("GPU training state ") + what + ": ";
  if (!host.params || !host.optimizer) throw std::invalid_argument(where + "no host parameters or optimizer");
  check_params(*host.params, what);
  if (host.optimizer->name() != optimizer_.name())
    throw std::invalid_argument(where + "the host optimizer is " + host.optimizer->name() + ", the device's " +
                                optimizer_.name());
  size_t device_slots = 0;
  for (const auto& s : optimizer_.slots()) device_slots += s.size();
  if (host.optimizer->slots().size() != device_slots)
    throw std::invalid_argument(where + std::to_string(host.optimizer->slots().size()) + " host optimizer slots for " +
                                std::to_string(device_slots) + " on the device");
  if ((host.average != nullptr) != has_average())
    throw std::invalid_argument(where + (has_average() ? "the device keeps a moving average and the host none"
                                                       : "the host keeps a moving average and the device none"));
  if (host.average && host.average->swapped())
    throw std::invalid_argument(where + "the host average is swapped into the weights (evaluation in progress)");
}

void DeviceTrainState::download(const HostTrainState& host, cudaStream_t stream) const {
  check(host, "download");
  download_params(*host.params, stream);
  // Slots in the CPU optimizer's order: parameter order, then slot order.
  auto host_slots = host.optimizer->slots();
  size_t k = 0;
  for (const auto& per_param : optimizer_.slots())
    for (const DeviceTensor& slot : per_param) {
      copy_to_host(slot, *host_slots[k].second, host_slots[k].first, stream);
      ++k;
    }
  if (host.average) {
    auto shadows = host.average->shadows();
    for (size_t v = 0; v < shadows_.size(); ++v) copy_to_host(shadows_[v], *shadows[v].second, shadows[v].first, stream);
  }
  TG_CUDA_CHECK(cudaStreamSynchronize(stream));
  host.optimizer->set_steps(optimizer_.steps());
}

void DeviceTrainState::upload(const HostTrainState& host, cudaStream_t stream) {
  check(host, "upload");
  upload_params(*host.params, stream);
  auto host_slots = host.optimizer->slots();
  size_t k = 0;
  for (auto& per_param : optimizer_.slots())
    for (DeviceTensor& slot : per_param) {
      copy_to_device(*host_slots[k].second, slot, host_slots[k].first, stream);
      ++k;
    }
  if (host.average) {
    auto shadows = host.average->shadows();
    for (size_t v = 0; v < shadows_.size(); ++v) copy_to_device(*shadows[v].second, shadows_[v], shadows[v].first, stream);
  }
  TG_CUDA_CHECK(cudaStreamSynchronize(stream));
  optimizer_.set_steps(host.optimizer->steps());
}

void DeviceTrainState::download_params(ParamSet& params, cudaStream_t stream) const {
  check_params(params, "download");
  for (size_t v = 0; v < params_.size(); ++v) copy_to_host(params_[v], params.params[v].value, names_[v], stream);
  TG_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void DeviceTrainState::upload_params(const ParamSet& params, cudaStream_t stream) {
  check_params(params, "upload");
  for (size_t v = 0; v < params_.size(); ++v) copy_to_device(params.params[v].value, params_[v], names_[v], stream);
  TG_CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace terngrad::train::cuda
