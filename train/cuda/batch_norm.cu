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
#include <algorithm>
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

constexpr int kCols = 32, kLanes = 8, kMaxChunks = 256;

// The per-channel sums are split over row chunks so that every SM has work
// (GoogLeNet's first batch norm sums 64 x 112 x 112 rows of 64 channels):
// pass 1, block (bx, by) sums rows [by*chunk, (by+1)*chunk) of 32 channels
// (threadIdx.x: the channel, so a row's reads coalesce; threadIdx.y strides
// the rows), its 8 lanes combined in order, into partials[by][channel];
// pass 2 adds the chunks in order. Doubles throughout: fixed order, so a
// run repeats bit for bit.
int64_t chunks_for(int64_t rows) { return std::clamp<int64_t>((rows + 255) / 256, 1, kMaxChunks); }

// mean == nullptr: sum of x; else the sum of (x - mean)^2 (the variance's pass).
__global__ void bn_partial_sums(const float* x, int64_t rows, int64_t c, int64_t chunk, const float* mean,
                                double* partials) {
  __shared__ double acc[kLanes][kCols];
  const int64_t col = blockIdx.x * int64_t{kCols} + threadIdx.x;
  const int64_t r0 = blockIdx.y * chunk, r1 = min(rows, r0 + chunk);
  double s = 0.0;
  if (col < c) {
    const double mu = mean ? static_cast<double>(mean[col]) : 0.0;
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kLanes) {
      const double v = x[r * c + col];
      s += mean ? (v - mu) * (v - mu) : v;
    }
  }
  acc[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && col < c) {
    double t = 0.0;
    for (int k = 0; k < kLanes; ++k) t += acc[k][threadIdx.x];
    partials[blockIdx.y * c + col] = t;
  }
}

// Pass 2 of the mean: mean = sum / rows.
__global__ void bn_finish_mean(const double* partials, int64_t chunks, int64_t c, int64_t rows, float* mean) {
  for (const int64_t col : grid_stride_range(c)) {
    double t = 0.0;
    for (int64_t k = 0; k < chunks; ++k) t += partials[k * c + col];
    mean[col] = static_cast<float>(t / static_cast<double>(rows));
  }
}

// Pass 2 of the variance: var = sum / rows (biased, tf.nn.moments), inv.
__global__ void bn_finish_var(const double* partials, int64_t chunks, int64_t c, int64_t rows, float eps, float* var,
                              float* inv) {
  for (const int64_t col : grid_stride_range(c)) {
    double t = 0.0;
    for (int64_t k = 0; k < chunks; ++k) t += partials[k * c + col];
    const float v = static_cast<float>(t / static_cast<double>(rows));
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

// Pass 1 of the backward sums, per chunk of rows: sum(dz) and sum(dz * xhat).
__global__ void bn_backward_partials(const float* x, const float* y, const float* dy, const float* mean,
                                     const float* inv, int64_t rows, int64_t c, int64_t chunk, bool relu,
                                     double* p_dz, double* p_dzx) {
  __shared__ double a1[kLanes][kCols], a2[kLanes][kCols];
  const int64_t col = blockIdx.x * int64_t{kCols} + threadIdx.x;
  const int64_t r0 = blockIdx.y * chunk, r1 = min(rows, r0 + chunk);
  double s1 = 0.0, s2 = 0.0;
  if (col < c)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kLanes) {
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
    p_dz[blockIdx.y * c + col] = t1;
    p_dzx[blockIdx.y * c + col] = t2;
  }
}

// Pass 2: the chunks in order; dbeta += sum(dz).
__global__ void bn_backward_finish(const double* p_dz, const double* p_dzx, int64_t chunks, int64_t c, double* sum_dz,
                                   double* sum_dzx, float* dbeta) {
  for (const int64_t col : grid_stride_range(c)) {
    double t1 = 0.0, t2 = 0.0;
    for (int64_t k = 0; k < chunks; ++k) t1 += p_dz[k * c + col], t2 += p_dzx[k * c + col];
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
  DeviceBuffer partials;         // 2 x chunks x channels doubles
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
    s.partials.reserve(2 * static_cast<size_t>(chunks_for(rows)) * static_cast<size_t>(c) * sizeof(double));
    cudaStream_t st = ctx.stream();
    if (fwd.training) {
      const int64_t chunks = chunks_for(rows), chunk = std::max<int64_t>((rows + chunks - 1) / chunks, 1);
      const dim3 grid(static_cast<unsigned>((c + kCols - 1) / kCols), static_cast<unsigned>(chunks));
      double* partials = s.partials.as<double>();
      // Two passes, as the CPU: the mean, then the squared deviations from it.
      bn_partial_sums<<<grid, dim3(kCols, kLanes), 0, st>>>(x.ptr(), rows, c, chunk, nullptr, partials);
      TG_CUDA_CHECK_LAUNCH();
      bn_finish_mean<<<blocks_for(c), kThreads, 0, st>>>(partials, chunks, c, rows, s.mean.ptr());
      TG_CUDA_CHECK_LAUNCH();
      bn_partial_sums<<<grid, dim3(kCols, kLanes), 0, st>>>(x.ptr(), rows, c, chunk, s.mean.ptr(), partials);
      TG_CUDA_CHECK_LAUNCH();
      bn_finish_var<<<blocks_for(c), kThreads, 0, st>>>(partials, chunks, c, rows, cfg.epsilon, s.var.ptr(),
                                                        s.inv.ptr());
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
    const int64_t chunks = chunks_for(rows), chunk = std::max<int64_t>((rows + chunks - 1) / chunks, 1);
    s.partials.reserve(2 * static_cast<size_t>(chunks) * static_cast<size_t>(c) * sizeof(double));
    double* p_dz = s.partials.as<double>();
    double* p_dzx = p_dz + chunks * c;
    bn_backward_partials<<<dim3(static_cast<unsigned>((c + kCols - 1) / kCols), static_cast<unsigned>(chunks)),
                           dim3(kCols, kLanes), 0, st>>>(x.ptr(), y.ptr(), dy.ptr(), s.mean.ptr(), s.inv.ptr(), rows,
                                                         c, chunk, relu, p_dz, p_dzx);
    TG_CUDA_CHECK_LAUNCH();
    bn_backward_finish<<<blocks_for(c), kThreads, 0, st>>>(p_dz, p_dzx, chunks, c, s.sum_dz.as<double>(),
                                                           s.sum_dzx.as<double>(), grads.at(bn_.beta_index()).ptr());
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
