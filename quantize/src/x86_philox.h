// Private (x86-64 only): Philox4x32-R (R = 10, or 7 for the version-2
// stream) for many consecutive blocks at once,
// AVX-512 and AVX2, producing the words in element order: word j of block b
// in 32-bit lane 4b + j, which is the order of the elements that use them
// (element 4k + j draws word j of block k). The encode kernels
// (avx512_kernels.cpp, avx2_kernels.cpp) then work on the input as it lies in
// memory, and philox_batch.cpp hands the same words to other codecs (qsgd).
//
// Layout: a chain holds one 32-bit Philox word per 64-bit lane (the upper
// halves collect garbage that the 32x32->64 multiply, vpmuludq, never reads),
// 8 blocks per zmm / 4 per ymm. Lanes are assigned blocks out of order
// ({0,4,1,5,2,6,3,7} / {0,2,1,3}) so that the last round's two 64-bit "word
// pairs" (w0 | w1 << 32, w2 | w3 << 32) interleave with one unpack into
// element order. Rounds 1 and 2 are folded (PhiloxHead): counter words 1-3
// are the same for every block of a call, so part of their arithmetic is a
// constant (simd_kernels.cpp's Highway kernel does the same).
//
// Requires: the low counter words of all blocks of a call do not wrap (the
// callers check), i.e. they are lo .. lo + blocks - 1 with no carry into the
// high word.
#pragma once

#if defined(__x86_64__)
#include <immintrin.h>

#include <cstdint>

#include "terngrad/quantize/philox_batch.h"

namespace terngrad::quantize::detail::x86 {

#define TG_X86_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,bmi2"), always_inline)) inline
#define TG_X86_AVX2 __attribute__((target("avx2,fma,bmi2"), always_inline)) inline

// The per-call constants (keys, folded rounds 1-2): PhiloxSetup, philox_batch.h.
using terngrad::quantize::PhiloxSetup;

TG_X86_AVX512 __m512i bcast512(const uint64_t& v) {
  return _mm512_broadcastq_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(&v)));
}
TG_X86_AVX2 __m256i bcast256(const uint64_t& v) {
  return _mm256_broadcastq_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(&v)));
}

// ---------------------------------------------------------------- AVX-512
// C chains of 8 blocks: blocks lo + 8c .. lo + 8c + 7 (low counter words),
// out[2c] = the 16 words of blocks 8c .. 8c+3 in element order, out[2c+1]
// those of blocks 8c+4 .. 8c+7. C = 4 keeps enough multiplies in flight to
// hide their latency.
template <int C, int R = philox_constants::kRounds>
TG_X86_AVX512 void philox_avx512(const PhiloxSetup& s, uint32_t lo, __m512i (&out)[2 * C]) {
  using namespace philox_constants;
  constexpr int kXor3 = 0x96;  // vpternlog: a ^ b ^ c
  const __m512i mul0 = _mm512_set1_epi64(kMul0), mul1 = _mm512_set1_epi64(kMul1);
  const __m512i order = _mm512_setr_epi64(0, 4, 1, 5, 2, 6, 3, 7);
  const __m512i base = _mm512_set1_epi64(lo);
  __m512i c0[C], c1[C], c2[C], c3[C];
  for (int c = 0; c < C; ++c) {
    const __m512i ctr = _mm512_add_epi64(base, _mm512_add_epi64(order, _mm512_set1_epi64(8 * c)));
    const __m512i p0 = _mm512_mul_epu32(ctr, mul0);  // round 1
    const __m512i w2 = _mm512_xor_si512(_mm512_srli_epi64(p0, 32), bcast512(s.x1));
    const __m512i p1 = _mm512_mul_epu32(w2, mul1);  // round 2
    c0[c] = _mm512_xor_si512(_mm512_srli_epi64(p1, 32), bcast512(s.x2));
    c1[c] = p1;
    c2[c] = _mm512_xor_si512(p0, bcast512(s.x3));
    c3[c] = bcast512(s.w3);
  }
  static_assert(R >= 3 && R <= kRounds, "rounds 1-2 are folded, the last writes the words");
  for (int r = 2; r < R - 1; ++r) {
    const __m512i k0 = bcast512(s.key0[r]), k1 = bcast512(s.key1[r]);
    for (int c = 0; c < C; ++c) {
      const __m512i p0 = _mm512_mul_epu32(c0[c], mul0);
      const __m512i p1 = _mm512_mul_epu32(c2[c], mul1);
#ifdef TG_PHILOX_SWAP512
      c0[c] = _mm512_ternarylogic_epi64(_mm512_shuffle_epi32(p1, _MM_PERM_CDAB), c1[c], k0, kXor3);
      c2[c] = _mm512_ternarylogic_epi64(_mm512_shuffle_epi32(p0, _MM_PERM_CDAB), c3[c], k1, kXor3);
#else
      c0[c] = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p1, 32), c1[c], k0, kXor3);
      c2[c] = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p0, 32), c3[c], k1, kXor3);
