// The concrete optimizers (one file each), created through make_optimizer().
#pragma once

#include <memory>

#include "terngrad/train/optimizer.h"

namespace terngrad::train::detail {

// Element-wise loops go parallel only above this size: below it the
// thread start-up costs more than the update.
inline constexpr int64_t kParallelElements = int64_t{1} << 15;

std::unique_ptr<Optimizer> make_gradient_descent();
std::unique_ptr<Optimizer> make_momentum(float momentum, bool nesterov);
std::unique_ptr<Optimizer> make_adam(double beta1, double beta2, float epsilon);
std::unique_ptr<Optimizer> make_rmsprop(float decay, float momentum, float epsilon);

}  // namespace terngrad::train::detail
