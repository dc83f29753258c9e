// The read-only bandwidth probe of cuda_bandwidth_probe.h.
#include <cub/block/block_reduce.cuh>

#include "cuda_bandwidth_probe.h"
#include "device_state.cuh"  // quantize/cuda: grid_for, resident_blocks, TG_CHECK_LAUNCH
#include "terngrad/device/grid_stride.cuh"

namespace terngrad::bench {

namespace {

namespace qcd = terngrad::quantize::cuda::detail;
using terngrad::device::grid_stride_range;

constexpr int kProbeBlock = 256;

// XOR of all bit patterns: cheap, order-free, and depends on every load.
__global__ void __launch_bounds__(kProbeBlock)
    read_only_reduce_kernel(const float* __restrict__ x, uint64_t n, uint32_t* sink) {
  uint32_t acc = 0;
  if (reinterpret_cast<uintptr_t>(x) % alignof(float4) == 0) {
    const uint64_t vecs = n / 4;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    for (const uint64_t v : grid_stride_range(vecs)) {
      const float4 f = x4[v];
      acc ^= __float_as_uint(f.x) ^ __float_as_uint(f.y) ^ __float_as_uint(f.z) ^
             __float_as_uint(f.w);
    }
    for (const uint64_t i : grid_stride_range(vecs * 4, n)) acc ^= __float_as_uint(x[i]);
  } else {
    for (const uint64_t i : grid_stride_range(n)) acc ^= __float_as_uint(x[i]);
  }
  using BlockXor = cub::BlockReduce<uint32_t, kProbeBlock>;
  __shared__ typename BlockXor::TempStorage tmp;
  const uint32_t block = BlockXor(tmp).Reduce(acc, [](uint32_t a, uint32_t b) { return a ^ b; });
  if (threadIdx.x == 0) atomicXor(sink, block);
}

}  // namespace

void read_only_reduce_async(const float* d_x, uint64_t n, uint32_t* d_sink, cudaStream_t stream) {
  static const int resident =
      qcd::resident_blocks(reinterpret_cast<const void*>(&read_only_reduce_kernel), kProbeBlock);
  const unsigned grid = qcd::grid_for((n + 3) / 4, kProbeBlock, resident);
  read_only_reduce_kernel<<<grid, kProbeBlock, 0, stream>>>(d_x, n, d_sink);
  TG_CHECK_LAUNCH("read_only_reduce_kernel");
}

}  // namespace terngrad::bench
