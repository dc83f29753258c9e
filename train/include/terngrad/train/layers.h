// The layers of the TernGrad paper's networks (LeNet, CifarNet, AlexNet,
// GoogLeNet, VGG-A as the authors defined them in TensorFlow), for the CPU
// trainer. NHWC
// activations, TensorFlow parameter layouts and names, TensorFlow padding and
// normalization formulas, so a run here can be compared with the paper's.
//
// Building a layer: fill its config with designated initializers and hand it
// to the model, e.g.
//   model.add(std::make_unique<Conv2D>(Conv2DConfig{.name = "conv1", .filters = 20,
//                                                   .kernel_h = 5, .kernel_w = 5,
//                                                   .init_stddev = 0.05f, .relu = true}));
// Constructors validate the config and throw std::invalid_argument naming the
// layer, the field and the value.
//
// Threading: forward/backward are const and keep every mutable buffer in the
// LayerScratch from make_scratch(), so workers can run one Model concurrently,
// each with its own scratch. Nothing here starts threads; Eigen's GEMM may use
// OpenMP when called outside a parallel region (inside one it runs serially).
// Scratch buffers grow to the largest batch seen and are then reused, so a
// steady-state step allocates nothing.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <string>

#include "terngrad/train/layer.h"

namespace terngrad::train {

// ---------------------------------------------------------------------------
// Shared geometry and initialization.

enum class Padding { kSame, kValid };
const char* padding_name(Padding p);  // "SAME" / "VALID"

// One spatial dimension of a sliding window, with TensorFlow's rule:
//   SAME:  out = ceil(in / stride), pad_total = max((out-1)*stride + k - in, 0),
//          pad_before = pad_total / 2 (the extra cell, if any, goes after);
//   VALID: out = ceil((in - k + 1) / stride), pad_before = 0.
// out <= 0 means the window does not fit (VALID with k > in).
struct WindowGeometry {
  int64_t out = 0;
  int64_t pad_before = 0;
};
WindowGeometry window_geometry(int64_t in, int64_t kernel, int64_t stride, Padding padding);

// tf.truncated_normal(stddev): normal(0, stddev) draws, redrawn while beyond
// two standard deviations. Box-Muller on rng's raw 64-bit outputs (not
// std::normal_distribution, whose algorithm differs between standard
// libraries), so a seed gives the same weights with every toolchain.
void truncated_normal_fill(std::span<float> out, float stddev, std::mt19937_64& rng);

// How a Conv2D or Dense layer draws its weights (biases are constants):
//   kTruncatedNormal: tf.truncated_normal(stddev = init_stddev);
//   kVarianceScaling: tf.contrib.layers.variance_scaling_initializer() with
//     its defaults (factor 2, FAN_IN, truncated normal): stddev =
//     sqrt(1.3 * 2 / fan_in), the 1.3 undoing the truncation's shrinkage;
//   kGlorotUniform: tf.contrib.layers.xavier_initializer() (uniform, FAN_AVG):
//     U(-limit, limit), limit = sqrt(6 / (fan_in + fan_out)).
// fan_in = kh * kw * cin (conv) or D (dense); fan_out = kh * kw * filters or units.
enum class WeightInit { kTruncatedNormal, kVarianceScaling, kGlorotUniform };

// Fills out per `init` (init_stddev is read by kTruncatedNormal only).
void init_weights(std::span<float> out, WeightInit init, float init_stddev, int64_t fan_in, int64_t fan_out,
                  std::mt19937_64& rng);

// The index a layer uses before create_params() has run.
inline constexpr size_t kNoParam = std::numeric_limits<size_t>::max();

// ---------------------------------------------------------------------------
// 2-D convolution, optionally grouped (AlexNet's two towers), bias and an
// optional fused ReLU. Weights "<name>/weights" [kh, kw, cin/groups, filters]
// (TF HWIO; group g uses input channels [g*cin/groups, (g+1)*cin/groups) and
// filters [g*filters/groups, (g+1)*filters/groups)), biases "<name>/biases"
// [filters]. weight_decay applies to the weights only, as in the TF models.
//
// Computed as im2col (rows = output pixels, columns = kh*kw*cin/groups in
// (i, j, c) order, matching the HWIO weights) + Eigen GEMM, a few examples at
// a time so the patch block stays in cache; backward recomputes the patches
// rather than keeping them (AlexNet's would be hundreds of MB per worker).
struct Conv2DConfig {
  std::string name;
  int64_t filters = 0;
  int64_t kernel_h = 0;
  int64_t kernel_w = 0;
  int64_t stride = 1;  // same in both spatial dimensions, as in all three nets
  Padding padding = Padding::kSame;
  int64_t groups = 1;
  float init_stddev = 0.05f;  // truncated normal
  float bias_init = 0.0f;     // constant
  float weight_decay = 0.0f;
  bool relu = false;  // fused ReLU on the output
  WeightInit init = WeightInit::kTruncatedNormal;
  // false: no "<name>/biases" (a conv followed by batch norm, whose beta is
  // the offset: slim's conv2d with a normalizer_fn creates no biases).
  bool bias = true;
};

class Conv2D final : public Layer {
 public:
  explicit Conv2D(Conv2DConfig cfg);
  const Conv2DConfig& config() const { return cfg_; }
  size_t weights_index() const { return w_; }
  size_t biases_index() const { return b_; }  // kNoParam when !config().bias

