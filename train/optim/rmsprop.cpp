// tf.train.RMSPropOptimizer (ApplyRMSProp, centered=False):
//   ms  = decay * ms + (1 - decay) * g^2        (ms starts at 1.0, not 0)
//   mom = momentum * mom + lr * g / sqrt(ms + epsilon)
//   w  -= mom
// Starting ms at one keeps the first steps from being g / |g| sized jumps.
// epsilon sits inside the square root, unlike Adam's.
#include <cmath>

#include "optimizers.h"

namespace terngrad::train::detail {

namespace {

class RmsProp final : public Optimizer {
 public:
  RmsProp(float decay, float momentum, float epsilon) : decay_(decay), momentum_(momentum), eps_(epsilon) {}
  std::string name() const override { return "rmsprop"; }

 protected:
  std::vector<SlotSpec> slot_specs() const override { return {{"RMSProp", 1.0f}, {"RMSProp_1", 0.0f}}; }

  void update(std::span<float> w, std::span<const float> g, std::span<const std::span<float>> slot, float lr,
              int64_t t) override {
    (void)t;
    const float d = decay_, c = 1.0f - decay_, mo = momentum_, eps = eps_;
    float* ms = slot[0].data();
    float* mom = slot[1].data();
    const auto n = static_cast<int64_t>(w.size());
#pragma omp parallel for if (n > kParallelElements)
    for (int64_t i = 0; i < n; ++i) {
      ms[i] = d * ms[i] + c * g[i] * g[i];
      mom[i] = mo * mom[i] + lr * g[i] / std::sqrt(ms[i] + eps);
      w[i] -= mom[i];
    }
  }

 private:
  float decay_, momentum_, eps_;
};

}  // namespace

std::unique_ptr<Optimizer> make_rmsprop(float decay, float momentum, float epsilon) {
  return std::make_unique<RmsProp>(decay, momentum, epsilon);
}

}  // namespace terngrad::train::detail
