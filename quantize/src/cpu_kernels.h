// Private: the CPU kernels behind codec.h, one portable and one AVX-512
// variant each, and the threading policy shared by the codec's passes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "terngrad/quantize/ternary_math.h"

namespace terngrad::quantize::detail {

// Below this many elements a pass runs on the calling thread: an OpenMP
// fork/join costs more than the work.
inline constexpr uint64_t kParallelMinElements = uint64_t{1} << 17;

bool use_avx512();

// Runs f(b) for b in [0, blocks): on all OpenMP threads for large tensors, as
// a plain loop otherwise. The plain loop matters: even a disabled
// `omp parallel if(...)` enters libgomp and builds a one-thread team, which
// costs more than encoding a small tensor.
template <class F>
void for_each_block(uint64_t n, uint64_t blocks, F&& f) {
  if (n < kParallelMinElements || blocks < 2) {
    for (uint64_t b = 0; b < blocks; ++b) f(b);
    return;
  }
#pragma omp parallel for schedule(static)
  for (uint64_t b = 0; b < blocks; ++b) f(b);
}

// Canonical partial sums of one stats chunk (len <= kStatsChunk elements).
struct ChunkSums {
  double sum = 0.0;
  double sum_sq = 0.0;
  uint32_t max_abs_bits = 0;
};
ChunkSums chunk_sums_portable(const float* x, size_t len);
ChunkSums chunk_sums_avx512(const float* x, size_t len);

// Body bytes [k_begin, k_end) of a tensor with n elements.
void encode_bytes_portable(const float* x, uint64_t n, uint64_t k_begin, uint64_t k_end,
                           const TernaryQuantizer& q, const RngStream& rng, uint8_t* body);
void encode_bytes_avx512(const float* x, uint64_t n, uint64_t k_begin, uint64_t k_end,
                         const TernaryQuantizer& q, const RngStream& rng, uint8_t* body);

// Elements [4*k_begin, min(n, 4*k_end)) from body bytes [k_begin, k_end).
// Mode: write (out = v), accumulate (out += v).
void decode_bytes_portable(const uint8_t* body, uint64_t n, uint64_t k_begin, uint64_t k_end,
                           float scale, bool accumulate, float* out);
void decode_bytes_avx512(const uint8_t* body, uint64_t n, uint64_t k_begin, uint64_t k_end,
                         float scale, bool accumulate, float* out);

}  // namespace terngrad::quantize::detail
