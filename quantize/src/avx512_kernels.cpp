// The hand-written AVX-512 encode kernel (x86-64 only): Philox4x32-10 fused
// with quantize and pack. It uses what Highway does not express as directly
// (vpternlogq three-way XORs, vrangeps, vpermt2d transposes) and measured 10%
// faster than the Highway AVX-512 encode, so it is the avx512 level's encode
// (bench/RESULTS.md, "Highway or hand-written"; the stats and decode kernels
// written this way measured no faster and were dropped). It must give the
// bytes of the portable kernel; tests/quantize/simd_levels_test.cpp checks.
#include <immintrin.h>

#include <algorithm>

#include "cpu_kernels.h"
#include "terngrad/quantize/format.h"

namespace terngrad::quantize::detail {

namespace {

// 16 Philox4x32-10 blocks at once, block k0 + l in lane l. Requires the low
// counter words k0 .. k0+15 not to wrap (the caller checks).
struct Philox16 {
  __m512i w[4];
};

// Philox state for 8 blocks, one 32-bit word in the low half of each 64-bit
// lane: vpmuludq then yields the whole 64-bit product (lo in the low half,
// hi one shift away) and the upper halves may hold garbage, which vpmuludq
// ignores. A round costs 2 multiplies, 2 shifts and 2 three-way XORs.
struct Philox8x64 {
  __m512i c0, c1, c2, c3;
};

__attribute__((target("avx512f"))) inline void philox_round8(Philox8x64& s, __m512i k0, __m512i k1) {
  constexpr int kXor3 = 0x96;  // vpternlog truth table of a ^ b ^ c
  const __m512i p0 = _mm512_mul_epu32(s.c0, _mm512_set1_epi64(philox_constants::kMul0));
  const __m512i p1 = _mm512_mul_epu32(s.c2, _mm512_set1_epi64(philox_constants::kMul1));
  s.c0 = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p1, 32), s.c1, k0, kXor3);
  s.c2 = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p0, 32), s.c3, k1, kXor3);
  s.c1 = p1;
  s.c3 = p0;
}

// G groups of 16 blocks (G = 2 keeps four independent multiply chains in
// flight, enough to hide the multiply latency of one round).
template <int G>
__attribute__((target("avx512f"))) inline void philox_groups(uint64_t k0, const RngStream& rng,
                                                             Philox16 (&out)[G]) {
  using namespace philox_constants;
  const __m512i lo8 = _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7);
  const __m512i base = _mm512_set1_epi64(static_cast<uint32_t>(k0));
  const __m512i hi = _mm512_set1_epi64(static_cast<uint32_t>(k0 >> 32));
  const __m512i step = _mm512_set1_epi64(rng.step);
  const __m512i tensor = _mm512_set1_epi64(rng.tensor_id);
  Philox8x64 s[2 * G];
  for (int h = 0; h < 2 * G; ++h)
    s[h] = {_mm512_add_epi64(base, _mm512_add_epi64(lo8, _mm512_set1_epi64(8 * h))), hi, step, tensor};
  uint32_t key0 = static_cast<uint32_t>(rng.seed);
  uint32_t key1 = static_cast<uint32_t>(rng.seed >> 32);
  for (int round = 0; round < kRounds; ++round) {
    if (round > 0) {
      key0 += kWeyl0;
      key1 += kWeyl1;
    }
    const __m512i kv0 = _mm512_set1_epi64(key0), kv1 = _mm512_set1_epi64(key1);
    for (int h = 0; h < 2 * G; ++h) philox_round8(s[h], kv0, kv1);
  }
  // Gather the low halves: blocks 16g .. 16g+7 from s[2g], the next 8 from s[2g+1].
  const __m512i low_halves =
      _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  for (int g = 0; g < G; ++g) {
    const Philox8x64& a = s[2 * g];
    const Philox8x64& b = s[2 * g + 1];
    out[g] = Philox16{{_mm512_permutex2var_epi32(a.c0, low_halves, b.c0),
                       _mm512_permutex2var_epi32(a.c1, low_halves, b.c1),
                       _mm512_permutex2var_epi32(a.c2, low_halves, b.c2),
                       _mm512_permutex2var_epi32(a.c3, low_halves, b.c3)}};
  }
}

// Quantizes and packs 64 elements (16 body bytes) given their random words.
// The input is transposed so that register j holds element 4l+j in lane l,
// matching Philox word j of block l; each lane then assembles its byte and
// vpmovdb packs the 16 bytes.
class GroupQuantizer {
 public:
  __attribute__((target("avx512f,avx512dq"))) explicit GroupQuantizer(const TernaryQuantizer& q)
      : scale_(_mm512_set1_ps(q.scale)),
        pre_(_mm512_set1_ps(q.pre)),
        inv24_(_mm512_set1_ps(q.inv24)),
        unit_pre_(q.pre == 1.0f) {}

