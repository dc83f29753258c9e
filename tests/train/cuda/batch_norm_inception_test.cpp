// GPU BatchNorm, AvgPool and BranchConcat (GoogLeNet's Inception block)
// against their CPU layers. BatchNorm: 1e-5 in training (both reduce in
// double; the float rounding of the normalization differs by FMA
// contraction) and in evaluation; the folded moving statistics to 1e-6.
// AvgPool: 1e-6 (the same sums, the reciprocal multiplied in another order
// in backward). BranchConcat: its convs' cuDNN bound, 1e-4.
#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "terngrad/train/layers.h"

namespace terngrad::train::cuda {
namespace {

using testing::expect_layer_matches;
using testing::random_tensor;

void shift_channels(Tensor& t) {
  const int64_t c = t.shape.back();
  for (int64_t i = 0; i < t.size(); ++i) t.data[i] = t.data[i] * (1.0f + 0.3f * (i % c)) + 0.5f * (i % c);
}

TEST(GpuBatchNorm, TrainingMatchesCpu) {
  TG_REQUIRE_GPU();
  for (bool relu : {true, false}) {
    BatchNorm bn({"Conv2d_1a_7x7/BatchNorm", 0.001f, 0.9997f, relu});
    const Shape in{2, 14, 14, 37};
    ParamSet params;
    std::mt19937_64 rng(1);
    bn.create_params(in, params, rng);
    params.params[0].value = random_tensor({37}, 2, -0.2f, 0.2f);
    Tensor x = random_tensor(in, 3);
    shift_channels(x);
    expect_layer_matches(bn, params, x, 1e-5);
  }
}

TEST(GpuBatchNorm, EvaluationUsesTheHostMovingStatistics) {
  TG_REQUIRE_GPU();
  BatchNorm bn({"bn", 0.001f, 0.999f, true});
  const Shape in{3, 5, 5, 8};
  ParamSet params;
  StateSet state;
  std::mt19937_64 rng(1);
  bn.create_params(in, params, rng);
  bn.create_state(in, state);
  state.vars[0].value = random_tensor({8}, 4, -0.5f, 0.5f);
  state.vars[1].value = random_tensor({8}, 5, 0.5f, 2.0f);
  ForwardContext eval;
  eval.state = &state;
  expect_layer_matches(bn, params, random_tensor(in, 6), 1e-5, 7, eval);
}

TEST(GpuBatchNorm, FoldMatchesCpu) {
  TG_REQUIRE_GPU();
  BatchNorm bn({"bn", 0.001f, 0.9f, false});
  const Shape in{4, 7, 7, 16};
  ParamSet params;
  StateSet cpu_state, gpu_state;
  std::mt19937_64 rng(1);
  bn.create_params(in, params, rng);
  bn.create_state(in, cpu_state);
  // A layer indexes one layout of its state: the GPU's copy has that layout
  // (a second create_state is refused as a programming error).
  gpu_state = cpu_state;
  Tensor x = random_tensor(in, 8);
  shift_channels(x);
  ForwardContext train;
  train.training = true;
  auto cs = bn.make_scratch();
  Tensor y;
  bn.forward(params, x, y, cs.get(), train);
  bn.fold_state(cs.get(), cpu_state);

  GpuContext ctx;
  auto gpu = make_gpu_layer(bn);
  auto gs = gpu->make_scratch();
  DeviceParams dp;
  dp.push_back(to_device(params.params[0].value));
  const DeviceTensor dx = to_device(x);
  DeviceTensor dy;
  gpu->forward(ctx, dp, dx, dy, gs.get(), train);
  gpu->fold_state(ctx, gs.get(), gpu_state);
  for (size_t i = 0; i < 2; ++i)
    EXPECT_LE(testing::relative_error(gpu_state.vars[i].value, cpu_state.vars[i].value), 1e-6) << cpu_state.vars[i].name;
}

TEST(GpuAvgPool, GoogLeNetGlobal7x7AndSameWindows) {
  TG_REQUIRE_GPU();
  AvgPool global({"logits/MaxPool_0a_7x7", 7, 1, Padding::kValid});
  expect_layer_matches(global, ParamSet{}, random_tensor({2, 7, 7, 1024}, 9), 1e-6);
  AvgPool same({"avg", 3, 2, Padding::kSame});
  expect_layer_matches(same, ParamSet{}, random_tensor({2, 9, 8, 5}, 10), 1e-6);
}

TEST(GpuBranchConcat, InceptionBlockMatchesCpu) {
  TG_REQUIRE_GPU();
  auto conv_bn = [](std::vector<std::unique_ptr<Layer>>& out, const std::string& name, int64_t f, int64_t k) {
    out.push_back(std::make_unique<Conv2D>(Conv2DConfig{.name = name, .filters = f, .kernel_h = k, .kernel_w = k,
                                                        .init_stddev = 0.1f, .bias = false}));
    out.push_back(std::make_unique<BatchNorm>(BatchNormConfig{name + "/BatchNorm", 0.001f, 0.9997f, true}));
  };
  std::vector<BranchConcat::Branch> br(4);
  conv_bn(br[0], "m/Branch_0/Conv2d_0a_1x1", 8, 1);
  conv_bn(br[1], "m/Branch_1/Conv2d_0a_1x1", 6, 1);
  conv_bn(br[1], "m/Branch_1/Conv2d_0b_3x3", 12, 3);
  conv_bn(br[2], "m/Branch_2/Conv2d_0a_1x1", 4, 1);
  conv_bn(br[2], "m/Branch_2/Conv2d_0b_3x3", 5, 3);
  br[3].push_back(std::make_unique<MaxPool>(MaxPoolConfig{"m/Branch_3/MaxPool_0a_3x3", 3, 1, Padding::kSame}));
  conv_bn(br[3], "m/Branch_3/Conv2d_0b_1x1", 7, 1);
  BranchConcat mix("m", std::move(br));
  const Shape in{2, 9, 9, 16};
  ParamSet params;
  std::mt19937_64 rng(3);
  mix.create_params(in, params, rng);
  expect_layer_matches(mix, params, random_tensor(in, 11), 1e-4);
}

}  // namespace
}  // namespace terngrad::train::cuda
