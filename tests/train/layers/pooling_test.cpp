// MaxPool against the float64 reference (forward, numerical dx) and the
// tie and padding rules.
#include <gtest/gtest.h>

#include <numeric>

#include "reference.h"
#include "terngrad/train/layers.h"

namespace terngrad::train {
namespace {

using testing::Vec;

struct PoolCase {
  const char* label;
  int64_t n, h, w, c, k, stride;
  Padding padding;
};

std::ostream& operator<<(std::ostream& os, const PoolCase& c) { return os << c.label; }

// Distinct values 0.01 apart in random order: no two cells of a window are
// within the numerical step of each other, so the max is differentiable.
Tensor distinct_values(const Shape& shape, uint64_t seed) {
  Tensor t(shape);
  std::vector<int> order(t.size());
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  for (int64_t i = 0; i < t.size(); ++i) t.data[i] = 0.01f * static_cast<float>(order[i] - t.size() / 2);
  return t;
}

class PoolGradient : public ::testing::TestWithParam<PoolCase> {};

TEST_P(PoolGradient, ForwardAndBackwardMatchFloat64Reference) {
  const PoolCase c = GetParam();
  const MaxPool pool(MaxPoolConfig{.name = "pool", .kernel = c.k, .stride = c.stride, .padding = c.padding});
  ParamSet params;
  const Tensor x = distinct_values({c.n, c.h, c.w, c.c}, 3);
  const testing::RefPool p{c.n, c.h, c.w, c.c, c.k, c.stride, c.padding == Padding::kSame};
  testing::check_layer(pool, params, {}, x, [&](const Vec& xv, const std::vector<Vec>&) { return testing::ref_maxpool(p, xv); },
                       testing::GradCheck{});
}

INSTANTIATE_TEST_SUITE_P(Shapes, PoolGradient,
                         ::testing::Values(PoolCase{"k2s2_same_odd", 2, 7, 7, 3, 2, 2, Padding::kSame},
                                           PoolCase{"k2s2_valid_odd", 2, 7, 6, 3, 2, 2, Padding::kValid},
                                           PoolCase{"k2s2_valid_even", 2, 6, 4, 3, 2, 2, Padding::kValid},
                                           PoolCase{"k2s2_same_20_channels", 1, 5, 5, 20, 2, 2, Padding::kSame},
                                           PoolCase{"k3s2_same_33_channels", 1, 5, 4, 33, 3, 2, Padding::kSame},
                                           PoolCase{"k2s3_gapped", 1, 8, 7, 2, 2, 3, Padding::kValid},
                                           PoolCase{"k3s2_same", 2, 9, 8, 4, 3, 2, Padding::kSame},
                                           PoolCase{"k3s2_valid", 2, 9, 8, 4, 3, 2, Padding::kValid},
                                           PoolCase{"k3s2_valid_alexnet", 1, 13, 13, 5, 3, 2, Padding::kValid},
                                           PoolCase{"k3s2_same_cifarnet", 1, 24, 24, 2, 3, 2, Padding::kSame}),
                         [](const ::testing::TestParamInfo<PoolCase>& info) { return std::string(info.param.label); });

TEST(MaxPool, TiesGoToTheFirstCellInWindowOrder) {
  const MaxPool pool(MaxPoolConfig{.name = "pool", .kernel = 2, .stride = 2, .padding = Padding::kValid});
  // Two channels, one 2x2 window: channel 0 all equal, channel 1 ties
  // between the second and third cells.
  Tensor x({1, 2, 2, 2});
  x.data = {3, 1, 3, 5, 3, 5, 3, 2};
  auto scratch = pool.make_scratch();
  Tensor y, dx;
  ParamSet params;
  GradSet grads;
  pool.forward(params, x, y, scratch.get(), ForwardContext{});
  EXPECT_EQ(y.data, (std::vector<float>{3, 5}));
  Tensor dy({1, 1, 1, 2});
  dy.data = {10, 20};
  pool.backward(params, x, y, dy, &dx, grads, scratch.get());
  EXPECT_EQ(dx.data, (std::vector<float>{10, 0, 0, 20, 0, 0, 0, 0}));
}

TEST(MaxPool, TiesGoToTheFirstCellInEveryChannelLane) {
  // 19 channels: two 8-float AVX2 vectors plus a tail (one 16-float AVX-512
  // vector plus a masked one). Every cell of the 2x2 window ties in every
  // channel, so the whole gradient goes to the first cell.
  const int64_t c = 19;
  const MaxPool pool(MaxPoolConfig{.name = "pool", .kernel = 2, .stride = 2, .padding = Padding::kValid});
  Tensor x({1, 2, 2, c}, 1.5f);
  auto scratch = pool.make_scratch();
  Tensor y, dx;
  ParamSet params;
  GradSet grads;
  pool.forward(params, x, y, scratch.get(), ForwardContext{});
  Tensor dy({1, 1, 1, c});
  for (int64_t ch = 0; ch < c; ++ch) dy.data[ch] = static_cast<float>(ch + 1);
  pool.backward(params, x, y, dy, &dx, grads, scratch.get());
  for (int64_t ch = 0; ch < c; ++ch) {
    EXPECT_EQ(y.data[ch], 1.5f);
    EXPECT_EQ(dx.data[ch], static_cast<float>(ch + 1)) << "channel " << ch;
    for (int64_t cell = 1; cell < 4; ++cell) EXPECT_EQ(dx.data[cell * c + ch], 0.0f) << "cell " << cell << " channel " << ch;
  }
}

TEST(MaxPool, SamePaddingNeverWinsOverNegativeInputs) {
  const MaxPool pool(MaxPoolConfig{.name = "pool", .kernel = 3, .stride = 2, .padding = Padding::kSame});
  Tensor x({1, 4, 4, 1}, -2.0f);
  x.data[0] = -7.0f;
  auto scratch = pool.make_scratch();
  Tensor y;
  pool.forward(ParamSet{}, x, y, scratch.get(), ForwardContext{});
  ASSERT_EQ(y.shape, (Shape{1, 2, 2, 1}));
  for (float v : y.data) EXPECT_EQ(v, -2.0f);
}

TEST(MaxPool, OverlappingWindowsAccumulateInDx) {
  // 3x3/2 windows overlap on row and column 2: a shared maximum receives the
  // gradient of every window it wins.
  const MaxPool pool(MaxPoolConfig{.name = "pool", .kernel = 3, .stride = 2, .padding = Padding::kValid});
  Tensor x({1, 5, 5, 1}, 0.0f);
  x.data[2 * 5 + 2] = 1.0f;  // the center wins all four windows
  auto scratch = pool.make_scratch();
  Tensor y, dx;
  GradSet grads;
  pool.forward(ParamSet{}, x, y, scratch.get(), ForwardContext{});
  Tensor dy({1, 2, 2, 1});
  dy.data = {1, 2, 3, 4};
  pool.backward(ParamSet{}, x, y, dy, &dx, grads, scratch.get());
  EXPECT_EQ(dx.data[2 * 5 + 2], 10.0f);
  EXPECT_EQ(std::accumulate(dx.data.begin(), dx.data.end(), 0.0f), 10.0f);
}

}  // namespace
}  // namespace terngrad::train
