// The hand-written AVX-512 encode kernel (x86-64 only), both random streams
// (version 1's Philox4x32-10 words, version 2's Philox4x32-7 halves): Philox fused
// with quantize and pack. The Philox words come out in element order
// (x86_philox.h: lanes assigned so that one unpack interleaves the last
// round's word pairs, rounds 1-2 folded), so the input is used as it lies in
// memory (the previous kernel transposed it and the words, 12 permutes per
// 64 elements); the keep and sign decisions leave as two 16-bit masks and a
// bit deposit (pdep) turns them into codes. Measured against the Highway
// AVX-512 encode in bench/RESULTS.md; TG_HWY_AVX512=1 selects that one
// (kernel_tables.cpp). It must give the bytes of the portable kernel;
// tests/quantize/simd_levels_test.cpp checks.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "cpu_kernels.h"
#include "terngrad/quantize/format.h"
#include "x86_philox.h"

namespace terngrad::quantize::detail {

namespace {

// The quantizer's constants as vectors. kUnitPre: pre == 1, whose multiply is
// exact and skipped. kClip: the "a >= s" test is needed; it is not when the
// threshold of a clipped element, t(s) = (s * pre) * inv24, exceeds every
// 24-bit random integer (then u < t already keeps it), which holds for all
// but a few scales whose inv24 rounds down (make_quantizer).
struct Quantizer16 {
  __m512 scale, pre, inv24;
};

// The uniform 24-bit integers u of ternary_code() as floats: from 16
// version-1 words (u = word >> 8), and from 16 version-2 half words
// (u = 256 h + 128, ternary_math.h's half_word()).
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,bmi2"), always_inline)) inline __m512 u_of_words(__m512i words) {
  return _mm512_cvtepi32_ps(_mm512_srli_epi32(words, 8));
}
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,bmi2"), always_inline)) inline __m512 u_of_halves(__m256i halves) {
  return _mm512_cvtepi32_ps(_mm512_or_si512(_mm512_slli_epi32(_mm512_cvtepu16_epi32(halves), 8), _mm512_set1_epi32(0x80)));
}

// 16 elements p[0..16) with their u (element order) -> 32 bits of body
// (four bytes, element 4b + j at bits 8b + 2j). The per-element arithmetic
// is ternary_code()'s: a = min(|x|, s) (vrangeps 0x0A: the min of the
// absolute values with the sign cleared), t = (a * pre) * inv24,
// keep = u < t (|| a >= s). Two masks, keep and sign, become the codes with
// one bit deposit each: keep gives bit 2i, keep & sign moves it up to bit
// 2i + 1 (01 + 01 = 10).
template <bool kUnitPre, bool kClip>
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,bmi2"), always_inline)) inline uint32_t quantize16(const float* p, __m512 u, const Quantizer16& q) {
  const __m512 x = _mm512_loadu_ps(p);
  const __m512 a = _mm512_range_ps(x, q.scale, 0x0A);
  const __m512 t = kUnitPre ? _mm512_mul_ps(a, q.inv24) : _mm512_mul_ps(_mm512_mul_ps(a, q.pre), q.inv24);
  __mmask16 keep = _mm512_cmp_ps_mask(u, t, _CMP_LT_OQ);
  if (kClip) keep = _kor_mask16(keep, _mm512_cmp_ps_mask(a, q.scale, _CMP_GE_OQ));
  const __mmask16 neg = _mm512_movepi32_mask(_mm512_castps_si512(x));
  const uint32_t kept = _pdep_u32(_cvtmask16_u32(keep), 0x55555555u);
  return kept + (kept & _pdep_u32(_cvtmask16_u32(neg), 0x55555555u));
}