#endif
      c1[c] = p1;
      c3[c] = p0;
    }
  }
  // The last round writes word pairs: rotating the product by 32 puts hi in
  // the low half (word 0 / 2, still to be XORed) and lo in the high half
  // (word 1 / 3, final); the XOR applies to the even 32-bit lanes only.
  const __m512i k0 = bcast512(s.key0[R - 1]), k1 = bcast512(s.key1[R - 1]);
  for (int c = 0; c < C; ++c) {
    const __m512i p0 = _mm512_mul_epu32(c0[c], mul0);
    const __m512i p1 = _mm512_mul_epu32(c2[c], mul1);
    const __m512i w01 = _mm512_mask_ternarylogic_epi32(_mm512_rol_epi64(p1, 32), 0x5555, c1[c], k0, kXor3);
    const __m512i w23 = _mm512_mask_ternarylogic_epi32(_mm512_rol_epi64(p0, 32), 0x5555, c3[c], k1, kXor3);
    out[2 * c] = _mm512_unpacklo_epi64(w01, w23);
    out[2 * c + 1] = _mm512_unpackhi_epi64(w01, w23);
  }
}

// ---------------------------------------------------------------- AVX2
// C chains of 4 blocks: out[2c] = the 8 words of blocks 4c, 4c+1 in element
// order, out[2c+1] those of 4c+2, 4c+3. The high half of a product is moved
// down with a 32-bit lane swap (vpshufd, the shuffle port) rather than a
// shift (the multiply ports); the word that lands in the upper half is
// garbage the next multiply ignores.
template <int C, int R = philox_constants::kRounds>
TG_X86_AVX2 void philox_avx2(const PhiloxSetup& s, uint32_t lo, __m256i (&out)[2 * C]) {
  using namespace philox_constants;
  const __m256i mul0 = _mm256_set1_epi64x(kMul0), mul1 = _mm256_set1_epi64x(kMul1);
  const __m256i order = _mm256_setr_epi64x(0, 2, 1, 3);
  const __m256i base = _mm256_set1_epi64x(lo);
  __m256i c0[C], c1[C], c2[C], c3[C];
  for (int c = 0; c < C; ++c) {
    const __m256i ctr = _mm256_add_epi64(base, _mm256_add_epi64(order, _mm256_set1_epi64x(4 * c)));
    const __m256i p0 = _mm256_mul_epu32(ctr, mul0);  // round 1
    const __m256i w2 = _mm256_xor_si256(_mm256_shuffle_epi32(p0, 0xB1), bcast256(s.x1));
    const __m256i p1 = _mm256_mul_epu32(w2, mul1);  // round 2
    c0[c] = _mm256_xor_si256(_mm256_shuffle_epi32(p1, 0xB1), bcast256(s.x2));
    c1[c] = p1;
    c2[c] = _mm256_xor_si256(p0, bcast256(s.x3));
    c3[c] = bcast256(s.w3);
  }
  static_assert(R >= 3 && R <= kRounds, "rounds 1-2 are folded, the last writes the words");
  for (int r = 2; r < R - 1; ++r) {
    const __m256i k0 = bcast256(s.key0[r]), k1 = bcast256(s.key1[r]);
    for (int c = 0; c < C; ++c) {
      const __m256i p0 = _mm256_mul_epu32(c0[c], mul0);
      const __m256i p1 = _mm256_mul_epu32(c2[c], mul1);
      c0[c] = _mm256_xor_si256(_mm256_shuffle_epi32(p1, 0xB1), _mm256_xor_si256(c1[c], k0));
      c2[c] = _mm256_xor_si256(_mm256_shuffle_epi32(p0, 0xB1), _mm256_xor_si256(c3[c], k1));
      c1[c] = p1;
      c3[c] = p0;
    }
  }
  const __m256i k0 = bcast256(s.key0[R - 1]), k1 = bcast256(s.key1[R - 1]);
  for (int c = 0; c < C; ++c) {
    const __m256i p0 = _mm256_mul_epu32(c0[c], mul0);
    const __m256i p1 = _mm256_mul_epu32(c2[c], mul1);
    const __m256i s1 = _mm256_shuffle_epi32(p1, 0xB1), s0 = _mm256_shuffle_epi32(p0, 0xB1);
    // Even 32-bit lanes: hi ^ c ^ key (word 0 / 2); odd lanes: lo (word 1 / 3).
    const __m256i w01 = _mm256_blend_epi32(s1, _mm256_xor_si256(s1, _mm256_xor_si256(c1[c], k0)), 0x55);
    const __m256i w23 = _mm256_blend_epi32(s0, _mm256_xor_si256(s0, _mm256_xor_si256(c3[c], k1)), 0x55);
    out[2 * c] = _mm256_unpacklo_epi64(w01, w23);
    out[2 * c + 1] = _mm256_unpackhi_epi64(w01, w23);
  }
}

}  // namespace terngrad::quantize::detail::x86
#endif  // __x86_64__
