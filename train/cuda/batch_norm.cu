// BatchNorm on the GPU, the CPU BatchNorm (train/layers/batch_norm.cpp) its
// reference. Own NHWC kernels rather than cuDNN's batch norm: cuDNN's
// spatial batch norm has a gamma (scale = false would need a ones tensor
// and a discarded dgamma), keeps its own running averages with an unbiased
// variance where slim folds the biased one, and its NHWC fp32 path is not
// deterministic; here the per-channel sums have a fixed order (double
// accumulators per lane, lanes combined in order), so a run repeats bit for
// bit. The moving statistics stay the host Model's state: evaluation uploads
// them, fold_state downloads the batch's (2 x C floats) and applies the CPU
// layer's rule.
#include <stdexcept>
#include <vector>

#include "gpu_layers.h"
#include "kernels.h"
#include "terngrad/device/grid_stride.cuh"
#include "terngrad/train/cuda/errors.h"

namespace terngrad::train::cuda {

using terngrad::device::grid_stride_range;

using detail::blocks_for;
using detail::kThreads;

namespace {

constexpr int kCols = 32, kLanes = 8;

// Per channel: the batch mean and biased variance (two passes), and
// inv = 1 / sqrt(var + eps). Block: 32 channels x 8 row lanes.
__global__ void bn_batch_stats(const float* x, int64_t rows, int64_t c, float eps, float* mean, float* var,
                               float* inv) {
  __shared__ double acc[kLanes][kCols];
  __shared__ double m[kCols];
  const int64_t col = blockIdx.x * int64_t{kCols} + threadIdx.x;
  double s = 0.0;
  if (col < c)
    for (int64_t r = threadIdx.y; r < rows; r += kLanes) s += x[r * c + col];
  acc[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0) {
    double t = 0.0;
    for (int k = 0; k < kLanes; ++k) t += acc[k][threadIdx.x];
    m[threadIdx.x] = static_cast<double>(static_cast<float>(t / static_cast<double>(rows)));
  }
  __syncthreads();
  const double mu = m[threadIdx.x];
  s = 0.0;
  if (col < c)
    for (int64_t r = threadIdx.y; r < rows; r += kLanes) {
      const double d = static_cast<double>(x[r * c + col]) - mu;
      s += d * d;
    }
  acc[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && col < c) {
    double t = 0.0;
    for (int k = 0; k < kLanes; ++k) t += acc[k][threadIdx.x];
    const float v = static_cast<float>(t / static_cast<double>(rows));
    mean[col] = static_cast<float>(mu);
    var[col] = v;
    inv[col] = 1.0f / sqrtf(v + eps);
  }
}

__global__ void bn_inv(const float* var, float* inv, int64_t c, float eps) {
  for (const int64_t i : grid_stride_range(c)) inv[i] = 1.0f / sqrtf(var[i] + eps);
}

__global__ void bn_apply(const float* x, const float* mean, const float* inv, const float* beta, float* y, int64_t n,
                         int64_t c, bool relu) {
  for (const int64_t i : grid_stride_range(n)) {
    const int64_t ch = i % c;
    const float v = (x[i] - mean[ch]) * inv[ch] + beta[ch];
    y[i] = relu ? fmaxf(v, 0.0f) : v;
  }
}

__device__ inline float bn_dz(const float* y, const float* dy, int64_t i, bool relu) {
  return relu && !(y[i] > 0.0f) ? 0.0f : dy[i];
}

// Per channel: sum(dz) (into dbeta too) and sum(dz * xhat).
__global__ void bn_backward_sums(const float* x, const float* y, const float* dy, const float* mean, const float* inv,
                                 int64_t rows, int64_t c, bool relu, double* sum_dz, double* sum_dzx, float* dbeta) {
  __shared__ double a1[kLanes][kCols], a2[kLanes][kCols];
  const int64_t col = blockIdx.x * int64_t{kCols} + threadIdx.x;
  double s1 = 0.0, s2 = 0.0;
  if (col < c)
    for (int64_t r = threadIdx.y; r < rows; r += kLanes) {
      const int64_t i = r * c + col;
      const double dz = bn_dz(y, dy, i, relu);
      s1 += dz;
      s2 += dz * ((x[i] - mean[col]) * inv[col]);
    }
  a1[threadIdx.y][threadIdx.x] = s1;
  a2[threadIdx.y][threadIdx.x] = s2;
  __syncthreads();
  if (threadIdx.y == 0 && col < c) {
    double t1 = 0.0, t2 = 0.0;
    for (int k = 0; k < kLanes; ++k) t1 += a1[k][threadIdx.x], t2 += a2[k][threadIdx.x];
    sum_dz[col] = t1;
    sum_dzx[col] = t2;
    dbeta[col] += static_cast<float>(t1);
  }
}

__global__ void bn_backward_dx(const float* x, const float* y, const float* dy, const float* mean, const float* inv,
                               const double* sum_dz, const double* sum_dzx, int64_t n, int64_t c, int64_t rows,
                               bool relu, bool training, float* dx) {
  for (const int64_t i : grid_stride_range(n)) {
    const int64_t ch = i % c;
    const float dz = bn_dz(y, dy, i, relu);
    if (!training) {
      dx[i] = dz * inv[ch];
      continue;
    }
    // In double, as the CPU layer: the means cancel most of dz.
    const double m1 = static_cast<double>(sum_dz[ch]) / rows;
    const double m2 = static_cast<double>(sum_dzx[ch]) / rows;
    const double xhat = (static_cast<double>(x[i]) - mean[ch]) * inv[ch];
    dx[i] = static_cast<float>(inv[ch] * (dz - m1 - xhat * m2));
  }
}

struct BnGpuScratch final : GpuScratch {
  DeviceTensor mean, var, inv;
  DeviceBuffer sum_dz, sum_dzx;  // double per channel
  bool training = false;
  bool has_forward = false;
};

class GpuBatchNorm final : public GpuLayer {
 public:
  explicit GpuBatchNorm(const BatchNorm& cpu) : GpuLayer(cpu), bn_(cpu) {}