  Shape output_shape(const Shape& in) const override;
  void create_params(const Shape& in, ParamSet& params, std::mt19937_64& init_rng) override;
  std::unique_ptr<LayerScratch> make_scratch() const override;
  void forward(const ParamSet& params, const Tensor& x, Tensor& y, LayerScratch* scratch,
               const ForwardContext& ctx) const override;
  void backward(const ParamSet& params, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx,
                GradSet& grads, LayerScratch* scratch) const override;
  // out_h * out_w * filters * kh * kw * cin/groups.
  int64_t forward_macs_per_example(const Shape& in) const override;

 private:
  Conv2DConfig cfg_;
  size_t w_ = kNoParam, b_ = kNoParam;
};

// ---------------------------------------------------------------------------
// Max pooling over kernel x kernel windows per channel. SAME pads with -inf
// (padded cells never win). Backward routes each output gradient to the input
// cell that won in forward (recorded in the scratch); on ties the first cell
// in row-major window order wins.
struct MaxPoolConfig {
  std::string name;
  int64_t kernel = 2;
  int64_t stride = 2;
  Padding padding = Padding::kValid;
};

class MaxPool final : public Layer {
 public:
  explicit MaxPool(MaxPoolConfig cfg);
  const MaxPoolConfig& config() const { return cfg_; }

  Shape output_shape(const Shape& in) const override;
  std::unique_ptr<LayerScratch> make_scratch() const override;
  void forward(const ParamSet& params, const Tensor& x, Tensor& y, LayerScratch* scratch,
               const ForwardContext& ctx) const override;
  void backward(const ParamSet& params, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx,
                GradSet& grads, LayerScratch* scratch) const override;

 private:
  MaxPoolConfig cfg_;
};

// ---------------------------------------------------------------------------
// tf.nn.local_response_normalization over channels, per pixel:
//   sqr_sum[c] = sum of x[c']^2 for c' in [c - depth_radius, c + depth_radius]
//                (clipped to the channel range),
//   y[c] = x[c] / (bias + alpha * sqr_sum[c])^beta.
// alpha multiplies the plain sum (TensorFlow does not divide it by the window
// size; CifarNet passes alpha = 0.001/9 itself).
struct LocalResponseNormConfig {
  std::string name;
  int64_t depth_radius = 5;
  float bias = 1.0f;
  float alpha = 1.0f;
  float beta = 0.5f;
};

class LocalResponseNorm final : public Layer {
 public:
  explicit LocalResponseNorm(LocalResponseNormConfig cfg);
  const LocalResponseNormConfig& config() const { return cfg_; }

  Shape output_shape(const Shape& in) const override;  // same shape, [N, H, W, C]
  std::unique_ptr<LayerScratch> make_scratch() const override;
  void forward(const ParamSet& params, const Tensor& x, Tensor& y, LayerScratch* scratch,
               const ForwardContext& ctx) const override;
  void backward(const ParamSet& params, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx,
                GradSet& grads, LayerScratch* scratch) const override;

 private:
  LocalResponseNormConfig cfg_;
};

// ---------------------------------------------------------------------------
// Fully connected layer: flattens [N, ...] to [N, D] in row-major (NHWC)
// order, as TF's reshape does, then y = x W + b with optional fused ReLU.
// Weights "<name>/weights" [D, units], biases "<name>/biases" [units];
// is_logits marks both as the logits layer's variables.
struct DenseConfig {
  std::string name;
  int64_t units = 0;
  float init_stddev = 0.04f;  // truncated normal
  float bias_init = 0.0f;     // constant
  float weight_decay = 0.0f;  // weights only
  bool is_logits = false;
  bool relu = false;  // fused ReLU on the output
  WeightInit init = WeightInit::kTruncatedNormal;
};

class Dense final : public Layer {
 public:
  explicit Dense(DenseConfig cfg);
  const DenseConfig& config() const { return cfg_; }
  size_t weights_index() const { return w_; }
  size_t biases_index() const { return b_; }

