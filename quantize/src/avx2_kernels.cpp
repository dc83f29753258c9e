// The hand-written AVX2 encode kernel (x86-64 only), both random streams
// (format version 1's Philox4x32-10 words, version 2's Philox4x32-7 halves):
// Philox in element
// order (x86_philox.h) fused with quantize and pack, on the input as it lies
// in memory. It replaces the Highway AVX2 encode, which transposes the input
// (LoadInterleaved4: a dozen shuffles per 32 elements on AVX2) and packs the
// codes lane by lane; here the keep and sign decisions leave the vector unit
// as two 8-bit masks (vmovmskps) and a bit deposit (BMI2 pdep, part of the
// AVX2 level) spreads them into codes. TG_HWY_AVX2=1 keeps the Highway encode
// for comparison (kernel_tables.cpp). It must give the bytes of the portable
// kernel; tests/quantize/simd_levels_test.cpp checks.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "cpu_kernels.h"
#include "x86_philox.h"

namespace terngrad::quantize::detail {

namespace {

struct Quantizer8 {
  __m256 scale, pre, inv24, abs_mask;
};

// ternary_code()'s u as floats: from 8 version-1 words (u = word >> 8), and
// from 8 version-2 half words (u = 256 h + 128, ternary_math.h's half_word()).
__attribute__((target("avx2,fma,bmi2"), always_inline)) inline __m256 u_of_words(__m256i words) { return _mm256_cvtepi32_ps(_mm256_srli_epi32(words, 8)); }
__attribute__((target("avx2,fma,bmi2"), always_inline)) inline __m256 u_of_halves(__m128i halves) {
  return _mm256_cvtepi32_ps(_mm256_or_si256(_mm256_slli_epi32(_mm256_cvtepu16_epi32(halves), 8), _mm256_set1_epi32(0x80)));
}

// 8 elements and their u (element order) -> the keep and sign masks.
// ternary_code()'s arithmetic: a = min(|x|, s) (vminps returns s for a NaN
// |x|, as fminf), t = (a * pre) * inv24, keep = u < t (|| a >= s).
template <bool kUnitPre, bool kClip>
__attribute__((target("avx2,fma,bmi2"), always_inline)) inline void quantize8(const float* p, __m256 u, const Quantizer8& q, uint32_t& keep, uint32_t& neg) {
  const __m256 x = _mm256_loadu_ps(p);
  const __m256 a = _mm256_min_ps(_mm256_and_ps(x, q.abs_mask), q.scale);
  const __m256 t = kUnitPre ? _mm256_mul_ps(a, q.inv24) : _mm256_mul_ps(_mm256_mul_ps(a, q.pre), q.inv24);
  __m256 k = _mm256_cmp_ps(u, t, _CMP_LT_OQ);
  if (kClip) k = _mm256_or_ps(k, _mm256_cmp_ps(a, q.scale, _CMP_GE_OQ));
  keep = static_cast<uint32_t>(_mm256_movemask_ps(k));
  neg = static_cast<uint32_t>(_mm256_movemask_ps(x));
}

// Blocks per loop iteration: 3 Philox chains of 4 (enough independent
// multiplies to cover their latency in 16 ymm registers).
constexpr int kChains = 2;
constexpr uint64_t kStepBlocks = 4 * kChains;

template <bool kUnitPre, bool kClip>
__attribute__((target("avx2,fma,bmi2"))) uint64_t encode_range(const float* x, uint64_t n, uint64_t k_begin,
                                                               uint64_t k_end, const TernaryQuantizer& tq,
                                                               const RngStream& rng, uint8_t* body) {
  const Quantizer8 q{_mm256_set1_ps(tq.scale), _mm256_set1_ps(tq.pre), _mm256_set1_ps(tq.inv24),
                     _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF))};
  x86::PhiloxSetup setup(rng.seed, rng.step, rng.tensor_id, static_cast<uint32_t>((k_begin + rng.block_offset) >> 32));
  auto simd_ok = [&](uint64_t k, uint64_t span) {
    const uint64_t counter = k + rng.block_offset;
    return k + span <= k_end && 4 * (k + span) <= n &&
           static_cast<uint32_t>(counter) <= 0xFFFFFFFFu - static_cast<uint32_t>(span - 1);
  };
  uint64_t k = k_begin;
  for (; simd_ok(k, kStepBlocks); k += kStepBlocks) {
    const uint64_t counter = k + rng.block_offset;
    if (static_cast<uint32_t>(counter >> 32) != setup.hi_word)  // past 2^32 blocks: rare
      setup = x86::PhiloxSetup(rng.seed, rng.step, rng.tensor_id, static_cast<uint32_t>(counter >> 32));
    __m256i words[2 * kChains];
    x86::philox_avx2<kChains>(setup, static_cast<uint32_t>(counter), words);
    const float* p = x + 4 * k;
    for (int line = 0; line < 3; ++line)  // 2 KiB ahead: 48 elements a step, 3 lines
      _mm_prefetch(reinterpret_cast<const char*>(p + 512 + 16 * line), _MM_HINT_T0);
    for (int v = 0; v < 2 * kChains; v += 2) {
      uint32_t k0, n0, k1, n1;
      quantize8<kUnitPre, kClip>(p + 8 * v, u_of_words(words[v]), q, k0, n0);
      quantize8<kUnitPre, kClip>(p + 8 * v + 8, u_of_words(words[v + 1]), q, k1, n1);
      const uint32_t kept = _pdep_u32(k0 | k1 << 8, 0x55555555u);
      const uint32_t bits = kept + (kept & _pdep_u32(n0 | n1 << 8, 0x55555555u));
      std::memcpy(body + k + 2 * v, &bits, 4);
    }
  }
  return k;
}

