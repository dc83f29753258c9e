// One thread per row (C is 10 for all three nets: a row is a few cache
// lines), then one block sums the row losses in a fixed order. Accumulation
// in double, as in the CPU loss.
#include <stdexcept>

#include "terngrad/train/cuda/errors.h"
#include "terngrad/train/cuda/loss.h"

namespace terngrad::train::cuda {

namespace {

__global__ void softmax_xent_rows(const float* logits, const int32_t* labels, float* dlogits, float* row_loss,
                                  int64_t n, int64_t c) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  const float* z = logits + i * c;
  float* g = dlogits + i * c;
  float m = z[0];
  for (int64_t j = 1; j < c; ++j) m = fmaxf(m, z[j]);
  double sum = 0.0;
  for (int64_t j = 0; j < c; ++j) {
    const float e = expf(z[j] - m);
    g[j] = e;
    sum += e;
  }
  const int32_t label = labels[i];
  row_loss[i] = static_cast<float>(log(sum) - (static_cast<double>(z[label]) - m));
  const double inv_n = 1.0 / static_cast<double>(n);
  const double scale = inv_n / sum;
  for (int64_t j = 0; j < c; ++j) g[j] = static_cast<float>(g[j] * scale);
  g[label] -= static_cast<float>(inv_n);
}

// One block of 256 threads: strided partial sums, then a fixed-order tree.
__global__ void mean_of(const float* v, int64_t n, float* out) {
  __shared__ double part[256];
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += v[i];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int w = 128; w > 0; w >>= 1) {
    if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = n > 0 ? static_cast<float>(part[0] / static_cast<double>(n)) : 0.0f;
}

}  // namespace

void softmax_cross_entropy(GpuContext& ctx, const DeviceTensor& logits, const int32_t* d_labels,
                           DeviceTensor& dlogits, float* d_loss, DeviceBuffer& row_loss) {
  if (logits.shape.size() != 2)
    throw std::invalid_argument("softmax_cross_entropy (GPU): logits " + shape_string(logits.shape) + " are not [N, C]");
  const int64_t n = logits.shape[0], c = logits.shape[1];
  dlogits.resize(logits.shape);
  row_loss.reserve(static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(float));
  if (n > 0) {
    softmax_xent_rows<<<static_cast<unsigned>((n + 127) / 128), 128, 0, ctx.stream()>>>(
        logits.ptr(), d_labels, dlogits.ptr(), row_loss.as<float>(), n, c);
    TG_CUDA_CHECK_LAUNCH();
  }
  mean_of<<<1, 256, 0, ctx.stream()>>>(row_loss.as<float>(), n, d_loss);
  TG_CUDA_CHECK_LAUNCH();
}

}  // namespace terngrad::train::cuda