  Shape output_shape(const Shape& in) const override;  // [N, units]
  void create_params(const Shape& in, ParamSet& params, std::mt19937_64& init_rng) override;
  void forward(const ParamSet& params, const Tensor& x, Tensor& y, LayerScratch* scratch,
               const ForwardContext& ctx) const override;
  void backward(const ParamSet& params, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx,
                GradSet& grads, LayerScratch* scratch) const override;
  int64_t forward_macs_per_example(const Shape& in) const override;  // D * units

  // The forward pass is a sum over row blocks of the weights, in order, each
  // waited for through ctx.params_needed when set (block_rows); the weight
  // gradient is computed in row blocks too, each reported done as it is
  // final (grad_block_rows). The blocks depend on the shape alone, so the
  // arithmetic is the same bit for bit whether the weights arrive and the
  // gradient leaves block by block or all at once.
  bool streams_params() const override { return true; }
  static int64_t block_rows(int64_t d, int64_t units);
  static int64_t grad_block_rows(int64_t d, int64_t units);
  // db, then dw block by block, then dx.
  bool splits_backward() const override { return true; }
  void backward_params(const ParamSet& params, const Tensor& x, const Tensor& y, const Tensor& dy, GradSet& grads,
                       LayerScratch* scratch, const GradsDone* done) const override;
  void backward_input(const ParamSet& params, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx,
                      LayerScratch* scratch) const override;

  // Dense keeps its masked output gradient here when relu is fused.
  std::unique_ptr<LayerScratch> make_scratch() const override;

 private:
  DenseConfig cfg_;
  size_t w_ = kNoParam, b_ = kNoParam;
};

// ---------------------------------------------------------------------------
// y = max(x, 0), any shape. dx = dy where y > 0, else 0 (TF's ReluGrad).
class ReLU final : public Layer {
 public:
  explicit ReLU(std::string name);

  Shape output_shape(const Shape& in) const override;
  void forward(const ParamSet& params, const Tensor& x, Tensor& y, LayerScratch* scratch,
               const ForwardContext& ctx) const override;
  void backward(const ParamSet& params, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx,
                GradSet& grads, LayerScratch* scratch) const override;
};

// ---------------------------------------------------------------------------
// Inverted dropout, any shape: in training (ctx.training and keep_prob < 1)
// y = x / keep_prob where the element is kept, else 0; in evaluation y = x.
// Whether element i (flat index in the batch tensor) is kept is a pure hash
// of (ctx.dropout_seed, this layer's name, i): deterministic per seed, the
// same whatever the thread scheduling, and different between two dropout
// layers that see the same seed. Backward recomputes the same mask. The
// hash is terngrad/train/dropout_mask.h, which the GPU twin shares.
struct DropoutConfig {
  std::string name;
  float keep_prob = 0.5f;  // in (0, 1]
};

class Dropout final : public Layer {
 public:
  explicit Dropout(DropoutConfig cfg);
  const DropoutConfig& config() const { return cfg_; }

  Shape output_shape(const Shape& in) const override;
  std::unique_ptr<LayerScratch> make_scratch() const override;
  void forward(const ParamSet& params, const Tensor& x, Tensor& y, LayerScratch* scratch,
               const ForwardContext& ctx) const override;
  void backward(const ParamSet& params, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx,
                GradSet& grads, LayerScratch* scratch) const override;

  // Whether flat element `index` is kept under `seed` (what forward uses).
  bool kept(uint64_t seed, uint64_t index) const;
  // The dropout_mask parameters forward uses (the GPU twin reads them).
  uint64_t mask_salt() const { return salt_; }
  uint64_t mask_threshold() const { return threshold_; }

 private:
  DropoutConfig cfg_;
  uint64_t salt_;          // from the layer name
  uint64_t threshold_;     // keep iff the hash's top 32 bits < threshold_
};

// ---------------------------------------------------------------------------
// slim.batch_norm as GoogLeNet and VGG-A use it: center = true (a trainable
// offset "<name>/beta", zero-initialized), scale = false (no gamma), over the
// last (channel) axis of any [N, ..., C] input:
//   training:   mean, var = the batch's per-channel mean and biased variance
//               over every axis but the last (tf.nn.moments);
//   evaluation: mean, var = the model state "<name>/moving_mean" (starts at 0)
//               and "<name>/moving_variance" (starts at 1);
//   y = (x - mean) / sqrt(var + epsilon) + beta, then ReLU when relu (the
//   conv's activation, which slim applies after the normalizer).
// Training backward runs through the batch mean and variance (the full
// gradient); an evaluation-mode backward treats them as constants.
// fold_state: moving -= (1 - decay) * (moving - batch), TF's
// assign_moving_average, with the batch statistics of the last training
// forward on that scratch.
struct BatchNormConfig {
  std::string name;  // e.g. "Conv2d_1a_7x7/BatchNorm"
  float epsilon = 0.001f;
  float decay = 0.999f;  // slim's default; GoogLeNet's inception_arg_scope uses 0.9997
  bool relu = false;
};

class BatchNorm final : public Layer {
 public:
  explicit BatchNorm(BatchNormConfig cfg);
  const BatchNormConfig& config() const { return cfg_; }
  size_t beta_index() const { return beta_; }
  size_t moving_mean_index() const { return mean_; }
  size_t moving_variance_index() const { return var_; }