// C Philox chains of 8 blocks at block `block_lo` (its low counter word),
// body byte k. kHalves: format version 2 (RandomStream::kPhilox7Half16),
// Philox4x32-7 blocks of 8 elements; otherwise version 1, Philox4x32-10
// blocks of 4. Either way the words come in element order: a group of 32
// elements (8 body bytes) takes two vectors of version-1 words, or one vector
// of version-2 words, whose 16 words are 32 halves in element order (word j
// of block b holds elements 8b + 2j and 8b + 2j + 1, low half first): its low
// 256 bits serve elements 0..15 and its high 256 bits 16..31.
template <int C, bool kUnitPre, bool kClip, bool kHalves>
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,bmi2"), always_inline)) inline void encode_step(
    const float* x, uint64_t k, uint32_t block_lo, const x86::PhiloxSetup& setup, const Quantizer16& q,
    uint8_t* body) {
  constexpr int kGroups = kHalves ? 2 * C : C;
  __m512i words[2 * C];
  x86::philox_avx512<C, kHalves ? 7 : philox_constants::kRounds>(setup, block_lo, words);
  const float* p = x + 4 * k;
  for (int line = 0; line < 2 * kGroups; ++line)  // 2 KiB ahead, a line per 16 elements
    _mm_prefetch(reinterpret_cast<const char*>(p + 512 + 16 * line), _MM_HINT_T0);
  // Straight to the body, 8 bytes a store (narrow stores gathered into a
  // wide load would stall on store forwarding).
  for (int g = 0; g < kGroups; ++g) {
    __m512 u0, u1;
    if constexpr (kHalves) {
      u0 = u_of_halves(_mm512_castsi512_si256(words[g]));
      u1 = u_of_halves(_mm512_extracti64x4_epi64(words[g], 1));
    } else {
      u0 = u_of_words(words[2 * g]);
      u1 = u_of_words(words[2 * g + 1]);
    }
    const uint64_t two = quantize16<kUnitPre, kClip>(p + 32 * g, u0, q) |
                         uint64_t{quantize16<kUnitPre, kClip>(p + 32 * g + 16, u1, q)} << 32;
    std::memcpy(body + k + 8 * g, &two, 8);
  }
}

// Chains per main-loop iteration: version 1, 6 Philox chains of 8 (more
// chains than the 4 that hide the multiply latency measured 4-7% faster; 32
// zmm registers hold them), then steps of 2 chains for the rest of a 16 KiB
// block; version 2 (fewer rounds, twice the elements a chain), 4 then 1.
constexpr int kMainChains = 6, kTailChains = 2;
constexpr int kHalfMainChains = 4, kHalfTailChains = 1;

// Body bytes [k_begin, ...) while whole steps fit; returns the first byte not
// written. Byte k's block is (k + block_offset) / (bytes per block): version
// 2's caller starts on an even one (x86_encode_drawn).
template <bool kUnitPre, bool kClip, bool kHalves>
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,bmi2"))) uint64_t encode_range(
    const float* x, uint64_t n, uint64_t k_begin, uint64_t k_end, const TernaryQuantizer& tq,
    const RngStream& rng, uint8_t* body) {
  constexpr uint64_t kBytesPerBlock = kHalves ? 2 : 1;
  constexpr int kMain = kHalves ? kHalfMainChains : kMainChains, kTail = kHalves ? kHalfTailChains : kTailChains;
  const Quantizer16 q{_mm512_set1_ps(tq.scale), _mm512_set1_ps(tq.pre), _mm512_set1_ps(tq.inv24)};
  auto block_of = [&](uint64_t k) { return (k + rng.block_offset) / kBytesPerBlock; };
  x86::PhiloxSetup setup(rng.seed, rng.step, rng.tensor_id, static_cast<uint32_t>(block_of(k_begin) >> 32));
  // A step of `chains` chains (8 blocks each) is SIMD-able if all its
  // elements exist and the low counter word does not wrap inside it (rare:
  // the portable path crosses). Block counters count from block_offset (a slice).
  auto simd_ok = [&](uint64_t k, uint64_t chains) {
    const uint64_t span = 8 * chains * kBytesPerBlock;
    return k + span <= k_end && 4 * (k + span) <= n &&
           static_cast<uint32_t>(block_of(k)) <= 0xFFFFFFFFu - static_cast<uint32_t>(8 * chains - 1);
  };
  auto refresh = [&](uint64_t block) {
    if (static_cast<uint32_t>(block >> 32) != setup.hi_word)  // past 2^32 blocks: rare
      setup = x86::PhiloxSetup(rng.seed, rng.step, rng.tensor_id, static_cast<uint32_t>(block >> 32));
  };
  uint64_t k = k_begin;
  for (; simd_ok(k, kMain); k += 8 * kMain * kBytesPerBlock) {
    refresh(block_of(k));
    encode_step<kMain, kUnitPre, kClip, kHalves>(x, k, static_cast<uint32_t>(block_of(k)), setup, q, body);
  }
  for (; simd_ok(k, kTail); k += 8 * kTail * kBytesPerBlock) {
    refresh(block_of(k));
    encode_step<kTail, kUnitPre, kClip, kHalves>(x, k, static_cast<uint32_t>(block_of(k)), setup, q, body);
  }
  return k;
}

