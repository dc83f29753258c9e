// Element-level TernGrad arithmetic shared verbatim by the CPU and CUDA paths.
//
// Bit-exactness between CPU and GPU rests on three rules kept here:
//  1. Statistics are summed in float64 in one canonical order (chunks of
//     kStatsChunk elements, kStatsLanes strided lanes, a fixed butterfly),
//     which a CUDA warp reproduces with shuffles. x*x of a float is exact in
//     double, so fused or unfused multiply-adds give the same sums.
//  2. The scale and quantizer constants are computed once by these functions
//     with explicit IEEE operations (no contraction: see quantize/CMakeLists.txt).
//  3. Element i draws its random bits from a counter-based stream under key
//     seed (i counted in the whole tensor when a payload holds a slice):
//     version 1, word (i % 4) of Philox4x32-10 at counter (i / 4, step,
//     tensor id), 24 bits used; version 2, 16-bit half (i % 8) of
//     Philox4x32-7 at counter (i / 8, step, tensor id). Either way a 24-bit
//     integer is compared against p * 2^24 in float32 (RandomStream below).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "terngrad/quantize/philox.h"

namespace terngrad::quantize {

inline constexpr uint64_t kStatsChunk = 4096;  // elements per first-level partial
inline constexpr int kStatsLanes = 32;         // strided lanes inside a chunk (one warp)
inline constexpr uint32_t kAbsMask = 0x7FFFFFFFu;
inline constexpr uint32_t kExpAllOnes = 0x7F800000u;  // |bits| >= this: Inf or NaN

TG_HOST_DEVICE uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}
TG_HOST_DEVICE float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// Mean, population standard deviation and max|x| of one tensor.
struct TensorStats {
  uint64_t count = 0;
  double mean = 0.0;
  double stddev = 0.0;
  float max_abs = 0.0f;
};

// Folds lanes[0..32) into lanes[0] by the canonical butterfly
// (offsets 16, 8, 4, 2, 1), the order __shfl_down_sync produces.
TG_HOST_DEVICE double butterfly_sum32(double* lanes) {
  for (int offset = kStatsLanes / 2; offset > 0; offset /= 2)
    for (int l = 0; l < offset; ++l) lanes[l] += lanes[l + offset];
  return lanes[0];
}

// Statistics from the canonical sums. max_abs_bits is the largest |x| as an
// IEEE bit pattern (the max of bit patterns equals the bit pattern of the max).
TG_HOST_DEVICE TensorStats stats_from_sums(uint64_t n, double sum, double sum_sq,
                                           uint32_t max_abs_bits) {
  TensorStats s;
  s.count = n;
  if (n == 0) return s;
  const double dn = static_cast<double>(n);
  s.mean = sum / dn;
  // var = E[x^2] - mean^2 with one rounding; gradients have |mean| << sigma
  // in practice, so the cancellation costs nothing measurable in float64.
  double var = fma(-s.mean, s.mean, sum_sq / dn);
  if (var < 0.0) var = 0.0;
  s.stddev = sqrt(var);
  s.max_abs = bits_float(max_abs_bits);
  return s;
}

// The per-tensor scale: s = min(max|x|, c * sigma) for c > 0, else max|x|.
// A constant tensor (sigma = 0, e.g. any single element) is not clipped to
// zero: it keeps s = max|x|, otherwise its gradient would be lost entirely.
TG_HOST_DEVICE float scale_from_stats(const TensorStats& st, float clip_factor) {
  if (st.count == 0 || !(st.max_abs > 0.0f)) return 0.0f;
  if (clip_factor > 0.0f) {
    const double clipped = static_cast<double>(clip_factor) * st.stddev;
    if (clipped < static_cast<double>(st.max_abs)) {
      const float s = static_cast<float>(clipped);
      if (s > 0.0f) return s;
    }
  }
  return st.max_abs;
}

// Constants of the stochastic rounding for one scale s. p = |x|/s is formed
// as (|x| * pre) * inv24 with inv24 = 2^24 / (s * pre); pre = 2^64 for tiny
// scales keeps inv24 finite. Only s = 0 (all-zero tensor) is special.
struct TernaryQuantizer {
  float scale = 0.0f;
  float pre = 1.0f;
  float inv24 = 0.0f;
};

