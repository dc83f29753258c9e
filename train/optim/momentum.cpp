// tf.train.MomentumOptimizer (ApplyMomentum):
//   accum = momentum * accum + g
//   w -= lr * accum                              (plain)
//   w -= lr * g + lr * momentum * accum          (use_nesterov)
// The learning rate multiplies the step, not the accumulator, so a schedule's
// change takes effect immediately (TensorFlow's convention, unlike PyTorch's).
#include "optimizers.h"

namespace terngrad::train::detail {

namespace {

class Momentum final : public Optimizer {
 public:
  Momentum(float momentum, bool nesterov) : m_(momentum), nesterov_(nesterov) {}
  std::string name() const override { return "momentum"; }

 protected:
  std::vector<SlotSpec> slot_specs() const override { return {{"Momentum", 0.0f}}; }

  void update(std::span<float> w, std::span<const float> g, std::span<const std::span<float>> slot, float lr,
              int64_t t) override {
    (void)t;
    float* accum = slot[0].data();
    const auto n = static_cast<int64_t>(w.size());
    const float m = m_;
    if (nesterov_) {
#pragma omp parallel for if (n > kParallelElements)
      for (int64_t i = 0; i < n; ++i) {
        accum[i] = m * accum[i] + g[i];
        w[i] -= lr * g[i] + lr * m * accum[i];
      }
    } else {
#pragma omp parallel for if (n > kParallelElements)
      for (int64_t i = 0; i < n; ++i) {
        accum[i] = m * accum[i] + g[i];
        w[i] -= lr * accum[i];
      }
    }
  }

 private:
  float m_;
  bool nesterov_;
};

}  // namespace

std::unique_ptr<Optimizer> make_momentum(float momentum, bool nesterov) {
  return std::make_unique<Momentum>(momentum, nesterov);
}

}  // namespace terngrad::train::detail