// Version 2 (RandomStream::kPhilox7Half16): kHalfChains chains of 4
// Philox4x32-7 blocks, 8 elements each. A vector's 8 words in element order
// are 16 halves in element order: its low 128 bits serve elements 0..7, its
// high 128 bits 8..15. k_begin + block_offset is even (the caller encodes an
// odd first byte on its own), so byte k's block is (k + block_offset) / 2.
constexpr int kHalfChains = 3;
constexpr uint64_t kHalfStepBytes = 8 * kHalfChains;  // 4 blocks = 32 elements = 8 bytes a chain

template <bool kUnitPre, bool kClip>
__attribute__((target("avx2,fma,bmi2"))) uint64_t encode_range_halves(const float* x, uint64_t n, uint64_t k_begin,
                                                                      uint64_t k_end, const TernaryQuantizer& tq,
                                                                      const RngStream& rng, uint8_t* body) {
  const Quantizer8 q{_mm256_set1_ps(tq.scale), _mm256_set1_ps(tq.pre), _mm256_set1_ps(tq.inv24),
                     _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF))};
  auto block_of = [&](uint64_t k) { return (k + rng.block_offset) >> 1; };
  x86::PhiloxSetup setup(rng.seed, rng.step, rng.tensor_id, static_cast<uint32_t>(block_of(k_begin) >> 32));
  uint64_t k = k_begin;
  for (; k + kHalfStepBytes <= k_end && 4 * (k + kHalfStepBytes) <= n &&
         static_cast<uint32_t>(block_of(k)) <= 0xFFFFFFFFu - static_cast<uint32_t>(kHalfStepBytes / 2 - 1);
       k += kHalfStepBytes) {
    const uint64_t block = block_of(k);
    if (static_cast<uint32_t>(block >> 32) != setup.hi_word)  // past 2^32 blocks: rare
      setup = x86::PhiloxSetup(rng.seed, rng.step, rng.tensor_id, static_cast<uint32_t>(block >> 32));
    __m256i words[2 * kHalfChains];
    x86::philox_avx2<kHalfChains, 7>(setup, static_cast<uint32_t>(block), words);
    const float* p = x + 4 * k;
    for (int line = 0; line < 6; ++line)  // 2 KiB ahead: 96 elements a step, 6 lines
      _mm_prefetch(reinterpret_cast<const char*>(p + 512 + 16 * line), _MM_HINT_T0);
    for (int v = 0; v < 2 * kHalfChains; ++v) {
      uint32_t k0, n0, k1, n1;
      quantize8<kUnitPre, kClip>(p + 16 * v, u_of_halves(_mm256_castsi256_si128(words[v])), q, k0, n0);
      quantize8<kUnitPre, kClip>(p + 16 * v + 8, u_of_halves(_mm256_extracti128_si256(words[v], 1)), q, k1, n1);
      const uint32_t kept = _pdep_u32(k0 | k1 << 8, 0x55555555u);
      const uint32_t bits = kept + (kept & _pdep_u32(n0 | n1 << 8, 0x55555555u));
      std::memcpy(body + k + 4 * v, &bits, 4);
    }
  }
  return k;
}

