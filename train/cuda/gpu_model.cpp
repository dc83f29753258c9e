#include "terngrad/train/cuda/gpu_model.h"

#include <stdexcept>
#include <string>

#include "terngrad/train/cuda/errors.h"
#include "terngrad/train/cuda/loss.h"

namespace terngrad::train::cuda {

GpuModel::GpuModel(const Model& cpu) : cpu_(cpu) {
  for (const auto& layer : cpu.layers()) layers_.push_back(make_gpu_layer(*layer));
}

GpuModel::Workspace GpuModel::make_workspace() const {
  Workspace ws;
  ws.acts.resize(layers_.size() + 1);
  ws.dacts.resize(layers_.size() + 1);
  for (const auto& l : layers_) ws.scratch.push_back(l->make_scratch());
  return ws;
}

DeviceParams GpuModel::upload_params(cudaStream_t stream) const {
  DeviceParams out;
  for (const Param& p : cpu_.params().params) {
    DeviceTensor t;
    t.upload(p.value, stream);
    out.push_back(std::move(t));
  }
  // Pageable host memory: the copies above may still be reading it.
  TG_CUDA_CHECK(cudaStreamSynchronize(stream));
  return out;
}

DeviceGrads GpuModel::make_grads() const {
  DeviceGrads out;
  for (const Param& p : cpu_.params().params) {
    DeviceTensor t(p.value.shape);
    t.zero(nullptr);
    out.push_back(std::move(t));
  }
  TG_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  return out;
}

void GpuModel::forward_backward(GpuContext& ctx, Workspace& ws, const DeviceParams& params, const DeviceTensor& x,
                                const int32_t* d_labels, DeviceGrads& grads, float* d_loss,
                                const ForwardContext& fwd_in) const {
  ForwardContext fwd = fwd_in;
  if (!fwd.state) fwd.state = &cpu_.state();  // read only by an evaluation-mode batch norm
  for (DeviceTensor& g : grads) g.zero(ctx.stream());
  const DeviceTensor* in = &x;
  for (size_t i = 0; i < layers_.size(); ++i) {
    layers_[i]->forward(ctx, params, *in, ws.acts[i + 1], ws.scratch[i].get(), fwd);
    in = &ws.acts[i + 1];
  }
  softmax_cross_entropy(ctx, *in, d_labels, ws.dlogits, d_loss, ws.row_loss);
  const DeviceTensor* dy = &ws.dlogits;
  for (size_t i = layers_.size(); i-- > 0;) {
    const DeviceTensor& layer_in = i == 0 ? x : ws.acts[i];
    DeviceTensor* dx = i == 0 ? nullptr : &ws.dacts[i];
    layers_[i]->backward(ctx, params, layer_in, ws.acts[i + 1], *dy, dx, grads, ws.scratch[i].get());
    dy = dx;
  }
}

void GpuModel::fold_state(GpuContext& ctx, Workspace& ws, StateSet& state) const {
  if (state.empty()) return;
  for (size_t i = 0; i < layers_.size(); ++i) layers_[i]->fold_state(ctx, ws.scratch[i].get(), state);
}

const DeviceTensor& GpuModel::predict(GpuContext& ctx, Workspace& ws, const DeviceParams& params,
                                      const DeviceTensor& x) const {
  ForwardContext fwd;  // evaluation: dropout off, batch norm at the moving statistics
  fwd.state = &cpu_.state();
  const DeviceTensor* in = &x;
  for (size_t i = 0; i < layers_.size(); ++i) {
    layers_[i]->forward(ctx, params, *in, ws.acts[i + 1], ws.scratch[i].get(), fwd);
    in = &ws.acts[i + 1];
  }
  return *in;
}

void GpuModel::check_labels(std::span<const int32_t> labels, const std::string& who) const {
  for (size_t i = 0; i < labels.size(); ++i)
    if (labels[i] < 0 || labels[i] >= cpu_.num_classes())
      throw std::invalid_argument(who + ": label " + std::to_string(i) + " is " + std::to_string(labels[i]) +
                                  ", outside [0, " + std::to_string(cpu_.num_classes()) + ")");
}

}  // namespace terngrad::train::cuda
