#include <algorithm>

#include "kernels.h"
#include "terngrad/device/grid_stride.cuh"
#include "terngrad/train/cuda/errors.h"

namespace terngrad::train::cuda::detail {

using terngrad::device::grid_stride_range;

unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, 65535 * 8));
}

namespace {

__global__ void add_bias_act_kernel(float* y, const float* b, int64_t n, int64_t f, bool relu) {
  for (const int64_t i : grid_stride_range(n)) {
    const float v = y[i] + b[i % f];
    y[i] = relu ? fmaxf(v, 0.0f) : v;
  }
}

__global__ void relu_grad_kernel(float* out, const float* y, const float* dy, int64_t n) {
  for (const int64_t i : grid_stride_range(n))
    out[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

__global__ void relu_forward_kernel(float* out, const float* x, int64_t n) {
  for (const int64_t i : grid_stride_range(n))
    out[i] = fmaxf(x[i], 0.0f);
}

// Column sums in two passes. Pass 1: block (bx, by) sums rows
// [by*chunk, (by+1)*chunk) of 32 columns; threadIdx.x picks the column (the
// reads of a row are coalesced), threadIdx.y strides the rows; the 8 partial
// sums per column are combined in shared memory in a fixed order.
constexpr int kColsPerBlock = 32, kRowLanes = 8, kMaxChunks = 256;

int64_t chunks_for(int64_t rows) { return std::clamp<int64_t>((rows + 255) / 256, 1, kMaxChunks); }

__global__ void bias_grad_pass1(float* partials, const float* dz, int64_t rows, int64_t f, int64_t chunk) {
  __shared__ float acc[kRowLanes][kColsPerBlock];
  const int64_t col = blockIdx.x * int64_t{kColsPerBlock} + threadIdx.x;
  const int64_t r0 = blockIdx.y * chunk, r1 = min(rows, r0 + chunk);
  float s = 0.0f;
  if (col < f)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kRowLanes) s += dz[r * f + col];
  acc[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && col < f) {
    float t = 0.0f;
    for (int k = 0; k < kRowLanes; ++k) t += acc[k][threadIdx.x];
    partials[blockIdx.y * f + col] = t;
  }
}

__global__ void bias_grad_pass2(float* db, const float* partials, int64_t chunks, int64_t f) {
  const int64_t col = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (col >= f) return;
  double t = 0.0;
  for (int64_t c = 0; c < chunks; ++c) t += partials[c * f + col];
  db[col] += static_cast<float>(t);
}

// 32x32 tiles through shared memory so both the reads and the writes are
// coalesced; the +1 column avoids shared-memory bank conflicts.
__global__ void transpose_kernel(float* out, const float* in, int64_t rows, int64_t cols, bool accumulate) {
  __shared__ float tile[32][33];
  const int64_t c0 = blockIdx.x * int64_t{32}, r0 = blockIdx.y * int64_t{32};
  for (int k = threadIdx.y; k < 32; k += blockDim.y) {
    const int64_t r = r0 + k, c = c0 + threadIdx.x;
    if (r < rows && c < cols) tile[k][threadIdx.x] = in[r * cols + c];
  }
  __syncthreads();
  for (int k = threadIdx.y; k < 32; k += blockDim.y) {
    const int64_t c = c0 + k, r = r0 + threadIdx.x;
    if (r < rows && c < cols) {
      const float v = tile[threadIdx.x][k];
      out[c * rows + r] = accumulate ? out[c * rows + r] + v : v;
    }
  }
}

__global__ void add_into_kernel(float* acc, const float* x, int64_t n) {
  for (const int64_t i : grid_stride_range(n)) acc[i] += x[i];
}

}  // namespace

void add_into(float* acc, const float* x, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  add_into_kernel<<<blocks_for(n), kThreads, 0, s>>>(acc, x, n);
  TG_CUDA_CHECK_LAUNCH();
}

void add_bias_act(float* y, const float* b, int64_t rows, int64_t f, bool relu, cudaStream_t s) {
  const int64_t n = rows * f;
  if (n == 0) return;
  add_bias_act_kernel<<<blocks_for(n), kThreads, 0, s>>>(y, b, n, f, relu);
  TG_CUDA_CHECK_LAUNCH();
}

void relu_grad(float* out, const float* y, const float* dy, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  relu_grad_kernel<<<blocks_for(n), kThreads, 0, s>>>(out, y, dy, n);
  TG_CUDA_CHECK_LAUNCH();
}

void relu_forward(float* out, const float* x, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  relu_forward_kernel<<<blocks_for(n), kThreads, 0, s>>>(out, x, n);
  TG_CUDA_CHECK_LAUNCH();
}

int64_t bias_grad_partial_floats(int64_t rows, int64_t f) { return chunks_for(rows) * f; }

void bias_grad(float* db, const float* dz, int64_t rows, int64_t f, float* partials, cudaStream_t s) {
  if (f == 0) return;
  const int64_t chunks = chunks_for(rows), chunk = (rows + chunks - 1) / chunks;
  const dim3 grid(static_cast<unsigned>((f + kColsPerBlock - 1) / kColsPerBlock), static_cast<unsigned>(chunks));
  bias_grad_pass1<<<grid, dim3(kColsPerBlock, kRowLanes), 0, s>>>(partials, dz, rows, f, std::max<int64_t>(chunk, 1));
  TG_CUDA_CHECK_LAUNCH();
  bias_grad_pass2<<<static_cast<unsigned>((f + kThreads - 1) / kThreads), kThreads, 0, s>>>(db, partials, chunks, f);
  TG_CUDA_CHECK_LAUNCH();
}

void transpose(float* out, const float* in, int64_t rows, int64_t cols, bool accumulate, cudaStream_t s) {
  if (rows == 0 || cols == 0) return;
  const dim3 grid(static_cast<unsigned>((cols + 31) / 32), static_cast<unsigned>((rows + 31) / 32));
  transpose_kernel<<<grid, dim3(32, 8), 0, s>>>(out, in, rows, cols, accumulate);
  TG_CUDA_CHECK_LAUNCH();
}

namespace {

// out[b, y, x, c] = in[b, y + dy, x + dx, c] where that lies inside in's
// [ih, iw] plane, else 0 (one thread per output element).
__global__ void shifted_copy_kernel(float* out, int64_t oh, int64_t ow, const float* in, int64_t ih, int64_t iw,
                                    int64_t total, int64_t c, int64_t dy, int64_t dx) {
  for (const int64_t i : grid_stride_range(total)) {
    const int64_t ch = i % c, x = (i / c) % ow, y = (i / c / ow) % oh, b = i / c / ow / oh;
    const int64_t sy = y + dy, sx = x + dx;
    out[i] = sy >= 0 && sy < ih && sx >= 0 && sx < iw ? in[((b * ih + sy) * iw + sx) * c + ch] : 0.0f;
  }
}

void shifted_copy(float* out, int64_t oh, int64_t ow, const float* in, int64_t ih, int64_t iw, int64_t n, int64_t c,
                  int64_t dy, int64_t dx, cudaStream_t s) {
  const int64_t total = n * oh * ow * c;
  if (total == 0) return;
  shifted_copy_kernel<<<blocks_for(total), kThreads, 0, s>>>(out, oh, ow, in, ih, iw, total, c, dy, dx);
  TG_CUDA_CHECK_LAUNCH();
}

}  // namespace

void pad_nhwc(float* out, const float* in, int64_t n, int64_t h, int64_t w, int64_t c, int64_t top, int64_t left,
              int64_t out_h, int64_t out_w, cudaStream_t s) {
  shifted_copy(out, out_h, out_w, in, h, w, n, c, -top, -left, s);
}

void crop_nhwc(float* out, const float* in, int64_t n, int64_t h, int64_t w, int64_t c, int64_t top, int64_t left,
               int64_t in_h, int64_t in_w, cudaStream_t s) {
  shifted_copy(out, h, w, in, in_h, in_w, n, c, top, left, s);
}

}  // namespace terngrad::train::cuda::detail
