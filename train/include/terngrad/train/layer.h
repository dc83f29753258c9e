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
#include <functional>
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

// Model state: non-trainable variables a layer keeps beside its parameters
// (batch norm's moving mean and variance), named as in TensorFlow
// ("Conv2d_1a_7x7/BatchNorm/moving_mean"). They get no gradient and never go
// through a codec or the optimizer; Model::fold_state() updates them from one
// worker's batch statistics once per step (TF's multi-tower code updates them
// from one tower's batch), checkpoints and model.safetensors carry them, and
// evaluation reads them. Nets without batch norm have an empty StateSet.
struct StateVar {
  std::string name;
  Tensor value;
};

struct StateSet {
  std::vector<StateVar> vars;
  size_t add(StateVar v) {
    vars.push_back(std::move(v));
    return vars.size() - 1;
  }
  size_t size() const { return vars.size(); }
  bool empty() const { return vars.empty(); }
};

// Per-worker, per-layer scratch a layer keeps between forward and backward.
struct LayerScratch {
  virtual ~LayerScratch() = default;
};

// A wait for parameters (a cluster replica's sums of the last step still
// arriving): returns once elements [0, elements) of parameter `param` hold
// this step's values.
using ParamsNeeded = std::function<void(size_t param, int64_t elements)>;

// A layer's backward pass reporting part of a parameter's gradient done:
// elements [0, elements) of parameter `param` are final (the layer adds
// nothing more to them), so they can leave while the rest is computed.
using GradsDone = std::function<void(size_t param, int64_t elements)>;

struct ForwardContext {
  bool training = false;
  uint64_t dropout_seed = 0;  // distinct per (step, worker); dropout masks derive from it
  // The model state evaluation reads (batch norm's moving statistics); a
  // training forward uses the batch's own statistics and leaves it alone.
  // Model::predict and forward_backward point it at the model's state.
  const StateSet* state = nullptr;
  // Set in a training forward whose parameters may still be arriving; a
  // layer that streams_params() calls it before it reads each block of
  // them. Model::forward_backward waits for the other layers' itself.
  const ParamsNeeded* params_needed = nullptr;
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

  // Creates this layer's model state (see StateSet) for input shape `in`,
  // once, right after create_params.
  virtual void create_state(const Shape& in, StateSet& state) { (void)in, (void)state; }

  // Folds the statistics the last training forward on `scratch` recorded
  // into `state` (batch norm's moving averages). Not const on the state, so
  // the caller serializes it: the trainers call it for one worker per step,
  // between steps or while no forward reads the state.
  virtual void fold_state(const LayerScratch* scratch, StateSet& state) const { (void)scratch, (void)state; }

  virtual std::unique_ptr<LayerScratch> make_scratch() const { return nullptr; }

  // y = f(x); y is resized by the layer.
  virtual void forward(const ParamSet& params, const Tensor& x, Tensor& y, LayerScratch* scratch,
                       const ForwardContext& ctx) const = 0;

  // Given dL/dy: writes dL/dx into *dx (skipped when dx is null, for the first
  // layer) and ADDS the parameter gradients into grads (the caller zeroes them).
  virtual void backward(const ParamSet& params, const Tensor& x, const Tensor& y, const Tensor& dy,
                        Tensor* dx, GradSet& grads, LayerScratch* scratch) const = 0;

  // Whether forward() waits for its parameters itself, a block at a time,
  // through ctx.params_needed (Dense: its weights in row blocks, so the first
  // rows compute while the sums of the last ones still arrive). The model
  // waits for all of another layer's parameters before its forward().
  virtual bool streams_params() const { return false; }

  // Whether backward() can run as backward_params() then backward_input():
  // the parameter gradients first, complete, then dx. A trainer sends the
  // gradients between the two. backward() is the two calls, same arithmetic.
  virtual bool splits_backward() const { return false; }
  // Adds the parameter gradients (backward()'s contract without dx). done,
  // when given, may be called as a prefix of a parameter's gradient becomes
  // final (Dense: its weights a row block at a time).
  virtual void backward_params(const ParamSet& params, const Tensor& x, const Tensor& y, const Tensor& dy,
                               GradSet& grads, LayerScratch* scratch, const GradsDone* done) const;
  // Writes dx, after backward_params() on the same arguments and scratch.
  virtual void backward_input(const ParamSet& params, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx,
                              LayerScratch* scratch) const;

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
