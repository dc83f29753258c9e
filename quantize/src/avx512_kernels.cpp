// Hand-written AVX-512 kernels (x86-64 only): the stats chunk sums, the
// fused Philox + quantize + pack of encode, and decode. They use what Highway
// does not express as directly (vpternlogq three-way XORs, vrangeps,
// vpermt2d transposes) and stay where they measured faster than the Highway
// AVX-512 kernels (bench/RESULTS.md, "SIMD levels"). Each must give the bytes
// of its portable twin; tests/quantize/simd_levels_test.cpp checks that.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "cpu_kernels.h"
#include "terngrad/quantize/format.h"

namespace terngrad::quantize::detail {

// Same lanes held in four zmm registers per sum: lanes 0-7, 8-15, 16-23, 24-31.
__attribute__((target("avx512f,avx512dq"))) ChunkSums chunk_sums_avx512(const float* x,
                                                                         size_t len) {
  __m512d s0 = _mm512_setzero_pd(), s1 = s0, s2 = s0, s3 = s0;
  __m512d q0 = s0, q1 = s0, q2 = s0, q3 = s0;
  __m512i mx = _mm512_setzero_si512();
  const __m512i abs_mask = _mm512_set1_epi32(static_cast<int>(kAbsMask));
  size_t e = 0;
  for (; e + kStatsLanes <= len; e += kStatsLanes) {
    // 2 KiB ahead: the hardware prefetcher alone leaves memory latency exposed.
    _mm_prefetch(reinterpret_cast<const char*>(x + e + 512), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(x + e + 528), _MM_HINT_T0);
    const __m512 a = _mm512_loadu_ps(x + e);
    const __m512 b = _mm512_loadu_ps(x + e + 16);
    const __m512d a0 = _mm512_cvtps_pd(_mm512_castps512_ps256(a));
    const __m512d a1 = _mm512_cvtps_pd(_mm512_extractf32x8_ps(a, 1));
    const __m512d b0 = _mm512_cvtps_pd(_mm512_castps512_ps256(b));
    const __m512d b1 = _mm512_cvtps_pd(_mm512_extractf32x8_ps(b, 1));
    s0 = _mm512_add_pd(s0, a0);
    s1 = _mm512_add_pd(s1, a1);
    s2 = _mm512_add_pd(s2, b0);
    s3 = _mm512_add_pd(s3, b1);
    q0 = _mm512_fmadd_pd(a0, a0, q0);  // product exact: fused == unfused
    q1 = _mm512_fmadd_pd(a1, a1, q1);
    q2 = _mm512_fmadd_pd(b0, b0, q2);
    q3 = _mm512_fmadd_pd(b1, b1, q3);
    mx = _mm512_max_epu32(mx, _mm512_and_si512(_mm512_castps_si512(a), abs_mask));
    mx = _mm512_max_epu32(mx, _mm512_and_si512(_mm512_castps_si512(b), abs_mask));
  }
  alignas(64) double lane_sum[kStatsLanes];
  alignas(64) double lane_sq[kStatsLanes];
  _mm512_store_pd(lane_sum + 0, s0);
  _mm512_store_pd(lane_sum + 8, s1);
  _mm512_store_pd(lane_sum + 16, s2);
  _mm512_store_pd(lane_sum + 24, s3);
  _mm512_store_pd(lane_sq + 0, q0);
  _mm512_store_pd(lane_sq + 8, q1);
  _mm512_store_pd(lane_sq + 16, q2);
  _mm512_store_pd(lane_sq + 24, q3);
  uint32_t max_bits = _mm512_reduce_max_epu32(mx);
  return finish_chunk(x, e, len, lane_sum, lane_sq, max_bits);  // tail continues the lanes
}

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

}  // namespace

namespace {

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

// 16 elements per step: the 4 body bytes behind them are broadcast to every
// lane, each lane shifts out its own code, and a 4-entry table gives 0, s, -s.
__attribute__((target("avx512f"))) void decode_bytes_avx512(const uint8_t* body, uint64_t n,
                                                            uint64_t k_begin, uint64_t k_end,
                                                            float scale, bool accumulate,
                                                            float* out) {
  const __m512i shifts = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i three = _mm512_set1_epi32(3);
  const __m512 table = _mm512_setr_ps(0.0f, scale, -scale, 0.0f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
  uint64_t k = k_begin;
  for (; k + 4 <= k_end && 4 * (k + 4) <= n; k += 4) {
    uint32_t word;
    std::memcpy(&word, body + k, sizeof word);
    const __m512i codes = _mm512_and_si512(
        _mm512_srlv_epi32(_mm512_set1_epi32(static_cast<int>(word)), shifts), three);
    __m512 v = _mm512_permutexvar_ps(codes, table);
    float* o = out + 4 * k;
    if (accumulate) v = _mm512_add_ps(_mm512_loadu_ps(o), v);
    _mm512_storeu_ps(o, v);
  }
  decode_bytes_portable(body, n, k, k_end, scale, accumulate, out);
}

}  // namespace terngrad::quantize::detail
