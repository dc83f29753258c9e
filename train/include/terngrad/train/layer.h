// The layer interface of the CPU trainer.
//
// Parameters live outside the layers, in a ParamSet owned by the model, so
// the trainer can treat every variable uniformly (codec, optimizer, weight
// decay, checkpoints, safetensors) by name. A layer records the indices of the
// parameters it created and reads them from the ParamSet it is given.
//
// Each virtual worker runs the same layers on its own activations and its own
// LayerScratch (im2col buffers, pooling argmax, dropout masks), so workers
// can run concurrently without sharing mutable state.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "terngrad/train/tensor.h"

namespace terngrad::train {

// One trainable variable, named as in the TensorFlow models ("conv1/weights").
struct Param {
  std::string name;
  Tensor value;
  float weight_decay = 0.0f;  // L2 coefficient: loss += wd/2 * ||w||^2, gradient += wd * w
  bool is_logits = false;     // belongs to the logits layer (kept fp32 unless quantize_logits)
};

struct ParamSet {
  std::vector<Param> params;
  size_t add(Param p) {
    params.push_back(std::move(p));
    return params.size() - 1;
  }
  const Tensor& value(size_t i) const { return params[i].value; }
  size_t size() const { return params.size(); }
};

// Gradients, one tensor per parameter, same order and shapes as a ParamSet.
using GradSet = std::vector<Tensor>;

// Per-worker, per-layer scratch a layer keeps between forward and backward.
struct LayerScratch {
  virtual ~LayerScratch() = default;
};

struct ForwardContext {
  bool training = false;
  uint64_t dropout_seed = 0;  // distinct per (step, worker); dropout masks derive from it
};

class Layer {
 public:
  virtual ~Layer() = default;

  const std::string& name() const { return name_; }

  // Output shape for an input shape (batch first). Throws std::invalid_argument
  // naming the layer and both shapes when the input does not fit.
  virtual Shape output_shape(const Shape& in) const = 0;

  // Creates this layer's variables in `params` for input shape `in` (once, in
  // model order, so initialization is reproducible from one seed).
  virtual void create_params(const Shape& in, ParamSet& params, std::mt19937_64& init_rng) {
    (void)in, (void)params, (void)init_rng;
  }

  virtual std::unique_ptr<LayerScratch> make_scratch() const { return nullptr; }

  // y = f(x); y is resized by the layer.
  virtual void forward(const ParamSet& params, const Tensor& x, Tensor& y, LayerScratch* scratch,
                       const ForwardContext& ctx) const = 0;

  // Given dL/dy: writes dL/dx into *dx (skipped when dx is null, for the first
  // layer) and ADDS the parameter gradients into grads (the caller zeroes them).
  virtual void backward(const ParamSet& params, const Tensor& x, const Tensor& y, const Tensor& dy,
                        Tensor* dx, GradSet& grads, LayerScratch* scratch) const = 0;

  // Multiply-adds of one example's forward pass (for the GFLOP/s report).
  virtual int64_t forward_macs_per_example(const Shape& in) const {
    (void)in;
    return 0;
  }

 protected:
  explicit Layer(std::string name) : name_(std::move(name)) {}

 private:
  std::string name_;
};

}  // namespace terngrad::train
