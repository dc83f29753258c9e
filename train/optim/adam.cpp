// tf.train.AdamOptimizer (ApplyAdam), t = 1, 2, ...:
//   lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t)
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g^2
//   w -= lr_t * m / (sqrt(v) + epsilon)
// epsilon is added to sqrt(v) without bias correction ("epsilon hat" in the
// Adam paper), as TensorFlow does. lr_t is computed in double from the
// integer step count rather than from running float products of beta, so the
// checkpointed state is just t.
#include <cmath>

#include "optimizers.h"

namespace terngrad::train::detail {

namespace {

class Adam final : public Optimizer {
 public:
  Adam(double beta1, double beta2, float epsilon) : beta1_(beta1), beta2_(beta2), eps_(epsilon) {}
  std::string name() const override { return "adam"; }

 protected:
  std::vector<SlotSpec> slot_specs() const override { return {{"Adam", 0.0f}, {"Adam_1", 0.0f}}; }

  void update(std::span<float> w, std::span<const float> g, std::span<const std::span<float>> slot, float lr,
              int64_t t) override {
    const double td = static_cast<double>(t);
    const auto lr_t = static_cast<float>(lr * std::sqrt(1.0 - std::pow(beta2_, td)) / (1.0 - std::pow(beta1_, td)));
    const auto b1 = static_cast<float>(beta1_), b2 = static_cast<float>(beta2_);
    const auto c1 = static_cast<float>(1.0 - beta1_), c2 = static_cast<float>(1.0 - beta2_);
    const float eps = eps_;
    float* m = slot[0].data();
    float* v = slot[1].data();
    const auto n = static_cast<int64_t>(w.size());
#pragma omp parallel for if (n > kParallelElements)
    for (int64_t i = 0; i < n; ++i) {
      m[i] = b1 * m[i] + c1 * g[i];
      v[i] = b2 * v[i] + c2 * g[i] * g[i];
      w[i] -= lr_t * m[i] / (std::sqrt(v[i]) + eps);
    }
  }

 private:
  double beta1_, beta2_;
  float eps_;
};

}  // namespace

std::unique_ptr<Optimizer> make_adam(double beta1, double beta2, float epsilon) {
  return std::make_unique<Adam>(beta1, beta2, epsilon);
}

}  // namespace terngrad::train::detail