// Nearest rounding: quantize16 with every word kNearestWord (u = 2^23), 32
// elements (8 body bytes) a step; returns the first byte not written.
template <bool kUnitPre, bool kClip>
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,bmi2"))) uint64_t nearest_range(
    const float* x, uint64_t n, uint64_t k_begin, uint64_t k_end, const TernaryQuantizer& tq, uint8_t* body) {
  const Quantizer16 q{_mm512_set1_ps(tq.scale), _mm512_set1_ps(tq.pre), _mm512_set1_ps(tq.inv24)};
  const __m512 u = u_of_words(_mm512_set1_epi32(static_cast<int>(kNearestWord)));
  uint64_t k = k_begin;
  for (; k + 8 <= k_end && 4 * (k + 8) <= n; k += 8) {
    const float* p = x + 4 * k;
    const uint64_t two =
        quantize16<kUnitPre, kClip>(p, u, q) | uint64_t{quantize16<kUnitPre, kClip>(p + 16, u, q)} << 32;
    std::memcpy(body + k, &two, 8);
  }
  return k;
}

}  // namespace

__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,bmi2"))) void encode_bytes_nearest_avx512(
    const float* x, uint64_t n, uint64_t k_begin, uint64_t k_end, const TernaryQuantizer& q, uint8_t* body) {
  const uint64_t k = x86_encode_case(q, k_begin, k_end, body, [&]<bool kUnitPre, bool kClip>() {
    return nearest_range<kUnitPre, kClip>(x, n, k_begin, k_end, q, body);
  });
  encode_bytes_nearest(x, n, k, k_end, q, body);
}

__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,bmi2"))) void add_f32_avx512(const float* a,
                                                                                  const float* b, float* out,
                                                                                  size_t len) {
  size_t i = 0;
  for (; i + 16 <= len; i += 16) _mm512_storeu_ps(out + i, _mm512_add_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i)));
  for (; i < len; ++i) out[i] = a[i] + b[i];
}

// 16 elements from one 32-bit word of codes: lane j takes bits 2j..2j+1
// (vpsrlvd), d is +s, -s or +0 by two compares, r = 0 - (-p + d) with -p a
// sign flip, as the portable kernel computes it.
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,bmi2"))) void ef_residual_avx512(
    const float* p, const uint8_t* body, uint64_t len, float scale, float* r) {
  const __m512i shifts = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i three = _mm512_set1_epi32(3), one = _mm512_set1_epi32(1), two = _mm512_set1_epi32(2);
  const __m512 pos = _mm512_set1_ps(scale), neg = _mm512_set1_ps(-scale), zero = _mm512_setzero_ps();
  const __m512i sign = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  uint64_t i = 0;
  for (; i + 16 <= len; i += 16) {
    uint32_t word;
    std::memcpy(&word, body + i / 4, sizeof word);
    const __m512i c = _mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32(static_cast<int>(word)), shifts), three);
    const __m512 d = _mm512_mask_mov_ps(_mm512_mask_mov_ps(zero, _mm512_cmpeq_epi32_mask(c, one), pos),
                                        _mm512_cmpeq_epi32_mask(c, two), neg);
    const __m512 minus_p = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(_mm512_loadu_ps(p + i)), sign));
    _mm512_storeu_ps(r + i, _mm512_sub_ps(zero, _mm512_add_ps(minus_p, d)));
  }
  if (i < len) ef_residual_portable(p + i, body + i / 4, len - i, scale, r + i);
}

// Whether a clipped element (a = s) needs its own test: not when its
// threshold t(s) exceeds the largest 24-bit random integer.
bool clip_test_needed(const TernaryQuantizer& q) {
  const float ts = (q.pre == 1.0f) ? q.scale * q.inv24 : (q.scale * q.pre) * q.inv24;
  return !(ts > 16777215.0f);
}

__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,bmi2"))) void encode_bytes_avx512(
    const float* x, uint64_t n, uint64_t k_begin, uint64_t k_end, const TernaryQuantizer& q,
    const RngStream& rng, uint8_t* body) {
  x86_encode_drawn(x, n, k_begin, k_end, q, rng, body, [&]<bool kUnitPre, bool kClip, bool kHalves>(uint64_t begin) {
    return encode_range<kUnitPre, kClip, kHalves>(x, n, begin, k_end, q, rng, body);
  });
}

}  // namespace terngrad::quantize::detail