  __attribute__((target("avx512f,avx512bw,avx512dq"))) void operator()(const float* p,
                                                                        const Philox16& r,
                                                                        uint8_t* out) const {
    const __m512i col01 = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 1, 5, 9, 13, 17, 21, 25, 29);
    const __m512i col23 = _mm512_setr_epi32(2, 6, 10, 14, 18, 22, 26, 30, 3, 7, 11, 15, 19, 23, 27, 31);
    const __m512i lo_halves = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
    const __m512i hi_halves = _mm512_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
    for (int line = 0; line < 4; ++line)  // 2 KiB ahead, as in the stats pass
      _mm_prefetch(reinterpret_cast<const char*>(p + 512 + 16 * line), _MM_HINT_T0);
    const __m512 x0 = _mm512_loadu_ps(p), x1 = _mm512_loadu_ps(p + 16);
    const __m512 x2 = _mm512_loadu_ps(p + 32), x3 = _mm512_loadu_ps(p + 48);
    const __m512 p01 = _mm512_permutex2var_ps(x0, col01, x1);  // cols 0,1 of rows 0-7
    const __m512 p23 = _mm512_permutex2var_ps(x0, col23, x1);  // cols 2,3 of rows 0-7
    const __m512 q01 = _mm512_permutex2var_ps(x2, col01, x3);  // rows 8-15
    const __m512 q23 = _mm512_permutex2var_ps(x2, col23, x3);
    const __m512 col[4] = {_mm512_permutex2var_ps(p01, lo_halves, q01),
                           _mm512_permutex2var_ps(p01, hi_halves, q01),
                           _mm512_permutex2var_ps(p23, lo_halves, q23),
                           _mm512_permutex2var_ps(p23, hi_halves, q23)};
    __m512i bytes = _mm512_setzero_si512();
    for (int j = 0; j < 4; ++j) {
      // vrangeps 0x0A: min of |x| and |s| with the sign cleared = min(|x|, s).
      const __m512 a = _mm512_range_ps(col[j], scale_, 0x0A);
      // Multiplying by pre = 1 is exact, so skipping it keeps the bits identical.
      const __m512 t = unit_pre_ ? _mm512_mul_ps(a, inv24_)
                                 : _mm512_mul_ps(_mm512_mul_ps(a, pre_), inv24_);
      const __m512 u = _mm512_cvtepi32_ps(_mm512_srli_epi32(r.w[j], 8));
      // s > 0 here, so a == 0 gives t == 0 and is never kept: no a > 0 test needed.
      const __mmask16 keep =
          _mm512_cmp_ps_mask(a, scale_, _CMP_GE_OQ) | _mm512_cmp_ps_mask(u, t, _CMP_LT_OQ);
      const __mmask16 neg = _mm512_movepi32_mask(_mm512_castps_si512(col[j]));
      const __m512i code = _mm512_mask_blend_epi32(neg, _mm512_set1_epi32(kCodePlus << (2 * j)),
                                                   _mm512_set1_epi32(kCodeMinus << (2 * j)));
      bytes = _mm512_mask_or_epi32(bytes, keep, bytes, code);
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm512_cvtepi32_epi8(bytes));
  }

 private:
  __m512 scale_, pre_, inv24_;
  bool unit_pre_;
};

}  // namespace

__attribute__((target("avx512f,avx512bw,avx512dq"))) void encode_bytes_avx512(
    const float* x, uint64_t n, uint64_t k_begin, uint64_t k_end, const TernaryQuantizer& q,
    const RngStream& rng, uint8_t* body) {
  if (q.scale == 0.0f) {  // all-zero tensor: every code is 0
    std::fill(body + k_begin, body + k_end, uint8_t{0});
    return;
  }
  const GroupQuantizer quantize(q);
  // Blocks k .. k+span-1 are SIMD-able if all their elements exist and the
  // low counter word does not wrap inside them (rare: the portable path crosses).
  // The counter of byte k is k + block_offset (a slice of a larger tensor).
  auto simd_ok = [&](uint64_t k, uint64_t span) {
    const uint64_t counter = k + rng.block_offset;
    return k + span <= k_end && 4 * (k + span) <= n &&
           static_cast<uint32_t>(counter) <= 0xFFFFFFFFu - static_cast<uint32_t>(span - 1);
  };
  uint64_t k = k_begin;
  while (simd_ok(k, 32)) {
    Philox16 r[2];
    philox_groups<2>(k + rng.block_offset, rng, r);
    quantize(x + 4 * k, r[0], body + k);
    quantize(x + 4 * k + 64, r[1], body + k + 16);
    k += 32;
  }
  if (simd_ok(k, 16)) {
    Philox16 r[1];
    philox_groups<1>(k + rng.block_offset, rng, r);
    quantize(x + 4 * k, r[0], body + k);
    k += 16;
  }
  encode_bytes_portable(x, n, k, k_end, q, rng, body);
}

}  // namespace terngrad::quantize::detail
