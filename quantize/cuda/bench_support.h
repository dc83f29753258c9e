// Private to the project's benchmarks (bench/codec_cuda_bench.cpp): baseline
// kernels that bound what the codec kernels can reach on this device. They
// live in the library because the benchmark is plain C++ and cannot hold a
// kernel. Not installed and not part of the codec API.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace terngrad::quantize::cuda::bench_support {

// Reads d_x[0, n) exactly once (float4 loads where aligned, a grid-stride
// loop, one atomic per block) and folds the bits into *d_sink so the reads
// cannot be optimized away: the read-only bandwidth floor of a streaming pass.
void read_only_reduce_async(const float* d_x, uint64_t n, uint32_t* d_sink, cudaStream_t stream);

}  // namespace terngrad::quantize::cuda::bench_support