  std::unique_ptr<GpuScratch> make_scratch() const override { return std::make_unique<BnGpuScratch>(); }

  void forward(GpuContext& ctx, const DeviceParams& params, const DeviceTensor& x, DeviceTensor& y,
               GpuScratch* scratch, const ForwardContext& fwd) const override {
    auto& s = scratch_of(scratch);
    output_shape(x.shape);  // the CPU layer's validation and messages
    const int64_t c = x.shape.back(), rows = x.size() / c;
    const BatchNormConfig& cfg = bn_.config();
    for (DeviceTensor* t : {&s.mean, &s.var, &s.inv}) t->resize({c});
    s.sum_dz.reserve(static_cast<size_t>(c) * sizeof(double));
    s.sum_dzx.reserve(static_cast<size_t>(c) * sizeof(double));
    cudaStream_t st = ctx.stream();
    if (fwd.training) {
      bn_batch_stats<<<static_cast<unsigned>((c + kCols - 1) / kCols), dim3(kCols, kLanes), 0, st>>>(
          x.ptr(), rows, c, cfg.epsilon, s.mean.ptr(), s.var.ptr(), s.inv.ptr());
      TG_CUDA_CHECK_LAUNCH();
    } else {
      if (!fwd.state) fail("an evaluation forward needs the model state (ForwardContext::state)");
      const StateSet& state = *fwd.state;
      if (bn_.moving_variance_index() >= state.size()) fail("evaluation before create_state");
      const Tensor& mm = state.vars[bn_.moving_mean_index()].value;
      const Tensor& mv = state.vars[bn_.moving_variance_index()].value;
      if (mm.shape != Shape{c} || mv.shape != Shape{c})
        fail("moving statistics " + shape_string(mm.shape) + " do not fit input " + shape_string(x.shape));
      // Pageable host memory: the copies finish before upload returns.
      s.mean.upload(mm, st);
      s.var.upload(mv, st);
      bn_inv<<<blocks_for(c), kThreads, 0, st>>>(s.var.ptr(), s.inv.ptr(), c, cfg.epsilon);
      TG_CUDA_CHECK_LAUNCH();
    }
    s.training = fwd.training;
    s.has_forward = true;
    y.resize(x.shape);
    if (x.size() == 0) return;
    bn_apply<<<blocks_for(x.size()), kThreads, 0, st>>>(x.ptr(), s.mean.ptr(), s.inv.ptr(),
                                                        params.at(bn_.beta_index()).ptr(), y.ptr(), x.size(), c,
                                                        cfg.relu);
    TG_CUDA_CHECK_LAUNCH();
  }

  void backward(GpuContext& ctx, const DeviceParams&, const DeviceTensor& x, const DeviceTensor& y,
                const DeviceTensor& dy, DeviceTensor* dx, DeviceGrads& grads, GpuScratch* scratch) const override {
    auto& s = scratch_of(scratch);
    if (dy.shape != x.shape || y.shape != x.shape)
      fail("dy " + shape_string(dy.shape) + " and y " + shape_string(y.shape) + " must have the input's shape " +
           shape_string(x.shape));
    if (!s.has_forward || s.mean.shape != Shape{x.shape.back()}) fail("backward without a forward on this scratch");
    const int64_t c = x.shape.back(), rows = x.size() / c;
    const bool relu = bn_.config().relu;
    cudaStream_t st = ctx.stream();
    bn_backward_sums<<<static_cast<unsigned>((c + kCols - 1) / kCols), dim3(kCols, kLanes), 0, st>>>(
        x.ptr(), y.ptr(), dy.ptr(), s.mean.ptr(), s.inv.ptr(), rows, c, relu, s.sum_dz.as<double>(), s.sum_dzx.as<double>(),
        grads.at(bn_.beta_index()).ptr());
    TG_CUDA_CHECK_LAUNCH();
    if (!dx) return;
    dx->resize(x.shape);
    if (x.size() == 0) return;
    bn_backward_dx<<<blocks_for(x.size()), kThreads, 0, st>>>(x.ptr(), y.ptr(), dy.ptr(), s.mean.ptr(), s.inv.ptr(),
                                                              s.sum_dz.as<double>(), s.sum_dzx.as<double>(), x.size(), c, rows,
                                                              relu, s.training, dx->ptr());
    TG_CUDA_CHECK_LAUNCH();
  }

  void fold_state(GpuContext& ctx, GpuScratch* scratch, StateSet& state) const override {
    auto& s = scratch_of(scratch);
    if (!s.has_forward || !s.training) fail("fold_state needs a training forward on this scratch");
    Tensor mean, var;
    s.mean.download(mean, ctx.stream());
    s.var.download(var, ctx.stream());
    ctx.synchronize();
    bn_.fold(mean.data, var.data, state);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::invalid_argument(bn_.name() + " (GPU): " + what);
  }
  BnGpuScratch& scratch_of(GpuScratch* scratch) const {
    auto* s = dynamic_cast<BnGpuScratch*>(scratch);
    if (!s) fail("needs the scratch from its own make_scratch()");
    return *s;
  }

  const BatchNorm& bn_;
};

}  // namespace

std::unique_ptr<GpuLayer> make_gpu_batch_norm(const BatchNorm& cpu) { return std::make_unique<GpuBatchNorm>(cpu); }

}  // namespace terngrad::train::cuda
