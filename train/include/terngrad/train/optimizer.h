// Optimizers with TensorFlow 1.x update rules, so runs are comparable to the
// TernGrad paper's TensorFlow code: GradientDescent, Momentum, Adam, RMSProp.
//
// Slots (per-parameter state tensors) are named as TensorFlow names them:
//   momentum: "<param>/Momentum"
//   adam:     "<param>/Adam" (m), "<param>/Adam_1" (v)
//   rmsprop:  "<param>/RMSProp" (ms, starts at 1.0), "<param>/RMSProp_1" (momentum)
// Slots are created by init(params) or, lazily, by the first apply(). To
// restore a checkpoint, call init(params), assign the saved tensors through
// slots(), and load_state() the blob from save_state() (Adam's step count);
// the continued trajectory is then identical to an uninterrupted run.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "terngrad/train/layer.h"

namespace terngrad::train {

struct OptimizerOptions {
  // momentum: accumulator decay (default 0.9); rmsprop: momentum (default 0).
  std::optional<double> momentum{};
  double beta1 = 0.9;    // adam
  double beta2 = 0.999;  // adam
  // adam default 1e-8, rmsprop default 1e-10 (TensorFlow's defaults).
  std::optional<double> epsilon{};
  double decay = 0.9;     // rmsprop: decay of the mean square
  bool nesterov = false;  // momentum
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // "sgd", "momentum", "adam" or "rmsprop".
  virtual std::string name() const = 0;

  // Creates zero-step slots for params (names and sizes are remembered).
  // Idempotent for the same parameters; throws std::invalid_argument if
  // called again with a different set.
  void init(const ParamSet& params);

  // One update in place: grads are already averaged over workers and include
  // weight decay. Calls init(params) on first use. Throws
  // std::invalid_argument naming the parameter on a count or size mismatch
  // (including a slot resized through slots()).
  void apply(ParamSet& params, const GradSet& grads, float lr);

  // The same update a piece at a time (a cluster replica applies each shard
  // of a variable as soon as its sum has arrived, while the next step's
  // forward pass already reads the elements before it): apply_range() over
  // disjoint ranges that cover every parameter, in any order, then
  // finish_step(). The result is apply()'s, bit for bit: every update rule is
  // elementwise. apply_range() throws std::invalid_argument as apply() does
  // and for a range outside the parameter, and std::logic_error when a
  // parameter's ranges add up past its size in one step (an element applied
  // twice); finish_step() throws std::logic_error while an element is missing.
  void apply_range(ParamSet& params, const GradSet& grads, size_t i, int64_t begin, int64_t count, float lr);
  void apply_variable(ParamSet& params, const GradSet& grads, size_t i, float lr);  // the whole range
  void finish_step();

  // apply() of an optimizer init()ed with one parameter, on storage held
  // elsewhere: w and g in place of that parameter's value and gradient (the
  // async ps keeps its shards' values itself, so nothing is copied in and
  // out). The same update, bit for bit. Throws std::invalid_argument when the
  // optimizer holds other than one parameter or the sizes differ, and
  // std::logic_error in the middle of a step applied by range.
  void apply_to(std::span<float> w, std::span<const float> g, float lr);

  // Slot tensors by TensorFlow name, parameter order, then slot order. Empty
  // before init(). The pointers stay valid until the optimizer is destroyed.
  std::vector<std::pair<std::string, Tensor*>> slots();

  // Updates applied so far (Adam's t). Restored by load_state.
  int64_t steps() const { return steps_; }
  // Sets that count (an async parameter server resuming at a global step).
  void set_steps(int64_t steps) { steps_ = steps; }

  // Scalar state as a small versioned little-endian blob naming the optimizer.
  std::vector<uint8_t> save_state() const;
  // Throws std::invalid_argument on a blob from another optimizer or a bad length.
  void load_state(std::span<const uint8_t> blob);

 protected:
  // Slot suffixes and initial values, e.g. {"Adam", 0}, {"Adam_1", 0}.
  struct SlotSpec {
    std::string suffix;
    float initial;
  };
  virtual std::vector<SlotSpec> slot_specs() const = 0;
  static constexpr size_t kMaxSlots = 4;

  // Updates one parameter. slot[k] is that parameter's k-th slot;
  // `t` is the 1-based number of this update.
  virtual void update(std::span<float> w, std::span<const float> g, std::span<const std::span<float>> slot,
                      float lr, int64_t t) = 0;

 private:
  void check_count(const ParamSet& params, const GradSet& grads) const;
  void check_variable(const ParamSet& params, const GradSet& grads, size_t i) const;
  void update_range(ParamSet& params, const GradSet& grads, size_t i, int64_t begin, int64_t count, float lr);
  // update() of parameter i's elements [begin, begin + w.size()), on w and g.
  void update_elements(size_t i, size_t begin, std::span<float> w, std::span<const float> g, float lr);

  std::vector<SlotSpec> specs_;  // slot_specs(), fixed at init()
  std::vector<std::string> names_;
  std::vector<int64_t> sizes_;
  std::vector<std::vector<Tensor>> slots_;  // [param][slot]
  bool initialized_ = false;
  int64_t steps_ = 0;
  std::vector<int64_t> applied_;  // [param] elements applied this step (apply_range); empty between steps
};

// Creates "sgd", "momentum", "adam" or "rmsprop"; throws
// std::invalid_argument naming a bad name or option value.
std::unique_ptr<Optimizer> make_optimizer(std::string_view name, const OptimizerOptions& options = {});

}  // namespace terngrad::train
