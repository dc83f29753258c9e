// Preprocessing and augmentation against float64 references and the
// properties the trainer relies on (standardized outputs, centre crop,
// flips, determinism per seed).
#include <cmath>
#include <set>

#include "terngrad/train/input_pipeline.h"
#include "test_util.h"

namespace {

using namespace terngrad::train;
using namespace tg_test;

double mean_of(const float* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += x[i];
  return s / n;
}
double std_of(const float* x, int64_t n) {
  const double m = mean_of(x, n);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += (x[i] - m) * (x[i] - m);
  return std::sqrt(s / n);
}

// Float64 reference of crop, flip, brightness, contrast, standardize.
std::vector<double> reference(const Dataset& d, int64_t i, const CifarDistortion& t) {
  const int64_t C = d.channels, P = 24 * 24;
  std::vector<double> v(P * C);
  for (int64_t y = 0; y < 24; ++y)
    for (int64_t x = 0; x < 24; ++x)
      for (int64_t c = 0; c < C; ++c) {
        const int64_t sx = t.flip ? 23 - x : x;
        v[(y * 24 + x) * C + c] = d.image(i)[((t.crop_y + y) * d.width + t.crop_x + sx) * C + c] + double(t.brightness);
      }
  for (int64_t c = 0; c < C; ++c) {
    double m = 0;
    for (int64_t p = 0; p < P; ++p) m += v[p * C + c];
    m /= P;
    for (int64_t p = 0; p < P; ++p) v[p * C + c] = (v[p * C + c] - m) * t.contrast + m;
  }
  double m = 0, s = 0;
  for (double x : v) m += x;
  m /= v.size();
  for (double x : v) s += (x - m) * (x - m);
  const double scale = std::max(std::sqrt(s / v.size()), 1 / std::sqrt(double(v.size())));
  for (double& x : v) x = (x - m) / scale;
  return v;
}

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

TEST(Preprocess, LeNetMapsToMinusOneOne) {
  Dataset d;
  d.count = 1;
  d.height = 1;
  d.width = 3;
  d.channels = 1;
  d.num_classes = 10;
  d.images = {0, 255, 51};
  d.labels = {7};
  Tensor x;
  std::vector<int32_t> labels;
  fill_batch(d, std::vector<int64_t>{0}, Preprocess::kLeNet, 0, x, labels);
  EXPECT_EQ(x.shape, (Shape{1, 1, 3, 1}));
  EXPECT_FLOAT_EQ(x.data[0], -1.0f);
  EXPECT_FLOAT_EQ(x.data[1], 1.0f);
  EXPECT_NEAR(x.data[2], (51 / 255.0 - 0.5) * 2, 1e-6);
  EXPECT_EQ(labels, std::vector<int32_t>{7});
}

TEST(Preprocess, StandardizationGivesZeroMeanUnitStd) {
  const Dataset d = make_synthetic(8, 224, 224, 3, 1000, 5);
  Tensor x;
  std::vector<int32_t> labels;
  fill_batch(d, iota(8), Preprocess::kStandardize, 0, x, labels);
  EXPECT_EQ(x.shape, (Shape{8, 224, 224, 3}));
  const int64_t per = 224 * 224 * 3;
  for (int64_t b = 0; b < 8; ++b) {
    EXPECT_NEAR(mean_of(x.ptr() + b * per, per), 0.0, 1e-4);
    EXPECT_NEAR(std_of(x.ptr() + b * per, per), 1.0, 1e-4);
  }
  // A uniform image: the stddev floor keeps it finite (all zeros).
  std::vector<float> flat(50, 3.0f);
  per_image_standardize(flat.data(), 50);
  for (float v : flat) EXPECT_EQ(v, 0.0f);
}

TEST(Preprocess, CifarTrainMatchesReferenceAndIsStandardized) {
  const Dataset d = make_synthetic(16, 32, 32, 3, 10, 11);
  Tensor x;
  std::vector<int32_t> labels;
  const uint64_t seed = 1234;
  fill_batch(d, iota(16), Preprocess::kCifarTrain, seed, x, labels);
  EXPECT_EQ(x.shape, (Shape{16, 24, 24, 3}));
  EXPECT_EQ(example_shape(d, Preprocess::kCifarTrain), (Shape{24, 24, 3}));
  const int64_t per = 24 * 24 * 3;
  for (int64_t b = 0; b < 16; ++b) {
    EXPECT_NEAR(mean_of(x.ptr() + b * per, per), 0.0, 1e-4);
    EXPECT_NEAR(std_of(x.ptr() + b * per, per), 1.0, 1e-4);
    EXPECT_EQ(labels[b], d.labels[b]);
  }
  // A slot's distortion depends only on (seed, slot): the same image at the
  // same slot of another batch gets exactly the same output.
  std::vector<float> out(per);
  for (int64_t b : {0, 5}) {
    std::vector<int64_t> idx(b + 1, b);
    Tensor y;
    fill_batch(d, idx, Preprocess::kCifarTrain, seed, y, labels);
    for (int64_t k = 0; k < per; ++k) ASSERT_EQ(y.data[b * per + k], x.data[b * per + k]);
  }
  // The pipeline against the float64 reference for explicit distortions.
  for (uint64_t s = 0; s < 20; ++s) {
    const CifarDistortion t = draw_cifar_distortion(s, 32, 32);
    apply_cifar_distortion(d.image(s % 16), 32, 32, 3, t, out.data());
    const std::vector<double> ref = reference(d, s % 16, t);
    for (int64_t k = 0; k < per; ++k) ASSERT_NEAR(out[k], ref[k], 2e-5) << "seed " << s << " element " << k;
  }
}

TEST(Preprocess, EvalTakesTheCentreCrop) {
  const Dataset d = make_synthetic(3, 32, 32, 3, 10, 12);
  Tensor x;
  std::vector<int32_t> labels;
  fill_batch(d, iota(3), Preprocess::kCifarEval, 99, x, labels);
  CifarDistortion centre;
  centre.crop_y = centre.crop_x = 4;
  for (int64_t b = 0; b < 3; ++b) {
    const std::vector<double> ref = reference(d, b, centre);
    for (int64_t k = 0; k < 24 * 24 * 3; ++k) ASSERT_NEAR(x.data[b * 24 * 24 * 3 + k], ref[k], 2e-5);
  }
  // Eval ignores the seed.
  Tensor y;
  fill_batch(d, iota(3), Preprocess::kCifarEval, 7, y, labels);
  EXPECT_EQ(x.data, y.data);
}

TEST(Preprocess, FlipMirrorsLeftRight) {
  const Dataset d = make_synthetic(1, 32, 32, 3, 10, 13);
  CifarDistortion t;
  t.crop_y = 3;
  t.crop_x = 6;
  std::vector<float> a(24 * 24 * 3), b(24 * 24 * 3);
  apply_cifar_distortion(d.image(0), 32, 32, 3, t, a.data());
  t.flip = true;
  apply_cifar_distortion(d.image(0), 32, 32, 3, t, b.data());
  EXPECT_NE(a, b);
  for (int64_t y = 0; y < 24; ++y)
    for (int64_t x = 0; x < 24; ++x)
      for (int64_t c = 0; c < 3; ++c) ASSERT_EQ(a[(y * 24 + x) * 3 + c], b[(y * 24 + 23 - x) * 3 + c]);
}

TEST(Preprocess, DistortionDrawsCoverTheirRanges) {
  std::set<int64_t> ys, xs;
  int flips = 0;
  float bmin = 1e9, bmax = -1e9, cmin = 1e9, cmax = -1e9;
  const int n = 4000;
  for (int s = 0; s < n; ++s) {
    const CifarDistortion t = draw_cifar_distortion(s, 32, 32);
    ys.insert(t.crop_y);
    xs.insert(t.crop_x);
    flips += t.flip;
    bmin = std::min(bmin, t.brightness), bmax = std::max(bmax, t.brightness);
    cmin = std::min(cmin, t.contrast), cmax = std::max(cmax, t.contrast);
  }
  EXPECT_EQ(ys, (std::set<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(xs, ys);
  EXPECT_NEAR(flips, n / 2, 4 * std::sqrt(n / 4.0));
  EXPECT_GE(bmin, -63.0f);
  EXPECT_LE(bmax, 63.0f);
  EXPECT_LT(bmin, -60.0f);
  EXPECT_GT(bmax, 60.0f);
  EXPECT_GE(cmin, 0.2f);
  EXPECT_LE(cmax, 1.8f);
  EXPECT_LT(cmin, 0.25f);
  EXPECT_GT(cmax, 1.75f);
}

TEST(Preprocess, AugmentationIsDeterministicPerSeed) {
  const Dataset d = make_synthetic(8, 32, 32, 3, 10, 14);
  const std::vector<int64_t> idx = {3, 3, 1, 7};
  Tensor a, b, c;
  std::vector<int32_t> la, lb, lc;
  fill_batch(d, idx, Preprocess::kCifarTrain, 77, a, la);
  fill_batch(d, idx, Preprocess::kCifarTrain, 77, b, lb);
  fill_batch(d, idx, Preprocess::kCifarTrain, 78, c, lc);
  EXPECT_EQ(a.data, b.data);
  EXPECT_NE(a.data, c.data);
  EXPECT_EQ(la, (std::vector<int32_t>{d.labels[3], d.labels[3], d.labels[1], d.labels[7]}));
  // The same image in two slots gets two different distortions.
  const int64_t per = 24 * 24 * 3;
  EXPECT_FALSE(std::equal(a.data.begin(), a.data.begin() + per, a.data.begin() + per));
}

TEST(Preprocess, Errors) {
  const Dataset small = make_synthetic(2, 20, 20, 3, 10, 1);
  Tensor x;
  std::vector<int32_t> labels;
  EXPECT_CONTAINS(error_of<std::invalid_argument>(
                      [&] { fill_batch(small, iota(1), Preprocess::kCifarTrain, 0, x, labels); }),
                  "crops 24x24 but");
  EXPECT_CONTAINS(error_of<std::out_of_range>(
                      [&] { fill_batch(small, std::vector<int64_t>{0, 2}, Preprocess::kLeNet, 0, x, labels); }),
                  "index 2 at batch position 1 is outside");
}

}  // namespace
