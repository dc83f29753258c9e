// tf.train.GradientDescentOptimizer: w -= lr * g.
#include "optimizers.h"

namespace terngrad::train::detail {

namespace {

class GradientDescent final : public Optimizer {
 public:
  std::string name() const override { return "sgd"; }

 protected:
  std::vector<SlotSpec> slot_specs() const override { return {}; }

  void update(std::span<float> w, std::span<const float> g, std::span<const std::span<float>> slot, float lr,
              int64_t t) override {
    (void)slot, (void)t;
    const auto n = static_cast<int64_t>(w.size());
#pragma omp parallel for if (n > kParallelElements)
    for (int64_t i = 0; i < n; ++i) w[i] -= lr * g[i];
  }
};

}  // namespace

std::unique_ptr<Optimizer> make_gradient_descent() { return std::make_unique<GradientDescent>(); }

}  // namespace terngrad::train::detail
