// LocalResponseNorm on the GPU, the CPU layer (train/layers/lrn.cpp) its
// reference. An own NHWC kernel rather than cuDNN's LRN: cuDNN divides alpha
// by the window size and works on NCHW, TF (and the CPU layer) does not, and
// the channel window of an NHWC pixel is contiguous, so one thread per
// element reads 2r+1 neighbours from the same cache lines. The sums run in
// the CPU's order (channel c-r up to c+r; the CPU's zero padding adds exactly
// nothing), so results differ from the CPU only by rounding (FMA contraction
// on either side, pow/sqrt ulps).
#include <algorithm>
#include <limits>
#include <stdexcept>

#include "gpu_layers.h"
#include "terngrad/device/grid_stride.cuh"
#include "terngrad/train/cuda/errors.h"
#include "kernels.h"

namespace terngrad::train::cuda {

using terngrad::device::grid_stride_range;

using detail::blocks_for;
using detail::kThreads;

namespace {

struct LrnParams {
  int64_t total, c, r;
  float bias, alpha, beta;
};

// scale^-beta as the CPU computes it (two square roots for beta = 0.75).
__device__ float pow_neg_beta(float scale, float beta) {
  if (beta == 0.75f) {
    const float r = sqrtf(scale);
    return 1.0f / (r * sqrtf(r));
  }
  if (beta == 0.5f) return 1.0f / sqrtf(scale);
  return powf(scale, -beta);
}

// I: the index width, int32_t where the tensor has fewer than 2^31 elements
// (a 64-bit integer remainder is a long instruction sequence on the GPU).
template <class I>
__global__ void lrn_forward(const float* x, float* y, float* scale, LrnParams p) {
  const I channels = static_cast<I>(p.c), radius = static_cast<I>(p.r);
  for (const int64_t i64 : grid_stride_range(p.total)) {
    const I i = static_cast<I>(i64);
    const I ch = i % channels, pixel = i - ch;
    const I c0 = ch - radius > 0 ? ch - radius : 0, c1 = ch + radius < channels - 1 ? ch + radius : channels - 1;
    float sum = 0.0f;
    for (I k = c0; k <= c1; ++k) {
      const float v = x[pixel + k];
      sum += v * v;
    }
    const float s = p.bias + p.alpha * sum;
    scale[i] = s;
    y[i] = x[i] * pow_neg_beta(s, p.beta);
  }
}

// t = dy * x * scale^(-beta-1), the per-channel term of the window sum.
__global__ void lrn_backward_terms(const float* x, const float* dy, const float* scale, float* t, LrnParams p) {
  for (const int64_t i : grid_stride_range(p.total))
    t[i] = dy[i] * x[i] * pow_neg_beta(scale[i], p.beta) / scale[i];
}

// dx[k] = dy[k] * scale[k]^-beta - 2 alpha beta x[k] * sum_{|c-k|<=r} t[c].
template <class I>
__global__ void lrn_backward(const float* x, const float* dy, const float* scale, const float* t, float* dx,
                             LrnParams p) {
  const float coef = 2.0f * p.alpha * p.beta;
  const I channels = static_cast<I>(p.c), radius = static_cast<I>(p.r);
  for (const int64_t i64 : grid_stride_range(p.total)) {
    const I i = static_cast<I>(i64);
    const I ch = i % channels, pixel = i - ch;
    const I c0 = ch - radius > 0 ? ch - radius : 0, c1 = ch + radius < channels - 1 ? ch + radius : channels - 1;
    float sum = 0.0f;
    for (I k = c0; k <= c1; ++k) sum += t[pixel + k];
    dx[i] = dy[i] * pow_neg_beta(scale[i], p.beta) - coef * x[i] * sum;
  }
}

struct LrnGpuScratch final : GpuScratch {
  DeviceBuffer scale, t;
};

class GpuLrn final : public GpuLayer {
 public:
  explicit GpuLrn(const LocalResponseNorm& cpu) : GpuLayer(cpu), lrn_(cpu) {}

