// GPU MaxPool, LocalResponseNorm and ReLU against their CPU layers.
// MaxPool and ReLU select and route values without arithmetic beyond the
// CPU's own additions in the same order: bound 0 (bit-identical), ties
// included. LRN: 1e-5 (same sums in the same order; FMA contraction and
// pow may differ by an ulp per operation).
#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "terngrad/train/layers.h"

namespace terngrad::train::cuda {
namespace {

using testing::expect_layer_matches;
using testing::random_tensor;
using testing::tied_tensor;

TEST(GpuMaxPool, LeNet2x2Valid) {
  TG_REQUIRE_GPU();
  MaxPool pool({"pool1", 2, 2, Padding::kValid});
  expect_layer_matches(pool, ParamSet{}, random_tensor({8, 28, 28, 20}, 11), 0.0);
}

TEST(GpuMaxPool, CifarNet3x3Stride2SameIsAsymmetric) {
  TG_REQUIRE_GPU();
  // 24 -> 12: TF pads 0 before and 1 after.
  MaxPool pool({"pool1", 3, 2, Padding::kSame});
  expect_layer_matches(pool, ParamSet{}, random_tensor({4, 24, 24, 64}, 12), 0.0);
}

TEST(GpuMaxPool, TiesGoToTheFirstCellInWindowOrder) {
  TG_REQUIRE_GPU();
  MaxPool overlap({"pool2", 3, 2, Padding::kSame});
  expect_layer_matches(overlap, ParamSet{}, tied_tensor({2, 12, 12, 5}, 13, 2), 0.0);
  MaxPool tiles({"pool1", 2, 2, Padding::kValid});
  expect_layer_matches(tiles, ParamSet{}, tied_tensor({2, 10, 10, 3}, 14, 1), 0.0);
}

TEST(GpuMaxPool, OddSizeValidLeavesUncoveredCellsZero) {
  TG_REQUIRE_GPU();
  MaxPool pool({"p", 2, 2, Padding::kValid});
  expect_layer_matches(pool, ParamSet{}, random_tensor({2, 7, 7, 3}, 15), 0.0);
}

TEST(GpuLrn, CifarNetParameters) {
  TG_REQUIRE_GPU();
  LocalResponseNorm lrn({"norm1", 4, 1.0f, 0.001f / 9.0f, 0.75f});
  // Activations of CifarNet's conv layers reach tens: scale the input so the
  // normalization is far from the identity.
  expect_layer_matches(lrn, ParamSet{}, random_tensor({4, 12, 12, 64}, 16, -20.0f, 20.0f), 1e-5);
}

TEST(GpuLrn, OtherBetaAndSmallChannelCount) {
  TG_REQUIRE_GPU();
  LocalResponseNorm lrn({"n", 2, 2.0f, 0.1f, 0.6f});
  expect_layer_matches(lrn, ParamSet{}, random_tensor({3, 5, 5, 3}, 17, -3.0f, 3.0f), 1e-5);
}

TEST(GpuReLU, MatchesExactly) {
  TG_REQUIRE_GPU();
  ReLU relu("relu");
  expect_layer_matches(relu, ParamSet{}, random_tensor({4, 9, 9, 7}, 18), 0.0);
}

}  // namespace
}  // namespace terngrad::train::cuda
