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

// Chains of 4 Philox blocks per loop iteration (enough independent
// multiplies to cover their latency in 16 ymm registers): version 1, 2
// chains of Philox4x32-10 blocks of 4 elements; version 2
// (RandomStream::kPhilox7Half16), 3 chains of Philox4x32-7 blocks of 8.
constexpr int kChains = 2, kHalfChains = 3;

// Body bytes [k_begin, ...) while whole steps fit; returns the first byte not
// written. Byte k's block is (k + block_offset) / (bytes per block): version
// 2's caller starts on an even one (x86_encode_drawn). The words come in
// element order; a group of 16 elements (4 body bytes) takes two vectors of
// version-1 words, or one vector of version-2 words, whose 8 words are 16
// halves in element order: its low 128 bits serve elements 0..7, its high
// 128 bits 8..15.
template <bool kUnitPre, bool kClip, bool kHalves>
__attribute__((target("avx2,fma,bmi2"))) uint64_t encode_range(const float* x, uint64_t n, uint64_t k_begin,
                                                               uint64_t k_end, const TernaryQuantizer& tq,
                                                               const RngStream& rng, uint8_t* body) {
  constexpr int kC = kHalves ? kHalfChains : kChains;
  constexpr uint64_t kBytesPerBlock = kHalves ? 2 : 1;
  constexpr uint64_t kStepBlocks = 4 * kC, kStepBytes = kStepBlocks * kBytesPerBlock;
  constexpr int kGroups = kHalves ? 2 * kC : kC;
  const Quantizer8 q{_mm256_set1_ps(tq.scale), _mm256_set1_ps(tq.pre), _mm256_set1_ps(tq.inv24),
                     _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF))};
  auto block_of = [&](uint64_t k) { return (k + rng.block_offset) / kBytesPerBlock; };
  x86::PhiloxSetup setup(rng.seed, rng.step, rng.tensor_id, static_cast<uint32_t>(block_of(k_begin) >> 32));
  uint64_t k = k_begin;
  for (; k + kStepBytes <= k_end && 4 * (k + kStepBytes) <= n &&
         static_cast<uint32_t>(block_of(k)) <= 0xFFFFFFFFu - static_cast<uint32_t>(kStepBlocks - 1);
       k += kStepBytes) {
    const uint64_t block = block_of(k);
    if (static_cast<uint32_t>(block >> 32) != setup.hi_word)  // past 2^32 blocks: rare
      setup = x86::PhiloxSetup(rng.seed, rng.step, rng.tensor_id, static_cast<uint32_t>(block >> 32));
    __m256i words[2 * kC];
    x86::philox_avx2<kC, kHalves ? 7 : philox_constants::kRounds>(setup, static_cast<uint32_t>(block), words);
    const float* p = x + 4 * k;
    for (int line = 0; line < (kHalves ? 6 : 3); ++line)  // 2 KiB ahead
      _mm_prefetch(reinterpret_cast<const char*>(p + 512 + 16 * line), _MM_HINT_T0);
    for (int g = 0; g < kGroups; ++g) {
      __m256 u0, u1;
      if constexpr (kHalves) {
        u0 = u_of_halves(_mm256_castsi256_si128(words[g]));
        u1 = u_of_halves(_mm256_extracti128_si256(words[g], 1));
      } else {
        u0 = u_of_words(words[2 * g]);
        u1 = u_of_words(words[2 * g + 1]);
      }
      uint32_t k0, n0, k1, n1;
      quantize8<kUnitPre, kClip>(p + 16 * g, u0, q, k0, n0);
      quantize8<kUnitPre, kClip>(p + 16 * g + 8, u1, q, k1, n1);
      const uint32_t kept = _pdep_u32(k0 | k1 << 8, 0x55555555u);
      const uint32_t bits = kept + (kept & _pdep_u32(n0 | n1 << 8, 0x55555555u));
      std::memcpy(body + k + 4 * g, &bits, 4);
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
    return encode_range<kUnitPre, kClip, kHalves>(x, n, begin, k_end, q, rng, body);
  });
}

}  // namespace terngrad::quantize::detail
