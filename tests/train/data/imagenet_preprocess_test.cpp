// ImageNet preprocessing per net: the fast bilinear resize agrees with the
// float64 reference, crops and flips land where the geometry says, means are
// subtracted exactly, evaluation ignores the seed, training draws stay in
// their ranges, and the distorted box meets sample_distorted_bounding_box's
// constraints.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "image_folder_util.h"
#include "terngrad/train/imagenet_preprocess.h"

namespace tt = terngrad::train;

namespace {

constexpr int64_t S = tt::kImageNetSide;

tt::Image noise_image(int64_t h, int64_t w, int64_t c, uint32_t seed) {
  tt::Image img{h, w, c, std::vector<uint8_t>(static_cast<size_t>(h * w * c))};
  uint32_t s = seed;
  for (uint8_t& p : img.pixels) p = static_cast<uint8_t>((s = s * 1664525u + 1013904223u) >> 24);
  return img;
}

tt::Image flat_image(int64_t h, int64_t w, uint8_t v) {
  return tt::Image{h, w, 3, std::vector<uint8_t>(static_cast<size_t>(h * w * 3), v)};
}

const tt::ImagePreprocess kAll[] = {
    {tt::ImageStyle::kAlexNet, true},    {tt::ImageStyle::kAlexNet, false}, {tt::ImageStyle::kVgg, true},
    {tt::ImageStyle::kVgg, false},       {tt::ImageStyle::kInception, true}, {tt::ImageStyle::kInception, false}};

TEST(ImageNetPreprocess, FastResizeAgreesWithTheFloat64Reference) {
  // Noise is the worst case: neighbouring pixels differ by up to 255.
  for (const auto& [h, w] : {std::pair<int64_t, int64_t>{375, 500}, {200, 150}, {97, 301}}) {
    const tt::Image img = noise_image(h, w, 3, static_cast<uint32_t>(h * w));
    for (const tt::ImagePreprocess& p : kAll)
      for (uint64_t seed : {1ull, 2ull, 77ull}) {
        const tt::ImageGeometry g = tt::draw_image_augment(p, seed, h, w).geometry;
        std::vector<float> fast(static_cast<size_t>(S * S * 3));
        tt::resize_crop_bilinear(img, g, fast.data());
        const std::vector<double> ref =
            tt::resize_bilinear_reference(img, g.window_y, g.window_x, g.window_h, g.window_w, g.resized_h, g.resized_w);
        double worst = 0;
        for (int64_t i = 0; i < S; ++i)
          for (int64_t j = 0; j < S; ++j)
            for (int64_t c = 0; c < 3; ++c) {
              const int64_t rx = g.crop_x + (g.flip ? S - 1 - j : j);
              const double r = ref[static_cast<size_t>(((g.crop_y + i) * g.resized_w + rx) * 3 + c)];
              worst = std::max(worst, std::fabs(r - fast[static_cast<size_t>((i * S + j) * 3 + c)]));
            }
        // float coordinates (TF computes them in float too) against exact ones.
        EXPECT_LT(worst, 0.05) << h << "x" << w << " style " << tt::image_style_name(p.style) << " seed " << seed;
      }
  }
}

TEST(ImageNetPreprocess, ResizeToTheSameSizeIsTheIdentityAndCropsAndFlipsLandRight) {
  const tt::Image img = noise_image(256, 256, 3, 5);  // alexnet resizes to 256x256: no interpolation
  std::set<int64_t> ys;
  std::set<bool> flips;
  for (uint64_t seed = 0; seed < 64; ++seed) {
    const tt::ImagePreprocess p{tt::ImageStyle::kAlexNet, true};
    const tt::ImageGeometry g = tt::draw_image_augment(p, seed, 256, 256).geometry;
    ASSERT_GE(g.crop_y, 0);
    ASSERT_LE(g.crop_y, 32);
    ASSERT_LE(g.crop_x, 32);
    ys.insert(g.crop_y);
    flips.insert(g.flip);
    std::vector<float> out(static_cast<size_t>(S * S * 3));
    tt::preprocess_image(img, p, seed, out.data());
    for (int64_t i : {int64_t{0}, int64_t{100}, S - 1})
      for (int64_t j : {int64_t{0}, int64_t{7}, S - 1})
        for (int64_t c = 0; c < 3; ++c) {
          const int64_t sx = g.crop_x + (g.flip ? S - 1 - j : j);
          ASSERT_EQ(out[static_cast<size_t>((i * S + j) * 3 + c)],
                    static_cast<float>(img.at(g.crop_y + i, sx)[c]) - tt::kImageNetMean[c])
              << "seed " << seed << " at " << i << "," << j;
        }
  }
  EXPECT_GT(ys.size(), 10u);
  EXPECT_EQ(flips.size(), 2u);
}

TEST(ImageNetPreprocess, MeanSubtractionAndInceptionScaling) {
  const tt::Image img = flat_image(300, 400, 100);
  std::vector<float> out(static_cast<size_t>(S * S * 3));
  for (tt::ImageStyle st : {tt::ImageStyle::kAlexNet, tt::ImageStyle::kVgg})
    for (bool train : {true, false}) {
      tt::preprocess_image(img, {st, train}, 9, out.data());
      for (int64_t k = 0; k < S * S; ++k)
        for (int c = 0; c < 3; ++c) ASSERT_FLOAT_EQ(out[3 * k + c], 100.0f - tt::kImageNetMean[c]);
    }
  tt::preprocess_image(img, {tt::ImageStyle::kInception, false}, 9, out.data());
  for (float v : out) ASSERT_NEAR(v, (100.0f / 255.0f - 0.5f) * 2.0f, 1e-6);
  for (uint64_t seed = 0; seed < 20; ++seed) {  // distorted: clipped to [0, 1] before (x - 0.5) * 2
    tt::preprocess_image(noise_image(120, 90, 3, 3), {tt::ImageStyle::kInception, true}, seed, out.data());
    for (float v : out) ASSERT_TRUE(v >= -1.0f && v <= 1.0f) << v;
  }
}

TEST(ImageNetPreprocess, EvaluationIgnoresTheSeedAndUsesTheCentre) {
  const tt::Image img = noise_image(375, 500, 3, 11);
  std::vector<float> a(static_cast<size_t>(S * S * 3)), b(a.size());
  for (tt::ImageStyle st : {tt::ImageStyle::kAlexNet, tt::ImageStyle::kVgg, tt::ImageStyle::kInception}) {
    tt::preprocess_image(img, {st, false}, 1, a.data());
    tt::preprocess_image(img, {st, false}, 123456789, b.data());
    EXPECT_EQ(a, b) << tt::image_style_name(st);
    const tt::ImageGeometry g = tt::draw_image_augment({st, false}, 5, 375, 500).geometry;
    EXPECT_FALSE(g.flip);
    EXPECT_EQ(g.crop_y, (g.resized_h - S) / 2);
    EXPECT_EQ(g.crop_x, (g.resized_w - S) / 2);
  }
  // vgg eval: smallest side 256 (float32 arithmetic as _smallest_size_at_least).
  const tt::ImageGeometry v = tt::draw_image_augment({tt::ImageStyle::kVgg, false}, 0, 375, 500).geometry;
  EXPECT_EQ(v.resized_h, 256);
  EXPECT_EQ(v.resized_w, 341);
  EXPECT_EQ(v.crop_y, 16);
  // inception eval: central_crop(0.875) per side, then 224x224.
  const tt::CropBox c = tt::central_crop_box(375, 500);
  EXPECT_EQ(c.y, 23);
  EXPECT_EQ(c.h, 329);
  EXPECT_EQ(c.x, 31);
  EXPECT_EQ(c.w, 438);
  // The same seed always draws the same training augmentation.
  tt::preprocess_image(img, {tt::ImageStyle::kInception, true}, 42, a.data());
  tt::preprocess_image(img, {tt::ImageStyle::kInception, true}, 42, b.data());
  EXPECT_EQ(a, b);
}

TEST(ImageNetPreprocess, VggTrainingSideIsUniformIn256To512) {
  int64_t lo = 1 << 20, hi = 0;
  for (uint64_t seed = 0; seed < 400; ++seed) {
    const tt::ImageGeometry g = tt::draw_image_augment({tt::ImageStyle::kVgg, true}, seed, 375, 500).geometry;
    const int64_t side = std::min(g.resized_h, g.resized_w);
    lo = std::min(lo, side);
    hi = std::max(hi, side);
    ASSERT_LE(g.crop_y + S, g.resized_h);
    ASSERT_LE(g.crop_x + S, g.resized_w);
    ASSERT_NEAR(static_cast<double>(g.resized_w) / g.resized_h, 500.0 / 375.0, 0.01);
  }
  EXPECT_LE(lo, 262);  // float32 truncation may give side - 1
  EXPECT_GE(lo, 255);
  EXPECT_GE(hi, 505);
  EXPECT_LE(hi, 512);
}

TEST(ImageNetPreprocess, DistortedBoxMeetsTheConstraints) {
  int whole = 0, total = 0;
  double min_frac = 1;
  for (const auto& [h, w] : {std::pair<int64_t, int64_t>{375, 500}, {500, 333}, {64, 64}, {20, 300}, {1, 1}}) {
    for (uint64_t seed = 0; seed < 300; ++seed) {
      const tt::CropBox b = tt::sample_distorted_box(seed, h, w);
      ++total;
      ASSERT_GE(b.y, 0);
      ASSERT_GE(b.x, 0);
      ASSERT_GE(b.h, 1);
      ASSERT_GE(b.w, 1);
      ASSERT_LE(b.y + b.h, h);
      ASSERT_LE(b.x + b.w, w);
      if (b.h == h && b.w == w) {
        ++whole;
        continue;
      }
      const double frac = static_cast<double>(b.h * b.w) / static_cast<double>(h * w);
      min_frac = std::min(min_frac, frac);
      ASSERT_GE(frac, 0.1) << h << "x" << w << " seed " << seed;  // min_object_covered
      // w = lrint(h * aspect): the ratio is within half a pixel of [0.75, 1.33].
      const double ar = static_cast<double>(b.w) / static_cast<double>(b.h);
      ASSERT_GE(ar, 0.75 - 0.5 / b.h - 1e-9) << h << "x" << w << " seed " << seed;
      ASSERT_LE(ar, 1.33 + 0.5 / b.h + 1e-9) << h << "x" << w << " seed " << seed;
    }
  }
  EXPECT_LT(min_frac, 0.2);   // small crops do occur
  EXPECT_LT(whole, total / 2);  // ...and mostly not the fallback
  // A 20x300 strip admits no crop of aspect <= 1.33 covering 10%: always the whole image.
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const tt::CropBox b = tt::sample_distorted_box(seed, 20, 300);
    EXPECT_TRUE(b.h == 20 && b.w == 300) << seed;
  }
}

