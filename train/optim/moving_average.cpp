// tf.train.ExponentialMovingAverage(decay, num_updates=global_step):
//   decay_t = min(decay, (1 + step) / (10 + step))
//   shadow -= (1 - decay_t) * (shadow - value)
// The num_updates cap lets the average follow the weights closely early in
// training, when they move fast, instead of staying near the initial values.
#include "terngrad/train/moving_average.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "terngrad/train/element_range.h"

namespace terngrad::train {

ExponentialMovingAverage::ExponentialMovingAverage(const ParamSet& params, double decay) : decay_(decay) {
  if (!(decay >= 0 && decay <= 1))
    throw std::invalid_argument("ExponentialMovingAverage: decay = " + std::to_string(decay) +
                                " is out of range [0, 1]");
  for (const Param& p : params.params) {
    names_.push_back(p.name);
    shadow_.push_back(p.value);
  }
}

double ExponentialMovingAverage::decay_at(int64_t step) const {
  const double s = static_cast<double>(std::max<int64_t>(step, 0));
  return std::min(decay_, (1.0 + s) / (10.0 + s));
}

void ExponentialMovingAverage::check(const ParamSet& params, const char* what) const {
  if (params.size() != shadow_.size())
    throw std::invalid_argument(std::string("ExponentialMovingAverage::") + what + ": " +
                                std::to_string(params.size()) + " parameters, the average has " +
                                std::to_string(shadow_.size()));
  for (size_t i = 0; i < shadow_.size(); ++i) {
    const Param& p = params.params[i];
    if (p.name != names_[i] || p.value.size() != shadow_[i].size())
      throw std::invalid_argument(std::string("ExponentialMovingAverage::") + what + ": parameter " +
                                  std::to_string(i) + " is '" + p.name + "' with " + std::to_string(p.value.size()) +
                                  " elements, the average has '" + names_[i] + "' with " +
                                  std::to_string(shadow_[i].size()));
  }
}

void ExponentialMovingAverage::update(const ParamSet& params, int64_t step) {
  check(params, "update");
  for (size_t i = 0; i < shadow_.size(); ++i) update_one(params, i, 0, shadow_[i].size(), step);
}

void ExponentialMovingAverage::update_variable(const ParamSet& params, size_t i, int64_t step) {
  update_range(params, i, 0, i < shadow_.size() ? shadow_[i].size() : 0, step);
}

void ExponentialMovingAverage::update_range(const ParamSet& params, size_t i, int64_t begin, int64_t count,
                                            int64_t step) {
  // Parameter i alone is checked: every shard of a step calls this.
  if (params.size() != shadow_.size() || i >= shadow_.size())
    throw std::invalid_argument("ExponentialMovingAverage::update_range(" + std::to_string(i) + ") with " +
                                std::to_string(params.size()) + " parameters, the average has " +
                                std::to_string(shadow_.size()));
  const Param& p = params.params[i];
  if (p.name != names_[i] || p.value.size() != shadow_[i].size())
    throw std::invalid_argument("ExponentialMovingAverage::update_range: parameter " + std::to_string(i) +
                                " is '" + p.name + "' with " + std::to_string(p.value.size()) +
                                " elements, the average has '" + names_[i] + "' with " +
                                std::to_string(shadow_[i].size()));
  check_element_range("ExponentialMovingAverage::update_range", "'" + p.name + "'", begin, count, p.value.size());
  update_one(params, i, begin, count, step);
}

void ExponentialMovingAverage::update_one(const ParamSet& params, size_t i, int64_t begin, int64_t count,
                                          int64_t step) {
  if (swapped_)
    throw std::logic_error("ExponentialMovingAverage::update: the shadows are swapped into the parameters; "
                           "call swap() again first");
  const auto one_minus = static_cast<float>(1.0 - decay_at(step));
  float* s = shadow_[i].ptr() + begin;
  const float* v = params.params[i].value.ptr() + begin;
  const int64_t n = count;
#pragma omp parallel for if (n > (int64_t{1} << 15))
  for (int64_t j = 0; j < n; ++j) s[j] -= one_minus * (s[j] - v[j]);
}

void ExponentialMovingAverage::swap(ParamSet& params) {
  check(params, "swap");
  for (size_t i = 0; i < shadow_.size(); ++i) std::swap(shadow_[i].data, params.params[i].value.data);
  swapped_ = !swapped_;
}

std::vector<std::pair<std::string, Tensor*>> ExponentialMovingAverage::shadows() {
  std::vector<std::pair<std::string, Tensor*>> out;
  for (size_t i = 0; i < shadow_.size(); ++i) out.emplace_back(names_[i] + "/ExponentialMovingAverage", &shadow_[i]);
  return out;
}

}  // namespace terngrad::train
