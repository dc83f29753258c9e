// Dropout on the GPU, the CPU Dropout (train/layers/dropout.cpp) its
// reference. The mask is the CPU layer's counter-based hash
// (terngrad/train/dropout_mask.h) evaluated per element, with the CPU layer's
// salt and threshold, and the kept values are x * (1 / keep_prob) with the
// scale rounded on the host as the CPU rounds it: one float multiply, nothing
// to contract, so y and dx equal the CPU's bit for bit for the same
// ForwardContext (the trainers pass each worker the CPU's dropout seed).
#include <stdexcept>

#include "gpu_layers.h"
#include "kernels.h"
#include "terngrad/device/grid_stride.cuh"
#include "terngrad/train/cuda/errors.h"
#include "terngrad/train/dropout_mask.h"

namespace terngrad::train::cuda {

using terngrad::device::grid_stride_range;

namespace {

// out[i] = in[i] * scale where element i is kept, else 0. Forward (in = x)
// and backward (in = dy) are the same map: dropout is linear for a fixed mask.
__global__ void apply_mask(const float* in, float* out, int64_t n, uint64_t key, uint64_t threshold, float scale) {
  for (const int64_t i : grid_stride_range(n))
    out[i] = dropout_mask::kept_in(key, static_cast<uint64_t>(i), threshold) ? in[i] * scale : 0.0f;
}

struct DropoutGpuScratch final : GpuScratch {
  // What forward did, so backward applies the same mask (or none).
  bool active = false;
  uint64_t seed = 0;
};

class GpuDropout final : public GpuLayer {
 public:
  explicit GpuDropout(const Dropout& cpu) : GpuLayer(cpu), dropout_(cpu) {}

  std::unique_ptr<GpuScratch> make_scratch() const override { return std::make_unique<DropoutGpuScratch>(); }

  void forward(GpuContext& ctx, const DeviceParams&, const DeviceTensor& x, DeviceTensor& y, GpuScratch* scratch,
               const ForwardContext& fwd) const override {
    auto& s = scratch_of(scratch);
    y.resize(output_shape(x.shape));
    s.active = fwd.training && dropout_.config().keep_prob < 1.0f;
    s.seed = fwd.dropout_seed;
    run(ctx, s, x, y);
  }

  void backward(GpuContext& ctx, const DeviceParams&, const DeviceTensor& x, const DeviceTensor&,
                const DeviceTensor& dy, DeviceTensor* dx, DeviceGrads&, GpuScratch* scratch) const override {
    auto& s = scratch_of(scratch);
    if (dy.shape != x.shape)
      throw std::invalid_argument(dropout_.name() + " (GPU): dy has shape " + shape_string(dy.shape) +
                                  ", expected " + shape_string(x.shape));
    if (!dx) return;
    dx->resize(x.shape);
    run(ctx, s, dy, *dx);
  }

 private:
  // out = in through forward's mask, or a plain copy when dropout is off
  // (evaluation, keep_prob 1), as on the CPU.
  void run(GpuContext& ctx, const DropoutGpuScratch& s, const DeviceTensor& in, DeviceTensor& out) const {
    if (in.size() == 0) return;
    if (!s.active) {
      TG_CUDA_CHECK(cudaMemcpyAsync(out.ptr(), in.ptr(), static_cast<size_t>(in.size()) * sizeof(float),
                                    cudaMemcpyDeviceToDevice, ctx.stream()));
      return;
    }
    const float scale = 1.0f / dropout_.config().keep_prob;
    const uint64_t key = dropout_mask::stream_key(s.seed, dropout_.mask_salt());
    apply_mask<<<detail::blocks_for(in.size()), detail::kThreads, 0, ctx.stream()>>>(
        in.ptr(), out.ptr(), in.size(), key, dropout_.mask_threshold(), scale);
    TG_CUDA_CHECK_LAUNCH();
  }

  DropoutGpuScratch& scratch_of(GpuScratch* scratch) const {
    auto* s = dynamic_cast<DropoutGpuScratch*>(scratch);
    if (!s) throw std::invalid_argument(dropout_.name() + " (GPU): needs the scratch from its own make_scratch()");
    return *s;
  }

  const Dropout& dropout_;
};

}  // namespace

std::unique_ptr<GpuLayer> make_gpu_dropout(const Dropout& cpu) { return std::make_unique<GpuDropout>(cpu); }

}  // namespace terngrad::train::cuda
