#include <cmath>
#include <numbers>

#include "terngrad/train/layers.h"

namespace terngrad::train {

namespace {
// A double in the open interval (0, 1) from the top 53 bits of one draw (the
// half-step offset keeps log() away from 0).
double open_unit(std::mt19937_64& rng) { return (static_cast<double>(rng() >> 11) + 0.5) * 0x1.0p-53; }
}  // namespace

void truncated_normal_fill(std::span<float> out, float stddev, std::mt19937_64& rng) {
  size_t i = 0;
  while (i < out.size()) {
    // Box-Muller gives two independent standard normals per pair of draws;
    // each is kept only within two standard deviations (tf.truncated_normal).
    const double r = std::sqrt(-2.0 * std::log(open_unit(rng)));
    const double theta = 2.0 * std::numbers::pi * open_unit(rng);
    for (double z : {r * std::cos(theta), r * std::sin(theta)}) {
      if (i < out.size() && std::fabs(z) <= 2.0) out[i++] = static_cast<float>(z * stddev);
    }
  }
}

void init_weights(std::span<float> out, WeightInit init, float init_stddev, int64_t fan_in, int64_t fan_out,
                  std::mt19937_64& rng) {
  switch (init) {
    case WeightInit::kTruncatedNormal:
      truncated_normal_fill(out, init_stddev, rng);
      return;
    case WeightInit::kVarianceScaling:
      truncated_normal_fill(out, static_cast<float>(std::sqrt(1.3 * 2.0 / static_cast<double>(fan_in))), rng);
      return;
    case WeightInit::kGlorotUniform: {
      const double limit = std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
      for (float& v : out) v = static_cast<float>((2.0 * open_unit(rng) - 1.0) * limit);
      return;
    }
  }
}

}  // namespace terngrad::train
