// Dense against the float64 reference (forward, numerical gradients of x,
// weights and biases), flattening order and parameter metadata.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <utility>
#include <vector>

#include "reference.h"
#include "terngrad/train/layers.h"

namespace terngrad::train {
namespace {

using testing::Vec;

struct DenseCase {
  const char* label;
  Shape in;
  int64_t units;
  bool relu;
};

std::ostream& operator<<(std::ostream& os, const DenseCase& c) { return os << c.label; }

class DenseGradient : public ::testing::TestWithParam<DenseCase> {};

TEST_P(DenseGradient, ForwardAndBackwardMatchFloat64Reference) {
  const DenseCase c = GetParam();
  Dense fc(DenseConfig{.name = "fc", .units = c.units, .relu = c.relu});
  ParamSet params;
  std::mt19937_64 rng(23);
  fc.create_params(c.in, params, rng);
  params.params[fc.weights_index()].value = testing::random_tensor(params.value(fc.weights_index()).shape, rng, -0.5, 0.5);
  params.params[fc.biases_index()].value = testing::random_tensor({c.units}, rng, -0.3, 0.3);
  const Tensor x = testing::random_tensor(c.in, rng);
  const int64_t n = c.in[0], d = x.size() / n;
  testing::check_layer(fc, params, {fc.weights_index(), fc.biases_index()}, x,
                       [&](const Vec& xv, const std::vector<Vec>& pv) {
                         return testing::ref_dense(xv, n, d, pv[0], pv[1], c.units, c.relu);
                       },
                       testing::GradCheck{});
}

INSTANTIATE_TEST_SUITE_P(Shapes, DenseGradient,
                         ::testing::Values(DenseCase{"flat", {3, 7}, 5, false},
                                           DenseCase{"flat_relu", {4, 9}, 6, true},
                                           DenseCase{"nhwc_input", {2, 3, 2, 4}, 5, true},
                                           DenseCase{"single_row", {1, 11}, 3, false}),
                         [](const ::testing::TestParamInfo<DenseCase>& info) { return std::string(info.param.label); });

TEST(Dense, LogitsParametersAreMarkedAndShaped) {
  Dense fc(DenseConfig{.name = "logits", .units = 10, .init_stddev = 1.0f / 192, .weight_decay = 0.0f, .is_logits = true});
  ParamSet params;
  std::mt19937_64 rng(1);
  fc.create_params({1, 192}, params, rng);
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params.params[0].name, "logits/weights");
  EXPECT_EQ(params.params[0].value.shape, (Shape{192, 10}));
  EXPECT_TRUE(params.params[0].is_logits);
  EXPECT_EQ(params.params[1].name, "logits/biases");
  EXPECT_TRUE(params.params[1].is_logits);
  EXPECT_EQ(fc.output_shape({64, 192}), (Shape{64, 10}));
}

TEST(Dense, FlattensNhwcRowsLikeTensorFlowReshape) {
  // With one unit and weights 0, 1, 2, ... the output is sum_k k * x_flat[k],
  // so it reveals the flattening order: NHWC, channel fastest.
  Dense fc(DenseConfig{.name = "fc", .units = 1});
  ParamSet params;
  std::mt19937_64 rng(1);
  fc.create_params({1, 2, 2, 2}, params, rng);
  for (int k = 0; k < 8; ++k) params.params[0].value.data[k] = static_cast<float>(k);
  Tensor x({1, 2, 2, 2}, 0.0f);
  x.data[1 * 2 * 2 + 0 * 2 + 1] = 1.0f;  // h = 1, w = 0, c = 1
  auto scratch = fc.make_scratch();
  Tensor y;
  fc.forward(params, x, y, scratch.get(), ForwardContext{});
  EXPECT_EQ(y.data[0], 5.0f);
}


// A layer wide enough to take several row blocks: 150 rows of 600 units
// make blocks of 64, 64 and 22 rows (Dense::block_rows).
struct WideDense {
  Dense fc{DenseConfig{.name = "fc3", .units = 600, .relu = true}};
  ParamSet params;
  Tensor x;
  WideDense() {
    std::mt19937_64 rng(5);
    fc.create_params({3, 150}, params, rng);
    params.params[fc.weights_index()].value = testing::random_tensor({150, 600}, rng, -0.2, 0.2);
    params.params[fc.biases_index()].value = testing::random_tensor({600}, rng, -0.3, 0.3);
    x = testing::random_tensor({3, 150}, rng);
  }
};

Vec as_vec(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }

// The forward pass waits for its weights a row block at a time, in order,
// then for the biases, and its sum of blocks is the float64 product's.
TEST(Dense, ForwardStreamsItsWeightsInRowBlocks) {
  WideDense w;
  ASSERT_EQ(Dense::block_rows(150, 600), 64);
  std::vector<std::pair<size_t, int64_t>> calls;
  const ParamsNeeded needed = [&](size_t v, int64_t elements) { calls.emplace_back(v, elements); };
  ForwardContext ctx;
  ctx.params_needed = &needed;
  auto scratch = w.fc.make_scratch();
  Tensor y;
  w.fc.forward(w.params, w.x, y, scratch.get(), ctx);
  const size_t wi = w.fc.weights_index(), bi = w.fc.biases_index();
  EXPECT_EQ(calls, (std::vector<std::pair<size_t, int64_t>>{{wi, 64 * 600}, {wi, 128 * 600}, {wi, 150 * 600}, {bi, 600}}));
  const Vec ref = testing::ref_dense(as_vec(w.x.data), 3, 150, as_vec(w.params.value(wi).data),
                                     as_vec(w.params.value(bi).data), 600, true);
  ASSERT_EQ(y.data.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(y.data[i], ref[i], 1e-5 * (1 + std::abs(ref[i]))) << i;
}

// backward_params() then backward_input() is backward(), bit for bit, and
// backward_params() reports the weight gradient done a row block at a time;
// dx before the parameter gradients is refused.
TEST(Dense, SplitBackwardIsBackwardBitForBit) {
  WideDense w;
  std::mt19937_64 rng(9);
  const Tensor dy = testing::random_tensor({3, 600}, rng);
  std::vector<float> whole_dw;  // the unsplit backward's weight gradient, once known
  auto run = [&](bool split, GradSet& grads, Tensor& dx) {
    auto scratch = w.fc.make_scratch();
    Tensor y;
    w.fc.forward(w.params, w.x, y, scratch.get(), ForwardContext{});
    grads = {Tensor({150, 600}, 0.0f), Tensor({600}, 0.0f)};
    if (split) {
      std::vector<std::pair<size_t, int64_t>> calls;
      const GradsDone done = [&](size_t v, int64_t elements) {
        calls.emplace_back(v, elements);
        // What is reported done is final: the rows before it equal the unsplit backward's at the end.
        if (!whole_dw.empty())
          for (int64_t i = 0; i < elements; ++i) ASSERT_EQ(grads[v].data[i], whole_dw[i]) << i;
      };
      w.fc.backward_params(w.params, w.x, y, dy, grads, scratch.get(), &done);
      const size_t wi = w.fc.weights_index();
      ASSERT_EQ(Dense::grad_block_rows(150, 600), 128);
      EXPECT_EQ(calls, (std::vector<std::pair<size_t, int64_t>>{{wi, 128 * 600}, {wi, 150 * 600}}));
      w.fc.backward_input(w.params, w.x, y, dy, &dx, scratch.get());
    } else {
      w.fc.backward(w.params, w.x, y, dy, &dx, grads, scratch.get());
    }
  };
  GradSet whole, split;
  Tensor dx_whole, dx_split;
  run(false, whole, dx_whole);
  whole_dw = whole[0].data;
  run(true, split, dx_split);
  EXPECT_EQ(split[0].data, whole[0].data);
  EXPECT_EQ(split[1].data, whole[1].data);
  EXPECT_EQ(dx_split.data, dx_whole.data);
  auto fresh = w.fc.make_scratch();
  Tensor y, dx;
  w.fc.forward(w.params, w.x, y, fresh.get(), ForwardContext{});
  EXPECT_THROW(w.fc.backward_input(w.params, w.x, y, dy, &dx, fresh.get()), std::logic_error);
}

}  // namespace
}  // namespace terngrad::train