TG_HOST_DEVICE TernaryQuantizer make_quantizer(float scale) {
  TernaryQuantizer q;
  q.scale = scale;
  if (scale > 0.0f) {
    q.pre = scale < 0x1p-64f ? 0x1p64f : 1.0f;
    q.inv24 = (1.0f / (scale * q.pre)) * 0x1p24f;
  }
  return q;
}

// The 2-bit code of one element given its 32-bit random word r.
// keep ~ Bernoulli(min(|x|, s) / s): compares the top 24 bits of r, exact
// integers in float32, against p * 2^24; elements at or beyond the scale
// (clipped ones) are always kept. Returns 0b01 (+s), 0b10 (-s) or 0b00.
TG_HOST_DEVICE uint32_t ternary_code(float x, const TernaryQuantizer& q, uint32_t r) {
  const float a = fminf(fabsf(x), q.scale);
  const float t = (a * q.pre) * q.inv24;
  const float u = static_cast<float>(r >> 8);
  const bool keep = a > 0.0f && (a >= q.scale || u < t);
  if (!keep) return 0u;
  return (float_bits(x) >> 31) ? 2u : 1u;
}

// Deterministic nearest rounding (EncodeParams::Rounding::kNearest): the
// stochastic rule above with the random word fixed at the midpoint, u = 2^23,
// so an element is kept iff p * 2^24 > 2^23 (p > 1/2, ties to zero) or it is
// at or beyond the scale. The rounding error of a kept element is at most
// s/2 and of a dropped one at most |x|, so |error| <= |x| elementwise: the
// compressor is contractive, which error feedback needs (the stochastic rule's
// expected squared error, |x|(s - |x|), can exceed x^2 many times over, and
// under ef() the residual then grows without bound).
inline constexpr uint32_t kNearestWord = 0x80000000u;  // r >> 8 == 2^23

TG_HOST_DEVICE uint32_t nearest_code(float x, const TernaryQuantizer& q) { return ternary_code(x, q, kNearestWord); }

// Packs elements x[0..4) of one body byte by nearest rounding; absent
// elements pass 0.0f (zero padding).
TG_HOST_DEVICE uint8_t encode_byte_nearest(float x0, float x1, float x2, float x3, const TernaryQuantizer& q) {
  return static_cast<uint8_t>(nearest_code(x0, q) | (nearest_code(x1, q) << 2) | (nearest_code(x2, q) << 4) |
                              (nearest_code(x3, q) << 6));
}

// Which random stream draws the codes; the payload header's format version
// names it (FORMAT.md). Both feed ternary_code() a word whose top 24 bits are
// the uniform integer u compared against t = p * 2^24:
//  - kPhilox10Word32 (version 1): element i takes word i % 4 of
//    Philox4x32-10 at block i / 4; u = word >> 8 (24 random bits), so
//    P(keep) = ceil(t) / 2^24: |P(keep) - p| < 2^-24.
//  - kPhilox7Half16 (version 2): element i takes 16-bit half i % 8 of
//    Philox4x32-7 at block i / 8 (word (i % 8) / 2, low half first), and
//    u = 256 h + 128, the midpoint of h's 2^-16 cell: P(keep) =
//    ceil(t / 256 - 1/2) / 2^16, so |P(keep) - p| <= 2^-17 (plus t's own
//    float rounding, below 2^-24), on either side. Eight elements per block
//    and seven rounds: 0.35 of version 1's Philox arithmetic per element.
//    Random123 found Philox4x32 Crush-resistant from 7 rounds; the codec
//    needs the marginal of each 16-bit half to be uniform, which
//    tests/quantize/stats_test.cpp's z-tests check on the codes.
enum class RandomStream : uint8_t {
  kPhilox10Word32 = 1,
  kPhilox7Half16 = 2,
};

// The word ternary_code() takes for a 16-bit half h: u = (word >> 8) = 256 h + 128.
TG_HOST_DEVICE uint32_t half_word(uint32_t h16) { return (h16 << 16) | 0x8000u; }

// The header's format version for codes drawn from `stream`, or drawn from
// nothing (nearest rounding): version 1.
TG_HOST_DEVICE constexpr uint8_t payload_version(RandomStream stream, bool nearest) {
  return nearest ? uint8_t{1} : static_cast<uint8_t>(stream);
}