  std::unique_ptr<GpuScratch> make_scratch() const override { return std::make_unique<LrnGpuScratch>(); }

  void forward(GpuContext& ctx, const DeviceParams&, const DeviceTensor& x, DeviceTensor& y,
               GpuScratch* scratch, const ForwardContext&) const override {
    auto& s = scratch_of(scratch);
    y.resize(output_shape(x.shape));
    s.scale.reserve(static_cast<size_t>(x.size()) * sizeof(float));
    if (x.size() == 0) return;
    if (fits_32_bits(x))
      lrn_forward<int32_t><<<blocks_for(x.size()), kThreads, 0, ctx.stream()>>>(x.ptr(), y.ptr(), s.scale.as<float>(),
                                                                             params(x));
    else
      lrn_forward<int64_t><<<blocks_for(x.size()), kThreads, 0, ctx.stream()>>>(x.ptr(), y.ptr(), s.scale.as<float>(),
                                                                             params(x));
    TG_CUDA_CHECK_LAUNCH();
  }

  void backward(GpuContext& ctx, const DeviceParams&, const DeviceTensor& x, const DeviceTensor&,
                const DeviceTensor& dy, DeviceTensor* dx, DeviceGrads&, GpuScratch* scratch) const override {
    auto& s = scratch_of(scratch);
    if (dy.shape != x.shape)
      throw std::invalid_argument(lrn_.name() + " (GPU): dy has shape " + shape_string(dy.shape) + ", expected " +
                                  shape_string(x.shape));
    if (!dx) return;
    if (s.scale.capacity() < static_cast<size_t>(x.size()) * sizeof(float))
      throw std::invalid_argument(lrn_.name() + " (GPU): backward without a forward on this scratch");
    dx->resize(x.shape);
    s.t.reserve(static_cast<size_t>(x.size()) * sizeof(float));
    if (x.size() == 0) return;
    const LrnParams p = params(x);
    lrn_backward_terms<<<blocks_for(x.size()), kThreads, 0, ctx.stream()>>>(x.ptr(), dy.ptr(), s.scale.as<float>(),
                                                                       s.t.as<float>(), p);
    TG_CUDA_CHECK_LAUNCH();
    if (fits_32_bits(x))
      lrn_backward<int32_t><<<blocks_for(x.size()), kThreads, 0, ctx.stream()>>>(
          x.ptr(), dy.ptr(), s.scale.as<float>(), s.t.as<float>(), dx->ptr(), p);
    else
      lrn_backward<int64_t><<<blocks_for(x.size()), kThreads, 0, ctx.stream()>>>(
          x.ptr(), dy.ptr(), s.scale.as<float>(), s.t.as<float>(), dx->ptr(), p);
    TG_CUDA_CHECK_LAUNCH();
  }

 private:
  LrnGpuScratch& scratch_of(GpuScratch* scratch) const {
    auto* s = dynamic_cast<LrnGpuScratch*>(scratch);
    if (!s) throw std::invalid_argument(lrn_.name() + " (GPU): needs the scratch from its own make_scratch()");
    return *s;
  }

  static bool fits_32_bits(const DeviceTensor& x) { return x.size() <= std::numeric_limits<int32_t>::max(); }

  LrnParams params(const DeviceTensor& x) const {
    output_shape(x.shape);  // [N, H, W, C] check with the CPU layer's message
    const auto& c = lrn_.config();
    return {x.size(), x.shape[3], c.depth_radius, c.bias, c.alpha, c.beta};
  }

  const LocalResponseNorm& lrn_;
};

}  // namespace

std::unique_ptr<GpuLayer> make_gpu_lrn(const LocalResponseNorm& cpu) { return std::make_unique<GpuLrn>(cpu); }

}  // namespace terngrad::train::cuda
