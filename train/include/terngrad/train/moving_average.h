// Exponential moving average of the weights (tf.train.ExponentialMovingAverage
// with num_updates = the global step), used to evaluate smoothed weights.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "terngrad/train/layer.h"

namespace terngrad::train {

class ExponentialMovingAverage {
 public:
  // Shadows start as copies of the current values (TensorFlow initializes
  // them from the variables). decay in [0, 1], else std::invalid_argument.
  explicit ExponentialMovingAverage(const ParamSet& params, double decay = 0.9999);

  // TensorFlow's num_updates rule: min(decay, (1 + step) / (10 + step)).
  double decay_at(int64_t step) const;

  // shadow -= (1 - decay_at(step)) * (shadow - value), for every parameter.
  // Throws if the parameters do not match or the shadows are swapped in.
  void update(const ParamSet& params, int64_t step);
  // The same for elements [begin, begin + count) of parameter i alone (a
  // shard applied as its sum arrives); std::invalid_argument for a range
  // outside it. update_variable: the whole parameter.
  void update_range(const ParamSet& params, size_t i, int64_t begin, int64_t count, int64_t step);
  void update_variable(const ParamSet& params, size_t i, int64_t step);

  // Exchanges shadows and parameter values (O(1) per tensor): call once to
  // evaluate with the averages, again to restore the trained weights.
  void swap(ParamSet& params);
  bool swapped() const { return swapped_; }

  // Shadows named "<param>/ExponentialMovingAverage", in parameter order.
  // While swapped() they hold the trained values: checkpoint only unswapped.
  std::vector<std::pair<std::string, Tensor*>> shadows();

  double decay() const { return decay_; }

 private:
  void check(const ParamSet& params, const char* what) const;
  void update_one(const ParamSet& params, size_t i, int64_t begin, int64_t count, int64_t step);

  double decay_;
  std::vector<std::string> names_;
  std::vector<Tensor> shadow_;
  bool swapped_ = false;
};

}  // namespace terngrad::train
