// Per-example preprocessing and batch assembly (input_pipeline.h).
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "counter_rng.h"
#include "terngrad/train/input_pipeline.h"

namespace terngrad::train {

namespace {
constexpr double kMaxBrightness = 63.0;                      // cifar10_input.py: max_delta=63
constexpr double kContrastLo = 0.2, kContrastHi = 1.8;       // lower=0.2, upper=1.8

void check_crop(const Dataset& d) {
  if (d.height < kCifarCrop || d.width < kCifarCrop)
    throw std::invalid_argument("CifarNet preprocessing crops 24x24 but " + d.source + " has " +
                                std::to_string(d.height) + "x" + std::to_string(d.width) + " images");
}
}  // namespace

Shape example_shape(const Dataset& d, Preprocess p) {
  switch (p) {
    case Preprocess::kCifarTrain:
    case Preprocess::kCifarEval:
      check_crop(d);
      return {kCifarCrop, kCifarCrop, d.channels};
    case Preprocess::kLeNet:
    case Preprocess::kStandardize:
      return {d.height, d.width, d.channels};
  }
  throw std::invalid_argument("unknown Preprocess value " + std::to_string(static_cast<int>(p)));
}

CifarDistortion draw_cifar_distortion(uint64_t example_seed, int64_t height, int64_t width) {
  detail::CounterRng rng(example_seed);
  CifarDistortion dist;
  // tf.random_crop: offsets uniform in [0, size - crop] inclusive.
  dist.crop_y = static_cast<int64_t>(rng.below(static_cast<uint64_t>(height - kCifarCrop + 1)));
  dist.crop_x = static_cast<int64_t>(rng.below(static_cast<uint64_t>(width - kCifarCrop + 1)));
  dist.flip = (rng.next() >> 63) != 0;
  dist.brightness = static_cast<float>(rng.uniform(-kMaxBrightness, kMaxBrightness));
  dist.contrast = static_cast<float>(rng.uniform(kContrastLo, kContrastHi));
  return dist;
}

void per_image_standardize(float* x, int64_t n) {
  if (n <= 0) return;
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const double mean = sum / static_cast<double>(n);
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += (x[i] - mean) * (x[i] - mean);
  const double stddev = std::sqrt(ss / static_cast<double>(n));
  // The floor keeps a uniform image from dividing by ~0 (TF's min_stddev).
  const double scale = std::max(stddev, 1.0 / std::sqrt(static_cast<double>(n)));
  const double inv = 1.0 / scale;
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>((x[i] - mean) * inv);
}

void apply_cifar_distortion(const uint8_t* image, int64_t height, int64_t width, int64_t channels,
                            const CifarDistortion& dist, float* out) {
  if (dist.crop_y < 0 || dist.crop_x < 0 || dist.crop_y + kCifarCrop > height || dist.crop_x + kCifarCrop > width)
    throw std::invalid_argument("crop at (" + std::to_string(dist.crop_y) + ", " + std::to_string(dist.crop_x) +
                                ") does not fit a " + std::to_string(height) + "x" + std::to_string(width) + " image");
  const int64_t C = channels;
  // Order as cifar10_input.py: crop, flip, brightness, contrast, standardize.
  for (int64_t y = 0; y < kCifarCrop; ++y) {
    const uint8_t* row = image + ((dist.crop_y + y) * width + dist.crop_x) * C;
    for (int64_t x = 0; x < kCifarCrop; ++x) {
      const int64_t sx = dist.flip ? kCifarCrop - 1 - x : x;
      for (int64_t c = 0; c < C; ++c) out[(y * kCifarCrop + x) * C + c] = row[sx * C + c] + dist.brightness;
    }
  }
  const int64_t pixels = kCifarCrop * kCifarCrop;
  if (dist.contrast != 1.0f) {
    for (int64_t c = 0; c < C; ++c) {
      double sum = 0;
      for (int64_t p = 0; p < pixels; ++p) sum += out[p * C + c];
      const float mean = static_cast<float>(sum / static_cast<double>(pixels));
      for (int64_t p = 0; p < pixels; ++p) out[p * C + c] = (out[p * C + c] - mean) * dist.contrast + mean;
    }
  }
  per_image_standardize(out, pixels * C);
}

void fill_batch(const Dataset& d, const std::vector<int64_t>& indices, Preprocess p, uint64_t seed, Tensor& out,
                std::vector<int32_t>& labels) {
  const Shape ex = example_shape(d, p);
  const int64_t n = static_cast<int64_t>(indices.size());
  const int64_t per = ex[0] * ex[1] * ex[2];
  // Not Tensor::resize: that calls numel() from the layers library.
  out.shape = {n, ex[0], ex[1], ex[2]};
  out.data.resize(static_cast<size_t>(n * per));
  labels.resize(static_cast<size_t>(n));
  const int64_t src_bytes = d.image_bytes();
  for (int64_t b = 0; b < n; ++b) {
    const int64_t i = indices[b];
    if (i < 0 || i >= d.count)
      throw std::out_of_range("fill_batch: index " + std::to_string(i) + " at batch position " + std::to_string(b) +
                              " is outside " + d.source + "'s [0, " + std::to_string(d.count) + ")");
    labels[b] = d.labels[i];
    const uint8_t* img = d.image(i);
    float* dst = out.data.data() + b * per;
    switch (p) {
      case Preprocess::kLeNet:
        for (int64_t k = 0; k < src_bytes; ++k) dst[k] = (img[k] / 255.0f - 0.5f) * 2.0f;
        break;
      case Preprocess::kStandardize:
        for (int64_t k = 0; k < src_bytes; ++k) dst[k] = img[k];
        per_image_standardize(dst, per);
        break;
      case Preprocess::kCifarTrain:
        apply_cifar_distortion(img, d.height, d.width, d.channels,
                               draw_cifar_distortion(detail::derive_seed(seed, static_cast<uint64_t>(b)), d.height,
                                                     d.width),
                               dst);
        break;
      case Preprocess::kCifarEval: {
        CifarDistortion centre;  // tf.image.resize_image_with_crop_or_pad
        centre.crop_y = (d.height - kCifarCrop) / 2;
        centre.crop_x = (d.width - kCifarCrop) / 2;
        apply_cifar_distortion(img, d.height, d.width, d.channels, centre, dst);
        break;
      }
    }
  }
}

}  // namespace terngrad::train
