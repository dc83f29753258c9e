// ImageNet preprocessing per net (imagenet_preprocess.h).
#include "terngrad/train/imagenet_preprocess.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "counter_rng.h"

namespace terngrad::train {

namespace {

constexpr int64_t kS = kImageNetSide;
constexpr int64_t kAlexNetResize = 256;                       // image_processing.py _RESIZE_SIDE
constexpr int64_t kVggSideMin = 256, kVggSideMax = 512;       // vgg_preprocessing.py _RESIZE_SIDE_MIN/MAX
constexpr double kBrightness = 32.0 / 255.0;                  // distort_color max_delta
constexpr double kSatLo = 0.5, kSatHi = 1.5, kHue = 0.2, kConLo = 0.5, kConHi = 1.5;
constexpr double kAspectLo = 0.75, kAspectHi = 1.33, kAreaLo = 0.05, kAreaHi = 1.0, kMinCovered = 0.1;
constexpr int kAttempts = 100;

void check_image(const Image& img) {
  if (img.height <= 0 || img.width <= 0 || (img.channels != 1 && img.channels != 3) ||
      static_cast<int64_t>(img.pixels.size()) != img.height * img.width * img.channels)
    throw std::invalid_argument("preprocess_image: bad image " + std::to_string(img.height) + "x" +
                                std::to_string(img.width) + "x" + std::to_string(img.channels) + " with " +
                                std::to_string(img.pixels.size()) + " bytes");
}

// TF's rgb_to_hsv / hsv_to_rgb of the adjust_hue and adjust_saturation
// kernels (h in turns, [0, 1)).
void rgb_to_hsv(float r, float g, float b, float& h, float& s, float& v) {
  v = std::max({r, g, b});
  const float range = v - std::min({r, g, b});
  s = v > 0 ? range / v : 0.0f;
  if (range > 0) {
    float hh;
    if (v == r)
      hh = (g - b) / range;
    else if (v == g)
      hh = 2.0f + (b - r) / range;
    else
      hh = 4.0f + (r - g) / range;
    hh /= 6.0f;
    if (hh < 0) hh += 1.0f;
    h = hh;
  } else {
    h = 0;
  }
}

void hsv_to_rgb(float h, float s, float v, float& r, float& g, float& b) {
  const float c = s * v, m = v - c, dh = h * 6.0f;
  const float x = c * (1.0f - std::fabs(std::fmod(dh, 2.0f) - 1.0f));
  float rr = 0, gg = 0, bb = 0;
  switch (static_cast<int>(dh)) {
    case 0: rr = c; gg = x; break;
    case 1: rr = x; gg = c; break;
    case 2: gg = c; bb = x; break;
    case 3: gg = x; bb = c; break;
    case 4: rr = x; bb = c; break;
    case 5: rr = c; bb = x; break;
    default: break;
  }
  r = rr + m;
  g = gg + m;
  b = bb + m;
}

void saturation(float* rgb, int64_t pixels, float factor) {
  for (int64_t p = 0; p < pixels; ++p) {
    float* q = rgb + 3 * p;
    float h, s, v;
    rgb_to_hsv(q[0], q[1], q[2], h, s, v);
    hsv_to_rgb(h, std::clamp(s * factor, 0.0f, 1.0f), v, q[0], q[1], q[2]);
  }
}

void hue(float* rgb, int64_t pixels, float delta) {
  for (int64_t p = 0; p < pixels; ++p) {
    float* q = rgb + 3 * p;
    float h, s, v;
    rgb_to_hsv(q[0], q[1], q[2], h, s, v);
    h += delta;
    h -= std::floor(h);  // wrap to [0, 1)
    hsv_to_rgb(h, s, v, q[0], q[1], q[2]);
  }
}

void contrast(float* rgb, int64_t pixels, float factor) {
  for (int c = 0; c < 3; ++c) {
    double sum = 0;
    for (int64_t p = 0; p < pixels; ++p) sum += rgb[3 * p + c];
    const float mean = static_cast<float>(sum / static_cast<double>(pixels));
    for (int64_t p = 0; p < pixels; ++p) rgb[3 * p + c] = (rgb[3 * p + c] - mean) * factor + mean;
  }
}

// One attempt of sample_distorted_bounding_box at aspect ratio `aspect`;
// false when no crop of that ratio meets the area and coverage bounds.
bool try_crop(detail::CounterRng& rng, double aspect, int64_t H, int64_t W, CropBox& box) {
  const double area = static_cast<double>(H) * static_cast<double>(W);
  const double min_area = kAreaLo * area, max_area = kAreaHi * area;
  auto width_of = [aspect](int64_t h) { return static_cast<int64_t>(std::lrint(static_cast<double>(h) * aspect)); };
  int64_t h = static_cast<int64_t>(std::lrint(std::sqrt(min_area / aspect)));
  int64_t max_h = static_cast<int64_t>(std::lrint(std::sqrt(max_area / aspect)));
  // The tallest height whose width still fits the image.
  if (width_of(max_h) > W) {
    max_h = static_cast<int64_t>((static_cast<double>(W) + 0.5 - 1e-7) / aspect);
    if (width_of(max_h) > W) --max_h;
  }
  max_h = std::min(max_h, H);
  h = std::min(h, max_h);
  if (h < max_h) h += static_cast<int64_t>(rng.below(static_cast<uint64_t>(max_h - h + 1)));
  int64_t w = width_of(h);
  double a = static_cast<double>(w * h);
  if (a < min_area) {  // rounding left it just short: one row more
    ++h;
    w = width_of(h);
    a = static_cast<double>(w * h);
  }
  if (a > max_area) {
    --h;
    w = width_of(h);
    a = static_cast<double>(w * h);
  }
  if (a < min_area || a > max_area || w <= 0 || h <= 0 || w > W || h > H) return false;
  if (a / area < kMinCovered) return false;  // the object (whole image) must be >= 10% covered
  box.h = h;
  box.w = w;
  // As TF: the offset is uniform in [0, H - h) when the crop is smaller, so a
  // smaller crop never touches the bottom (right) edge; 0 when it is not.
  box.y = h < H ? static_cast<int64_t>(rng.below(static_cast<uint64_t>(H - h))) : 0;
  box.x = w < W ? static_cast<int64_t>(rng.below(static_cast<uint64_t>(W - w))) : 0;
  return true;
}

}  // namespace

ImageStyle image_style_for_net(const std::string& net) {
  if (net == "alexnet") return ImageStyle::kAlexNet;
  if (net.rfind("vgg", 0) == 0) return ImageStyle::kVgg;
  if (net == "googlenet" || net.rfind("inception", 0) == 0) return ImageStyle::kInception;
  throw std::invalid_argument("--net=" + net +
                              " has no ImageNet preprocessing (alexnet, vgg_*, googlenet/inception* have)");
}

const char* image_style_name(ImageStyle s) {
  switch (s) {
    case ImageStyle::kAlexNet: return "alexnet";
    case ImageStyle::kVgg: return "vgg";
    case ImageStyle::kInception: return "inception";
  }
  return "?";
}

CropBox sample_distorted_box(uint64_t seed, int64_t height, int64_t width) {
  detail::CounterRng rng(seed);
  CropBox box;
  for (int attempt = 0; attempt < kAttempts; ++attempt)
    if (try_crop(rng, rng.uniform(kAspectLo, kAspectHi), height, width, box)) return box;
  return {0, 0, height, width};
}

CropBox central_crop_box(int64_t height, int64_t width, double fraction) {
  CropBox b;
  b.y = static_cast<int64_t>((static_cast<double>(height) - static_cast<double>(height) * fraction) / 2);
  b.x = static_cast<int64_t>((static_cast<double>(width) - static_cast<double>(width) * fraction) / 2);
  b.h = height - 2 * b.y;
  b.w = width - 2 * b.x;
  return b;
}

void smallest_side_size(int64_t height, int64_t width, int64_t side, int64_t& new_h, int64_t& new_w) {
  const float h = static_cast<float>(height), w = static_cast<float>(width), s = static_cast<float>(side);
  const float scale = h > w ? s / w : s / h;
  new_h = static_cast<int64_t>(h * scale);
  new_w = static_cast<int64_t>(w * scale);
}

ImageAugment draw_image_augment(const ImagePreprocess& p, uint64_t example_seed, int64_t H, int64_t W) {
  ImageAugment a;
  ImageGeometry& g = a.geometry;
  g.window_h = H;
  g.window_w = W;
  detail::CounterRng rng(example_seed);
  switch (p.style) {
    case ImageStyle::kAlexNet:
    case ImageStyle::kVgg: {
      if (p.style == ImageStyle::kAlexNet) {
        g.resized_h = g.resized_w = kAlexNetResize;
      } else {
        const int64_t side =
            p.train ? kVggSideMin + static_cast<int64_t>(rng.below(kVggSideMax - kVggSideMin + 1)) : kVggSideMin;
        smallest_side_size(H, W, side, g.resized_h, g.resized_w);
      }
      if (p.train) {  // tf.random_crop: offsets uniform in [0, size - crop]
        g.crop_y = static_cast<int64_t>(rng.below(static_cast<uint64_t>(g.resized_h - kS + 1)));
        g.crop_x = static_cast<int64_t>(rng.below(static_cast<uint64_t>(g.resized_w - kS + 1)));
        g.flip = (rng.next() >> 63) != 0;
      } else {
        g.crop_y = (g.resized_h - kS) / 2;
        g.crop_x = (g.resized_w - kS) / 2;
      }
      break;
    }
    case ImageStyle::kInception: {
      const CropBox b = p.train ? sample_distorted_box(detail::derive_seed(example_seed, 1), H, W)
                                : central_crop_box(H, W);
      g.window_y = b.y;
      g.window_x = b.x;
      g.window_h = b.h;
      g.window_w = b.w;
      g.resized_h = g.resized_w = kS;
      if (p.train) {
        g.flip = (rng.next() >> 63) != 0;
        a.distort_color = true;
        a.color.contrast_second = (rng.next() >> 63) != 0;
        a.color.brightness = static_cast<float>(rng.uniform(-kBrightness, kBrightness));
        a.color.saturation = static_cast<float>(rng.uniform(kSatLo, kSatHi));
        a.color.hue = static_cast<float>(rng.uniform(-kHue, kHue));
        a.color.contrast = static_cast<float>(rng.uniform(kConLo, kConHi));
      }
      break;
    }
  }
  return a;
}

void resize_crop_bilinear(const Image& src, const ImageGeometry& g, float* out) {
  const int64_t C = src.channels;
  if (g.window_h <= 0 || g.window_w <= 0 || g.window_y < 0 || g.window_x < 0 || g.window_y + g.window_h > src.height ||
      g.window_x + g.window_w > src.width || g.crop_y < 0 || g.crop_x < 0 || g.crop_y + kS > g.resized_h ||
      g.crop_x + kS > g.resized_w)
    throw std::invalid_argument("resize_crop_bilinear: window " + std::to_string(g.window_h) + "x" +
                                std::to_string(g.window_w) + " at (" + std::to_string(g.window_y) + ", " +
                                std::to_string(g.window_x) + ") of a " + std::to_string(src.height) + "x" +
                                std::to_string(src.width) + " image, crop at (" + std::to_string(g.crop_y) + ", " +
                                std::to_string(g.crop_x) + ") of " + std::to_string(g.resized_h) + "x" +
                                std::to_string(g.resized_w));
  // TF1 legacy scaling: in = out * (in_size / out_size), in float.
  const float sy = static_cast<float>(g.window_h) / static_cast<float>(g.resized_h);
  const float sx = static_cast<float>(g.window_w) / static_cast<float>(g.resized_w);
  int64_t x0[kS], x1[kS];
  float lx[kS];
  for (int64_t j = 0; j < kS; ++j) {
    const int64_t rx = g.crop_x + (g.flip ? kS - 1 - j : j);
    const float in = static_cast<float>(rx) * sx;
    const int64_t lo = static_cast<int64_t>(std::floor(in));
    x0[j] = (g.window_x + lo) * C;
    x1[j] = (g.window_x + std::min(lo + 1, g.window_w - 1)) * C;
    lx[j] = in - static_cast<float>(lo);
  }
  const int64_t stride = src.width * C;
  for (int64_t i = 0; i < kS; ++i) {
    const float in = static_cast<float>(g.crop_y + i) * sy;
    const int64_t lo = static_cast<int64_t>(std::floor(in));
    const float ly = in - static_cast<float>(lo);
    const uint8_t* top = src.pixels.data() + (g.window_y + lo) * stride;
    const uint8_t* bot = src.pixels.data() + (g.window_y + std::min(lo + 1, g.window_h - 1)) * stride;
    float* o = out + i * kS * 3;
    for (int64_t j = 0; j < kS; ++j) {
      for (int64_t c = 0; c < 3; ++c) {
        const int64_t cc = C == 3 ? c : 0;  // gray replicated to RGB
        const float tl = top[x0[j] + cc], tr = top[x1[j] + cc], bl = bot[x0[j] + cc], br = bot[x1[j] + cc];
        const float t = tl + (tr - tl) * lx[j], b = bl + (br - bl) * lx[j];
        o[j * 3 + c] = t + (b - t) * ly;
      }
    }
  }
}

std::vector<double> resize_bilinear_reference(const Image& src, int64_t wy, int64_t wx, int64_t wh, int64_t ww,
                                              int64_t out_h, int64_t out_w) {
  const int64_t C = src.channels;
  std::vector<double> out(static_cast<size_t>(out_h * out_w * C));
  auto px = [&](int64_t y, int64_t x, int64_t c) -> double { return src.at(wy + y, wx + x)[c]; };
  for (int64_t y = 0; y < out_h; ++y) {
    const double iy = static_cast<double>(y) * static_cast<double>(wh) / static_cast<double>(out_h);
    const int64_t y0 = static_cast<int64_t>(std::floor(iy)), y1 = std::min(y0 + 1, wh - 1);
    const double fy = iy - static_cast<double>(y0);
    for (int64_t x = 0; x < out_w; ++x) {
      const double ix = static_cast<double>(x) * static_cast<double>(ww) / static_cast<double>(out_w);
      const int64_t x0 = static_cast<int64_t>(std::floor(ix)), x1 = std::min(x0 + 1, ww - 1);
      const double fx = ix - static_cast<double>(x0);
      for (int64_t c = 0; c < C; ++c) {
        const double top = px(y0, x0, c) * (1 - fx) + px(y0, x1, c) * fx;
        const double bot = px(y1, x0, c) * (1 - fx) + px(y1, x1, c) * fx;
        out[static_cast<size_t>((y * out_w + x) * C + c)] = top * (1 - fy) + bot * fy;
      }
    }
  }
  return out;
}

void apply_color_distortion(float* rgb, int64_t pixels, const ColorDistortion& c) {
  for (int64_t k = 0; k < 3 * pixels; ++k) rgb[k] += c.brightness;
  if (c.contrast_second) {
    contrast(rgb, pixels, c.contrast);
    saturation(rgb, pixels, c.saturation);
    hue(rgb, pixels, c.hue);
  } else {
    saturation(rgb, pixels, c.saturation);
    hue(rgb, pixels, c.hue);
    contrast(rgb, pixels, c.contrast);
  }
}

void preprocess_image(const Image& img, const ImagePreprocess& p, uint64_t example_seed, float* out) {
  check_image(img);
  const ImageAugment a = draw_image_augment(p, example_seed, img.height, img.width);
  resize_crop_bilinear(img, a.geometry, out);
  const int64_t n = kS * kS;
  if (p.style == ImageStyle::kInception) {
    constexpr float inv255 = 1.0f / 255.0f;
    for (int64_t k = 0; k < 3 * n; ++k) out[k] *= inv255;
    if (a.distort_color) {
      apply_color_distortion(out, n, a.color);
      for (int64_t k = 0; k < 3 * n; ++k) out[k] = std::clamp(out[k], 0.0f, 1.0f);
    }
    for (int64_t k = 0; k < 3 * n; ++k) out[k] = (out[k] - 0.5f) * 2.0f;
  } else {
    for (int64_t k = 0; k < n; ++k)
      for (int c = 0; c < 3; ++c) out[3 * k + c] -= kImageNetMean[c];
  }
}

}  // namespace terngrad::train
