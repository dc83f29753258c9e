// Element-wise and reduction kernels shared by the GPU layers (private to
// train_cuda). Each mirrors a loop of a CPU layer; the layer tests compare
// the layers that use them against the CPU layers.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace terngrad::train::cuda::detail {

// Launch shape of the grid-stride kernels: kThreads per block, enough blocks
// for one element per thread up to a cap (the loop covers the rest).
inline constexpr int kThreads = 256;
unsigned blocks_for(int64_t n);

// y[r, f] = y[r, f] + b[f], then max(., 0) when relu (Conv2D / Dense forward tail).
void add_bias_act(float* y, const float* b, int64_t rows, int64_t f, bool relu, cudaStream_t s);

// out[i] = y[i] > 0 ? dy[i] : 0 (TF's ReluGrad; also the fused-ReLU mask).
void relu_grad(float* out, const float* y, const float* dy, int64_t n, cudaStream_t s);

// acc[i] += x[i] (BranchConcat sums its branches' input gradients).
void add_into(float* acc, const float* x, int64_t n, cudaStream_t s);

// out[i] = max(x[i], 0).
void relu_forward(float* out, const float* x, int64_t n, cudaStream_t s);

// db[f] += sum over rows of dz[r, f], deterministic (fixed reduction order:
// per-chunk partials, then a fixed-order sum in double). `partials` holds at
// least bias_grad_partial_floats(rows, f) floats.
int64_t bias_grad_partial_floats(int64_t rows, int64_t f);
void bias_grad(float* db, const float* dz, int64_t rows, int64_t f, float* partials, cudaStream_t s);

// out[c, r] = in[r, c] (+ out[c, r] when accumulate), in is [rows, cols].
void transpose(float* out, const float* in, int64_t rows, int64_t cols, bool accumulate, cudaStream_t s);

// Explicit zero padding of an NHWC tensor and its inverse (Conv2D's
// asymmetric SAME padding, which cuDNN cannot express):
// pad_nhwc: out [n, out_h, out_w, c] = in [n, h, w, c] placed at (top, left), zeros around;
// crop_nhwc: out [n, h, w, c] = the window of in [n, in_h, in_w, c] at (top, left).
void pad_nhwc(float* out, const float* in, int64_t n, int64_t h, int64_t w, int64_t c, int64_t top, int64_t left,
              int64_t out_h, int64_t out_w, cudaStream_t s);
void crop_nhwc(float* out, const float* in, int64_t n, int64_t h, int64_t w, int64_t c, int64_t top, int64_t left,
               int64_t in_h, int64_t in_w, cudaStream_t s);

}  // namespace terngrad::train::cuda::detail
