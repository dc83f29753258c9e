// GPU Dense (cuBLAS) against the CPU Dense. Bound 1e-4 (fp32 GEMM, sums of up
// to 2450 products in another order; no TF32).
#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "terngrad/train/layers.h"

namespace terngrad::train::cuda {
namespace {

void check_dense(DenseConfig cfg, const Shape& in) {
  Dense dense(cfg);
  testing::expect_biased_layer_matches(dense, in, 5, 1e-4);
}

TEST(GpuDense, LeNetFc3FlattensNhwcAndRelu) {
  TG_REQUIRE_GPU();
  check_dense({.name = "fc3", .units = 500, .init_stddev = 0.048f, .relu = true}, {8, 7, 7, 50});
}

TEST(GpuDense, Logits) {
  TG_REQUIRE_GPU();
  check_dense({.name = "logits", .units = 10, .init_stddev = 0.0767f, .is_logits = true}, {8, 500});
}

TEST(GpuDense, OddSizes) {
  TG_REQUIRE_GPU();
  check_dense({.name = "odd", .units = 37, .relu = true}, {3, 101});
}

}  // namespace
}  // namespace terngrad::train::cuda
