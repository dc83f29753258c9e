// Baseline kernels for the CUDA codec benchmark (bench/codec_cuda_bench.cpp):
// they bound what the codec kernels can reach on this device. Built into the
// bench-only library terngrad_cuda_bench_kernels (the benchmark is plain C++
// and cannot hold a kernel); not part of any installed library.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace terngrad::bench {

// Reads d_x[0, n) exactly once (float4 loads where aligned, a grid-stride
// loop, one atomic per block) and folds the bits into *d_sink so the reads
// cannot be optimized away: the read-only bandwidth floor of a streaming pass.
// The grid is sized as the codec sizes its own (quantize/cuda's grid_for), so
// the floor and the codec run the same number of blocks. Launch errors throw
// like the codec's (terngrad::quantize::CodecError).
void read_only_reduce_async(const float* d_x, uint64_t n, uint32_t* d_sink, cudaStream_t stream);

}  // namespace terngrad::bench
