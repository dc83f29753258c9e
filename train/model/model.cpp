#include "terngrad/train/model.h"

#include <sstream>
#include <stdexcept>

#include "terngrad/base/timeline.h"
#include "terngrad/train/loss.h"

namespace terngrad::train {

namespace {
Shape with_batch(int64_t batch, const Shape& example) {
  Shape s{batch};
  s.insert(s.end(), example.begin(), example.end());
  return s;
}
}  // namespace

Model::Model(std::string name, Shape input, int num_classes)
    : name_(std::move(name)), input_(std::move(input)), num_classes_(num_classes) {}

void Model::add(std::unique_ptr<Layer> layer) {
  if (built_) throw std::logic_error(name_ + ": add() after build()");
  layers_.push_back(std::move(layer));
}

void Model::build(uint64_t init_seed) {
  std::mt19937_64 rng(init_seed);
  Shape shape = with_batch(1, input_);
  out_shapes_.clear();
  layer_params_.clear();
  for (auto& layer : layers_) {
    const size_t first = params_.size();
    layer->create_params(shape, params_, rng);
    layer->create_state(shape, state_);
    layer_params_.emplace_back(first, params_.size());
    shape = layer->output_shape(shape);
    out_shapes_.push_back(Shape(shape.begin() + 1, shape.end()));
  }
  if (shape.size() != 2 || shape[1] != num_classes_) {
    throw std::invalid_argument(name_ + ": the last layer outputs " + shape_string(shape) + ", expected [N, " +
                                std::to_string(num_classes_) + "] logits");
  }
  built_ = true;
}

Model::Workspace Model::make_workspace() const {
  Workspace ws;
  ws.acts.resize(layers_.size() + 1);
  ws.dacts.resize(layers_.size() + 1);
  for (const auto& layer : layers_) ws.scratch.push_back(layer->make_scratch());
  return ws;
}

GradSet Model::make_grads() const {
  GradSet g;
  for (const Param& p : params_.params) g.emplace_back(p.value.shape);
  return g;
}

const Tensor& Model::predict(Workspace& ws, const Tensor& x) const {
  if (x.shape != with_batch(x.shape.empty() ? 0 : x.shape[0], input_)) {
    throw std::invalid_argument(name_ + ": input batch " + shape_string(x.shape) + " does not match the model input " +
                                shape_string(input_));
  }
  ForwardContext ctx;  // evaluation: dropout off, batch norm at the moving statistics
  ctx.state = &state_;
  const Tensor* in = &x;
  for (size_t i = 0; i < layers_.size(); ++i) {
    layers_[i]->forward(params_, *in, ws.acts[i + 1], ws.scratch[i].get(), ctx);
    in = &ws.acts[i + 1];
  }
  return *in;
}

float Model::forward_backward(Workspace& ws, const Tensor& x, std::span<const int32_t> labels, GradSet& grads,
                              const ForwardContext& ctx, const GradsReady& grads_ready,
                              const ParamsNeeded& params_needed, const GradsPartReady& grads_part_ready) const {
  if (static_cast<int64_t>(labels.size()) != x.dim(0)) {
    throw std::invalid_argument(name_ + ": " + std::to_string(labels.size()) + " labels for a batch of " +
                                std::to_string(x.dim(0)));
  }
  for (auto& g : grads) g.fill(0.0f);
  ForwardContext fwd = ctx;
  if (!fwd.state) fwd.state = &state_;  // read only by an evaluation-mode batch norm
  const Tensor* in = &x;
  if (params_needed) fwd.params_needed = &params_needed;
  auto has_params = [&](size_t i) { return i < layer_params_.size() && layer_params_[i].first < layer_params_[i].second; };
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (params_needed && has_params(i) && !layers_[i]->streams_params())
      for (size_t v = layer_params_[i].first; v < layer_params_[i].second; ++v) params_needed(v, params_.value(v).size());
    {
      const timeline::Span span("forward", static_cast<int64_t>(i));
      layers_[i]->forward(params_, *in, ws.acts[i + 1], ws.scratch[i].get(), fwd);
    }
    in = &ws.acts[i + 1];
  }
  const float loss = softmax_cross_entropy(*in, labels, ws.dlogits);
  const GradsDone part_done = [&](size_t v, int64_t elements) { grads_part_ready(loss, v, elements); };
  const GradsDone* done = grads_part_ready ? &part_done : nullptr;
  const Tensor* dy = &ws.dlogits;
  for (size_t i = layers_.size(); i-- > 0;) {
    const Tensor& layer_in = i == 0 ? x : ws.acts[i];
    Tensor* dx = i == 0 ? nullptr : &ws.dacts[i];
    LayerScratch* scratch = ws.scratch[i].get();
    const timeline::Span span("backward", static_cast<int64_t>(i));
    if ((grads_ready || done) && has_params(i) && layers_[i]->splits_backward()) {  // they leave while dx computes
      layers_[i]->backward_params(params_, layer_in, ws.acts[i + 1], *dy, grads, scratch, done);
      if (grads_ready) grads_ready(loss, layer_params_[i].first, layer_params_[i].second);
      layers_[i]->backward_input(params_, layer_in, ws.acts[i + 1], *dy, dx, scratch);
    } else {
      layers_[i]->backward(params_, layer_in, ws.acts[i + 1], *dy, dx, grads, scratch);
      if (grads_ready && has_params(i)) grads_ready(loss, layer_params_[i].first, layer_params_[i].second);
    }
    dy = dx;
  }
  return loss;
}

void Model::fold_state(const Workspace& ws) {
  if (state_.empty()) return;
  if (ws.scratch.size() != layers_.size())
    throw std::invalid_argument(name_ + ": fold_state with a workspace of " + std::to_string(ws.scratch.size()) +
                                " layers, the model has " + std::to_string(layers_.size()));
  for (size_t i = 0; i < layers_.size(); ++i) layers_[i]->fold_state(ws.scratch[i].get(), state_);
}

int64_t Model::forward_macs_per_example() const {
  int64_t macs = 0;
  Shape shape = with_batch(1, input_);
  for (const auto& layer : layers_) {
    macs += layer->forward_macs_per_example(shape);
    shape = layer->output_shape(shape);
  }
  return macs;
}

std::string Model::summary() const {
  std::ostringstream os;
  os << name_ << " input " << shape_string(input_) << "\n";
  for (size_t i = 0; i < layers_.size() && i < out_shapes_.size(); ++i)
    os << "  " << layers_[i]->name() << " -> " << shape_string(out_shapes_[i]) << "\n";
  int64_t total = 0;
  for (const Param& p : params_.params) total += p.value.size();
  os << "  " << params_.size() << " variables, " << total << " parameters, ";
  if (!state_.empty()) os << state_.size() << " state tensors, ";
  os
     << forward_macs_per_example() << " forward MACs per example";
  return os.str();
}

}  // namespace terngrad::train