  Shape output_shape(const Shape& in) const override;  // same shape
  void create_params(const Shape& in, ParamSet& params, std::mt19937_64& init_rng) override;
  void create_state(const Shape& in, StateSet& state) override;
  void fold_state(const LayerScratch* scratch, StateSet& state) const override;
  std::unique_ptr<LayerScratch> make_scratch() const override;
  void forward(const ParamSet& params, const Tensor& x, Tensor& y, LayerScratch* scratch,
               const ForwardContext& ctx) const override;
  void backward(const ParamSet& params, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx,
                GradSet& grads, LayerScratch* scratch) const override;

  // Per-channel statistics of the last forward on `scratch` (the batch's in
  // training, the moving ones in evaluation): what the GPU twin is checked
  // against and what fold_state reads.
  struct Stats {
    std::vector<float> mean, variance;
    bool training = false;  // the batch's own (fold_state needs these)
  };
  static const Stats& last_stats(const LayerScratch* scratch, const std::string& layer);
  // The moving-average update fold_state applies, on plain vectors (the GPU
  // trainer folds the statistics its device computed with the same rule).
  void fold(const std::vector<float>& batch_mean, const std::vector<float>& batch_variance, StateSet& state) const;

 private:
  BatchNormConfig cfg_;
  size_t beta_ = kNoParam, mean_ = kNoParam, var_ = kNoParam;
};

// ---------------------------------------------------------------------------
// Average pooling over kernel x kernel windows per channel, TF's rule: VALID
// windows average k*k cells; SAME windows average the in-image cells only
// (padding is not counted, as tf.nn.avg_pool does). GoogLeNet's logits use
// 7x7 VALID on a 7x7 map (a global average).
struct AvgPoolConfig {
  std::string name;
  int64_t kernel = 2;
  int64_t stride = 2;
  Padding padding = Padding::kValid;
};

class AvgPool final : public Layer {
 public:
  explicit AvgPool(AvgPoolConfig cfg);
  const AvgPoolConfig& config() const { return cfg_; }

  Shape output_shape(const Shape& in) const override;
  void forward(const ParamSet& params, const Tensor& x, Tensor& y, LayerScratch* scratch,
               const ForwardContext& ctx) const override;
  void backward(const ParamSet& params, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx,
                GradSet& grads, LayerScratch* scratch) const override;

 private:
  AvgPoolConfig cfg_;
};

// ---------------------------------------------------------------------------
// Branches run on the same input, outputs concatenated on channels, in
// branch order (GoogLeNet's Mixed_* blocks: tf.concat(axis=3, [branch_0,
// ..., branch_3])). Each branch is a chain of ordinary layers named in full
// ("Mixed_3b/Branch_1/Conv2d_0b_3x3"); every branch output must have the
// same [N, H, W]. Backward hands each branch its channel slice of dy and
// sums the branches' input gradients.
//
// Why a composite layer rather than a graph in Model: Inception blocks are
// the only non-chain structure in the paper's nets, and as one Layer they
// keep everything built on the chain unchanged (the GPU model, the per-layer
// grads_ready callback that overlaps communication with backward, the
// dispatch from CPU layer to GPU twin). Parameters and state are created
// branch by branch, layer by layer, which is TF's creation order.
class BranchConcat final : public Layer {
 public:
  using Branch = std::vector<std::unique_ptr<Layer>>;
  BranchConcat(std::string name, std::vector<Branch> branches);
  const std::vector<Branch>& branches() const { return branches_; }

  Shape output_shape(const Shape& in) const override;
  void create_params(const Shape& in, ParamSet& params, std::mt19937_64& init_rng) override;
  void create_state(const Shape& in, StateSet& state) override;
  void fold_state(const LayerScratch* scratch, StateSet& state) const override;
  std::unique_ptr<LayerScratch> make_scratch() const override;
  void forward(const ParamSet& params, const Tensor& x, Tensor& y, LayerScratch* scratch,
               const ForwardContext& ctx) const override;
  void backward(const ParamSet& params, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx,
                GradSet& grads, LayerScratch* scratch) const override;
  int64_t forward_macs_per_example(const Shape& in) const override;

  // Output channels of each branch for input `in` (the concat's split points).
  std::vector<int64_t> branch_channels(const Shape& in) const;

 private:
  std::vector<Branch> branches_;
};

}  // namespace terngrad::train