// Nearest rounding: quantize8 with every word kNearestWord (u = 2^23), 16
// elements (4 body bytes) a step; returns the first byte not written.
template <bool kUnitPre, bool kClip>
__attribute__((target("avx2,fma,bmi2"))) uint64_t nearest_range(const float* x, uint64_t n, uint64_t k_begin,
                                                                uint64_t k_end, const TernaryQuantizer& tq,
                                                                uint8_t* body) {
  const Quantizer8 q{_mm256_set1_ps(tq.scale), _mm256_set1_ps(tq.pre), _mm256_set1_ps(tq.inv24),
                     _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF))};
  const __m256 u = u_of_words(_mm256_set1_epi32(static_cast<int>(kNearestWord)));
  uint64_t k = k_begin;
  for (; k + 4 <= k_end && 4 * (k + 4) <= n; k += 4) {
    uint32_t k0, n0, k1, n1;
    quantize8<kUnitPre, kClip>(x + 4 * k, u, q, k0, n0);
    quantize8<kUnitPre, kClip>(x + 4 * k + 8, u, q, k1, n1);
    const uint32_t kept = _pdep_u32(k0 | k1 << 8, 0x55555555u);
    const uint32_t bits = kept + (kept & _pdep_u32(n0 | n1 << 8, 0x55555555u));
    std::memcpy(body + k, &bits, 4);
  }
  return k;
}

}  // namespace

__attribute__((target("avx2,fma,bmi2"))) void encode_bytes_nearest_avx2(const float* x, uint64_t n, uint64_t k_begin,
                                                                        uint64_t k_end, const TernaryQuantizer& q,
                                                                        uint8_t* body) {
  const uint64_t k = x86_encode_case(q, k_begin, k_end, body, [&]<bool kUnitPre, bool kClip>() {
    return nearest_range<kUnitPre, kClip>(x, n, k_begin, k_end, q, body);
  });
  encode_bytes_nearest(x, n, k, k_end, q, body);
}

__attribute__((target("avx2,fma,bmi2"))) void add_f32_avx2(const float* a, const float* b, float* out, size_t len) {
  size_t i = 0;
  for (; i + 8 <= len; i += 8) _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  for (; i < len; ++i) out[i] = a[i] + b[i];
}

// 8 elements from 16 bits of codes: lane j takes bits 2j..2j+1 (vpsrlvd), d
// is +s, -s or +0 by two compares, r = 0 - (-p + d) with -p a sign flip, as
// the portable kernel computes it.
__attribute__((target("avx2,fma,bmi2"))) void ef_residual_avx2(const float* p, const uint8_t* body, uint64_t len,
                                                                float scale, float* r) {
  const __m256i shifts = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
  const __m256i three = _mm256_set1_epi32(3), one = _mm256_set1_epi32(1), two = _mm256_set1_epi32(2);
  const __m256 pos = _mm256_set1_ps(scale), neg = _mm256_set1_ps(-scale), zero = _mm256_setzero_ps();
  const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(0x80000000u)));
  uint64_t i = 0;
  for (; i + 8 <= len; i += 8) {
    uint16_t half;
    std::memcpy(&half, body + i / 4, sizeof half);
    const __m256i c = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(half), shifts), three);
    const __m256 d = _mm256_blendv_ps(_mm256_blendv_ps(zero, pos, _mm256_castsi256_ps(_mm256_cmpeq_epi32(c, one))), neg,
                                      _mm256_castsi256_ps(_mm256_cmpeq_epi32(c, two)));
    const __m256 minus_p = _mm256_xor_ps(_mm256_loadu_ps(p + i), sign);
    _mm256_storeu_ps(r + i, _mm256_sub_ps(zero, _mm256_add_ps(minus_p, d)));
  }
  if (i < len) ef_residual_portable(p + i, body + i / 4, len - i, scale, r + i);
}

__attribute__((target("avx2,fma,bmi2"))) void encode_bytes_avx2(const float* x, uint64_t n, uint64_t k_begin,
                                                                uint64_t k_end, const TernaryQuantizer& q,
                                                                const RngStream& rng, uint8_t* body) {
  x86_encode_drawn(x, n, k_begin, k_end, q, rng, body, [&]<bool kUnitPre, bool kClip, bool kHalves>(uint64_t begin) {
    if constexpr (kHalves) return encode_range_halves<kUnitPre, kClip>(x, n, begin, k_end, q, rng, body);
    return encode_range<kUnitPre, kClip>(x, n, begin, k_end, q, rng, body);
  });
}

}  // namespace terngrad::quantize::detail