TEST(ImageNetPreprocess, ColourDistortionOps) {
  float px[6] = {0.2f, 0.5f, 0.7f, 1.0f, 0.0f, 0.0f};
  const float orig[6] = {0.2f, 0.5f, 0.7f, 1.0f, 0.0f, 0.0f};
  tt::apply_color_distortion(px, 2, tt::ColorDistortion{});  // neutral
  for (int k = 0; k < 6; ++k) EXPECT_NEAR(px[k], orig[k], 1e-6);
  float red[3] = {1.0f, 0.0f, 0.0f};
  tt::ColorDistortion half_turn;
  half_turn.hue = 0.5f;
  tt::apply_color_distortion(red, 1, half_turn);  // red -> cyan
  EXPECT_NEAR(red[0], 0.0f, 1e-6);
  EXPECT_NEAR(red[1], 1.0f, 1e-6);
  EXPECT_NEAR(red[2], 1.0f, 1e-6);
  float c[3] = {0.8f, 0.4f, 0.2f};
  tt::ColorDistortion gray;
  gray.saturation = 0.0f;
  tt::apply_color_distortion(c, 1, gray);  // saturation 0: value (max) in every channel
  EXPECT_NEAR(c[0], 0.8f, 1e-6);
  EXPECT_NEAR(c[1], 0.8f, 1e-6);
  EXPECT_NEAR(c[2], 0.8f, 1e-6);
  float two[6] = {0.2f, 0.2f, 0.2f, 0.6f, 0.6f, 0.6f};
  tt::ColorDistortion con;
  con.contrast = 0.5f;
  con.brightness = 0.1f;
  tt::apply_color_distortion(two, 2, con);  // +0.1, then halve the distance to the mean 0.5
  EXPECT_NEAR(two[0], 0.4f, 1e-6);
  EXPECT_NEAR(two[3], 0.6f, 1e-6);
}

TEST(ImageNetPreprocess, GrayImagesAreReplicatedAndTheNetTableIsOneTable) {
  const tt::Image g = tg_test::gradient_image(100, 120, 1, 4);
  tt::Image rgb{100, 120, 3, {}};
  for (uint8_t v : g.pixels) rgb.pixels.insert(rgb.pixels.end(), {v, v, v});
  std::vector<float> a(static_cast<size_t>(S * S * 3)), b(a.size());
  tt::preprocess_image(g, {tt::ImageStyle::kVgg, true}, 3, a.data());
  tt::preprocess_image(rgb, {tt::ImageStyle::kVgg, true}, 3, b.data());
  EXPECT_EQ(a, b);
  EXPECT_EQ(tt::image_style_for_net("alexnet"), tt::ImageStyle::kAlexNet);
  EXPECT_EQ(tt::image_style_for_net("vgg_a"), tt::ImageStyle::kVgg);
  EXPECT_EQ(tt::image_style_for_net("googlenet"), tt::ImageStyle::kInception);
  EXPECT_THROW(tt::image_style_for_net("lenet"), std::invalid_argument);
}

}  // namespace
