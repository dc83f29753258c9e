// make_optimizer: names to optimizers, with option checks. Options that do
// not apply to the chosen optimizer are ignored (the trainer passes its
// --momentum to every optimizer).
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "option_check.h"

#include "optimizers.h"

namespace terngrad::train {

namespace {

// "<name> optimizer: <option> = <value> is out of range (<rule>)"
void require(bool ok, std::string_view optimizer, const char* option, double value, const char* rule) {
  detail::require_option(ok, std::string(optimizer) + " optimizer", option, value, rule);
}

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(std::string_view name, const OptimizerOptions& o) {
  if (name == "sgd") return detail::make_gradient_descent();
  if (name == "momentum") {
    const double m = o.momentum.value_or(0.9);
    require(std::isfinite(m) && m >= 0, name, "momentum", m, "finite, >= 0");
    return detail::make_momentum(static_cast<float>(m), o.nesterov);
  }
  if (name == "adam") {
    const double eps = o.epsilon.value_or(1e-8);
    require(o.beta1 >= 0 && o.beta1 < 1, name, "beta1", o.beta1, "[0, 1)");
    require(o.beta2 >= 0 && o.beta2 < 1, name, "beta2", o.beta2, "[0, 1)");
    require(std::isfinite(eps) && eps > 0, name, "epsilon", eps, "finite, > 0");
    return detail::make_adam(o.beta1, o.beta2, static_cast<float>(eps));
  }
  if (name == "rmsprop") {
    const double m = o.momentum.value_or(0.0);
    const double eps = o.epsilon.value_or(1e-10);
    require(o.decay >= 0 && o.decay <= 1, name, "decay", o.decay, "[0, 1]");
    require(std::isfinite(m) && m >= 0, name, "momentum", m, "finite, >= 0");
    require(std::isfinite(eps) && eps > 0, name, "epsilon", eps, "finite, > 0");
    return detail::make_rmsprop(static_cast<float>(o.decay), static_cast<float>(m), static_cast<float>(eps));
  }
  throw std::invalid_argument("unknown optimizer '" + std::string(name) + "'; known: sgd, momentum, adam, rmsprop");
}

}  // namespace terngrad::train
