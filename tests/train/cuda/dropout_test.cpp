// GPU Dropout against the CPU Dropout: bound 0 (the same mask from the
// shared hash, the same single-multiply scaling), in training for several
// seeds and layer names, and the plain copy of evaluation and keep_prob 1.
#include <gtest/gtest.h>

#include <string>

#include "gpu_test_util.h"
#include "terngrad/train/layers.h"

namespace terngrad::train::cuda {
namespace {

using testing::expect_layer_matches;
using testing::random_tensor;

void expect_dropout_matches(const std::string& name, float keep_prob, const Shape& shape, bool training,
                            uint64_t seed) {
  SCOPED_TRACE(name + " keep_prob " + std::to_string(keep_prob) + (training ? " training" : " evaluation") +
               " seed " + std::to_string(seed));
  const Dropout d(DropoutConfig{.name = name, .keep_prob = keep_prob});
  expect_layer_matches(d, ParamSet{}, random_tensor(shape, seed + 1), 0.0, seed + 2, ForwardContext{training, seed});
}

TEST(GpuDropout, TrainingMasksMatchCpuBitForBit) {
  TG_REQUIRE_GPU();
  for (uint64_t seed : {uint64_t{0}, uint64_t{42}, uint64_t{0xDEADBEEFCAFE}}) {
    expect_dropout_matches("dropout6", 0.5f, {4, 4096}, true, seed);  // AlexNet's fc6 output, small batch
    expect_dropout_matches("dropout7", 0.5f, {3, 5, 7, 11}, true, seed);
    expect_dropout_matches("dropout7", 0.8f, {2, 1000}, true, seed);
  }
}

TEST(GpuDropout, EvaluationIsACopy) {
  TG_REQUIRE_GPU();
  for (uint64_t seed : {uint64_t{0}, uint64_t{42}}) expect_dropout_matches("dropout6", 0.5f, {4, 4096}, false, seed);
}

TEST(GpuDropout, KeepProbOneIsACopyInTraining) {
  TG_REQUIRE_GPU();
  for (uint64_t seed : {uint64_t{0}, uint64_t{42}}) {
    expect_dropout_matches("dropout6", 1.0f, {4, 4096}, true, seed);
    expect_dropout_matches("dropout6", 1.0f, {4, 4096}, false, seed);
  }
}

TEST(GpuDropout, LargeTensorPastOneGridSweep) {
  TG_REQUIRE_GPU();
  // More elements than the capped grid covers in one pass (65535 * 8 blocks
  // of 256 threads = 2^27 - 2^11), so the grid-stride loop runs twice.
  expect_dropout_matches("dropout6", 0.5f, {2, (int64_t{1} << 26) + 3}, true, 7);
}

}  // namespace
}  // namespace terngrad::train::cuda
