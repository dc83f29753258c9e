// Private: the pieces of the sparse codecs (topk_codec.cpp, randomk_codec.cpp)
// that the tests check on their own: k per slice, top-k selection (SIMD and
// scalar passes), Elias-Fano index coding and random-k positions. Formats:
// comm/codecs/FORMATS_SPARSE.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace terngrad::comm::detail {

// k = min(count, max(1, ceil(double(ratio) * double(count)))); 0 for count 0.
uint64_t sparse_k(uint64_t count, float ratio);

// ---- top-k selection -------------------------------------------------------

// The selection order: element i ranks above element j if |x_i| > |x_j|, or
// |x_i| == |x_j| and i < j (-0 == +0, and -a == a). The k chosen are the
// first k in that order. Magnitudes compare as the float's bits with the
// sign cleared, which orders finite floats exactly as their magnitudes.
//
// Writes the k chosen indices of x (relative to x, ascending) into idx.
// x must be finite and hold fewer than 2^32 elements (std::invalid_argument
// otherwise); 1 <= k <= x.size(), or k == 0 for an empty x.
// simd: whether the candidate pass may use the SIMD level in use
// (quantize::cpu_simd_level()); false runs the scalar pass. Both give the
// same indices (the selection is exact, only the speed differs).
void topk_select(std::span<const float> x, uint64_t k, std::vector<uint32_t>& idx, bool simd = true);

// The candidate pass alone, for tests: appends to out, in index order, the
// key (|x_i| bits << 32) | (0xFFFFFFFF - i) of every i with |x_i| bits >= t,
// and returns the largest |x_i| bits seen (>= 0x7F800000: a NaN or Inf).
uint32_t topk_collect(std::span<const float> x, uint32_t t, std::vector<uint64_t>& out, bool simd);

// ---- Elias-Fano ------------------------------------------------------------

// Low bits per index: floor(log2(count / k)) for k >= 1 (0 when k == count).
uint32_t elias_fano_low_bits(uint64_t count, uint64_t k);
// Bits of the high (unary) part: k + ((count - 1) >> L) for k >= 1, else 0.
uint64_t elias_fano_high_bits(uint64_t count, uint64_t k);
// Bytes of both parts: ceil(k * L / 8) + ceil(high_bits / 8).
uint64_t elias_fano_bytes(uint64_t count, uint64_t k);

// Writes strictly increasing indices (each < count; idx.size() == k) into
// out (elias_fano_bytes(count, k) bytes, all of them written).
void elias_fano_encode(std::span<const uint32_t> idx, uint64_t count, uint8_t* out);
// Reads k indices back into idx (resized to k). Returns "" on success, else
// what is wrong (a one won't fit, too few / many ones, indices not strictly
// increasing or >= count, nonzero padding bits); idx is then unspecified.
std::string elias_fano_decode(const uint8_t* in, uint64_t count, uint64_t k, std::vector<uint64_t>& idx);

// ---- random-k --------------------------------------------------------------

// The k distinct positions (ascending, relative to the slice) random-k sends
// for a slice [begin, begin + count) of variable tensor_id at step: a pure
// function of (step, tensor_id, begin, count, k), the same on every worker.
void randomk_positions(uint32_t step, uint32_t tensor_id, uint64_t begin, uint64_t count, uint64_t k,
                       std::vector<uint64_t>& pos);

}  // namespace terngrad::comm::detail
