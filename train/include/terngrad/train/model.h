// A feed-forward network: an ordered list of layers plus the ParamSet (and
// StateSet) they created. LeNet, CifarNet, AlexNet and VGG-A are chains
// (AlexNet's two towers are grouped convolutions); GoogLeNet's Inception
// blocks are one composite layer each (BranchConcat, layers.h), so a
// sequence stays the whole graph.
//
// A Model is shared read-only by all virtual workers; each worker owns a
// Model::Workspace with its activations, activation gradients and layer scratch.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "terngrad/train/layer.h"

namespace terngrad::train {

class Model {
 public:
  // input: one example's shape (e.g. {28, 28, 1}); num_classes: logits width.
  Model(std::string name, Shape input, int num_classes);

  void add(std::unique_ptr<Layer> layer);
  // Creates every variable from one seed (truncated-normal inits in layer order)
  // and checks the chain's shapes; throws std::invalid_argument on a mismatch.
  void build(uint64_t init_seed);

  struct Workspace {
    std::vector<Tensor> acts;    // acts[0] = input batch, acts[i+1] = output of layer i
    std::vector<Tensor> dacts;   // gradient w.r.t. acts[i]
    std::vector<std::unique_ptr<LayerScratch>> scratch;
    Tensor dlogits;
  };
  Workspace make_workspace() const;

  // Forward + backward on one batch: returns the mean softmax cross-entropy
  // (without weight decay); grads are overwritten (zeroed, then filled).
  //
  // grads_ready, when given, is called as soon as the backward pass has
  // finished variables [first, end) (a layer's; layers run last to first),
  // so their gradients can leave while earlier layers still compute (the
  // loss is known by then). Those gradients are final: nothing adds to them later.
  //
  // params_needed, when given, is called before a layer's forward pass reads
  // its variables, first layer first, with (variable, elements): it must
  // return once elements [0, elements) of that variable hold their values. A
  // cluster replica waits there for the last step's sums, so the forward pass
  // starts on the first layers while the rest still arrive. Most layers get
  // one call per variable, whole, before their forward pass; a layer that
  // streams_params() (Dense) calls it itself, a row block at a time.
  //
  // grads_ready for a layer that splits_backward() (Dense) comes between its
  // parameter gradients and its dx. Before it, grads_part_ready, when given,
  // gets (loss, variable, elements) as such a layer finishes each prefix of a
  // variable's gradient (Dense: its weights a row block at a time): elements
  // [0, elements) are final, and may leave while the rest is computed.
  using GradsReady = std::function<void(float loss, size_t first, size_t end)>;
  using GradsPartReady = std::function<void(float loss, size_t v, int64_t elements)>;
  using ParamsNeeded = train::ParamsNeeded;
  float forward_backward(Workspace& ws, const Tensor& x, std::span<const int32_t> labels,
                         GradSet& grads, const ForwardContext& ctx, const GradsReady& grads_ready = {},
                         const ParamsNeeded& params_needed = {}, const GradsPartReady& grads_part_ready = {}) const;

  // Forward only (evaluation, batch norm at the moving statistics); returns
  // the logits tensor inside ws.
  const Tensor& predict(Workspace& ws, const Tensor& x) const;

  // Folds the batch statistics of ws's last training forward_backward into
  // the model state (batch norm's moving mean and variance; nothing for nets
  // without state). The trainers call it once per step with one worker's
  // workspace, as TF updates the moving averages from one tower's batch.
  void fold_state(const Workspace& ws);

  GradSet make_grads() const;  // zero tensors shaped like the params

  // Forward multiply-adds per example (training FLOPs ~ 3 x 2 x this).
  int64_t forward_macs_per_example() const;

  const std::string& name() const { return name_; }
  const Shape& input_shape() const { return input_; }
  int num_classes() const { return num_classes_; }
  ParamSet& params() { return params_; }
  const ParamSet& params() const { return params_; }
  StateSet& state() { return state_; }
  const StateSet& state() const { return state_; }
  const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }
  std::string summary() const;  // one line per layer: name, output shape, params

 private:
  std::string name_;
  Shape input_;
  int num_classes_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<Shape> out_shapes_;  // per example, after build()
  std::vector<std::pair<size_t, size_t>> layer_params_;  // [first, end) of each layer's variables
  ParamSet params_;
  StateSet state_;
  bool built_ = false;
};

}  // namespace terngrad::train
