// Synthetic learnable image classification data (for AlexNet-size runs).
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "counter_rng.h"
#include "terngrad/train/datasets.h"

namespace terngrad::train {

namespace {
constexpr int kGrid = 4;                 // prototype grid cells per side
constexpr uint64_t kPrototypeSeed = 0x7E5A11D5EEDull;  // fixed: train and test sets share prototypes
constexpr double kLevelLo = 48, kLevelHi = 208;       // prototype levels
constexpr double kNoise = 48;                          // per-pixel noise amplitude (uniform +-)
constexpr double kBrightness = 32;                     // per-image offset amplitude (uniform +-)

// Bilinear sampling position of pixel i of n on a kGrid-cell axis.
struct Tap {
  int lo, hi;
  double frac;
};
std::vector<Tap> taps(int64_t n) {
  std::vector<Tap> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const double pos = n > 1 ? static_cast<double>(i) * (kGrid - 1) / static_cast<double>(n - 1) : 0.0;
    const int lo = std::min(static_cast<int>(pos), kGrid - 1);
    t[i] = {lo, std::min(lo + 1, kGrid - 1), pos - lo};
  }
  return t;
}
}  // namespace

Dataset make_synthetic(int64_t count, int64_t height, int64_t width, int64_t channels, int classes, uint64_t seed) {
  if (count < 0 || height <= 0 || width <= 0 || channels <= 0 || classes <= 0)
    throw std::invalid_argument("make_synthetic: bad arguments count " + std::to_string(count) + ", " +
                                std::to_string(height) + "x" + std::to_string(width) + "x" +
                                std::to_string(channels) + ", classes " + std::to_string(classes));
  Dataset d;
  d.count = count;
  d.height = height;
  d.width = width;
  d.channels = channels;
  d.num_classes = classes;
  d.source = "synthetic(" + std::to_string(count) + ", " + std::to_string(height) + "x" + std::to_string(width) +
             "x" + std::to_string(channels) + ", " + std::to_string(classes) + " classes, seed " +
             std::to_string(seed) + ")";

  // Prototype levels: classes x channels x kGrid x kGrid.
  const uint64_t geometry = detail::derive_seed(
      detail::derive_seed(detail::derive_seed(kPrototypeSeed, height), width), channels);
  std::vector<float> levels(static_cast<size_t>(classes) * channels * kGrid * kGrid);
  for (int k = 0; k < classes; ++k) {
    detail::CounterRng rng(detail::derive_seed(geometry, static_cast<uint64_t>(k)));
    float* lv = levels.data() + static_cast<size_t>(k) * channels * kGrid * kGrid;
    for (int64_t j = 0; j < channels * kGrid * kGrid; ++j) lv[j] = static_cast<float>(rng.uniform(kLevelLo, kLevelHi));
  }

  const std::vector<Tap> ty = taps(height), tx = taps(width);
  d.labels.resize(static_cast<size_t>(count));
  d.images.resize(static_cast<size_t>(count * height * width * channels));
  for (int64_t i = 0; i < count; ++i) {
    detail::CounterRng rng(detail::derive_seed(seed, static_cast<uint64_t>(i)));
    const int label = static_cast<int>(rng.below(static_cast<uint64_t>(classes)));
    d.labels[i] = label;
    const double offset = rng.uniform(-kBrightness, kBrightness);
    const float* lv = levels.data() + static_cast<size_t>(label) * channels * kGrid * kGrid;
    uint8_t* img = d.images.data() + i * height * width * channels;
    uint64_t bits = 0;
    int bits_left = 0;
    for (int64_t y = 0; y < height; ++y) {
      const Tap a = ty[y];
      for (int64_t x = 0; x < width; ++x) {
        const Tap b = tx[x];
        for (int64_t c = 0; c < channels; ++c) {
          const float* g = lv + c * kGrid * kGrid;
          const double top = g[a.lo * kGrid + b.lo] + b.frac * (g[a.lo * kGrid + b.hi] - g[a.lo * kGrid + b.lo]);
          const double bot = g[a.hi * kGrid + b.lo] + b.frac * (g[a.hi * kGrid + b.hi] - g[a.hi * kGrid + b.lo]);
          // Four 16-bit noise draws per 64-bit output keep this cheap at 224x224x3.
          if (bits_left == 0) {
            bits = rng.next();
            bits_left = 4;
          }
          const double u = static_cast<double>(bits & 0xFFFF) / 65535.0;
          bits >>= 16;
          --bits_left;
          const double v = top + a.frac * (bot - top) + offset + kNoise * (2 * u - 1);
          img[(y * width + x) * channels + c] = static_cast<uint8_t>(std::clamp(std::lround(v), 0l, 255l));
        }
      }
    }
  }
  return d;
}

}  // namespace terngrad::train