// Philox key, the part of the counter fixed for one tensor, and the stream.
// block_offset: a payload holding a slice of a larger tensor that starts at
// element 4 * block_offset draws the random bits of those elements' positions
// in the whole tensor, so the slice's body equals the whole payload's bytes.
struct RngStream {
  uint64_t seed = 0;
  uint32_t step = 0;
  uint32_t tensor_id = 0;
  uint64_t block_offset = 0;
  RandomStream stream = RandomStream::kPhilox10Word32;

  // The same stream for a slice starting `bytes` body bytes further on.
  TG_HOST_DEVICE RngStream advanced(uint64_t bytes) const {
    RngStream r = *this;
    r.block_offset += bytes;
    return r;
  }
};

// The Philox block at counter (block, step, tensor id) under the seed, R rounds.
template <int R>
TG_HOST_DEVICE Philox4x32Counter stream_block(const RngStream& rng, uint64_t block) {
  const Philox4x32Counter c{{static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), rng.step,
                             rng.tensor_id}};
  const Philox4x32Key key{{static_cast<uint32_t>(rng.seed), static_cast<uint32_t>(rng.seed >> 32)}};
  return philox4x32<R>(c, key);
}

// Version 2: body byte c64 (elements 4 c64 .. 4 c64 + 3) lies in block
// w = stream_block<7>(rng, c64 / 2) and takes its words 2 (c64 % 2) and
// 2 (c64 % 2) + 1, low halves first; odd = c64 % 2. One block serves two
// bytes, which the GPU packer codes together (encode_kernels.cu).
TG_HOST_DEVICE Philox4x32Counter half16_words(const Philox4x32Counter& w, uint32_t odd) {
  const uint32_t lo = w.v[2 * odd], hi = w.v[2 * odd + 1];
  return Philox4x32Counter{{half_word(lo & 0xFFFFu), half_word(lo >> 16), half_word(hi & 0xFFFFu), half_word(hi >> 16)}};
}

// The four words ternary_code() takes for body byte k (elements 4k .. 4k+3
// of the payload, 4(k + block_offset) .. of the whole tensor).
TG_HOST_DEVICE Philox4x32Counter byte_random_words(const RngStream& rng, uint64_t k) {
  const uint64_t c64 = k + rng.block_offset;
  if (rng.stream == RandomStream::kPhilox10Word32) return stream_block<10>(rng, c64);
  return half16_words(stream_block<7>(rng, c64 >> 1), c64 & 1u);
}

// Packs elements x[0..4) of a body byte with the four words r its codes take.
TG_HOST_DEVICE uint8_t encode_byte_with(float x0, float x1, float x2, float x3, const TernaryQuantizer& q,
                                        const Philox4x32Counter& r) {
  return static_cast<uint8_t>(ternary_code(x0, q, r.v[0]) | (ternary_code(x1, q, r.v[1]) << 2) |
                              (ternary_code(x2, q, r.v[2]) << 4) |
                              (ternary_code(x3, q, r.v[3]) << 6));
}

// Packs elements x[0..4) of body byte k; absent elements (beyond n) pass 0.0f
// and so become the required zero padding.
TG_HOST_DEVICE uint8_t encode_byte(float x0, float x1, float x2, float x3,
                                   const TernaryQuantizer& q, const RngStream& rng, uint64_t k) {
  return encode_byte_with(x0, x1, x2, x3, q, byte_random_words(rng, k));
}

// Nonzero iff byte b holds the reserved code 0b11 in any position.
TG_HOST_DEVICE uint32_t invalid_code_mask(uint32_t b) { return b & (b >> 1) & 0x55u; }

// The signed count a code stands for: +1, -1 or 0 (invalid codes never get here).
TG_HOST_DEVICE int code_sign(uint32_t code) {
  return static_cast<int>(code & 1u) - static_cast<int>(code >> 1);
}

// Bits of the last body byte that lie beyond element n-1 and must be zero.
TG_HOST_DEVICE uint32_t padding_mask(uint64_t n) {
  const uint32_t used = static_cast<uint32_t>(n & 3u);
  return used == 0 ? 0u : (0xFFu << (2 * used)) & 0xFFu;
}

}  // namespace terngrad::quantize
