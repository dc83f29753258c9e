// "qsgd:levels=S,bucket=B": QSGD (Alistarh et al. 2017). Payload format:
// comm/codecs/FORMATS.md, "## qsgd" (normative, including the arithmetic an
// encoder must use so that every build gives the same bytes).
//
// Buckets are B elements at absolute positions of the variable (bucket j is
// elements [jB, (j+1)B)); each bucket's L2 norm is computed from the whole
// bucket (16 float64 lanes, fixed order), and element i draws its random
// integer from a counter-based stream keyed by the seed: format version 2 (the
// default) takes 16-bit half i%8 of the Philox4x32-7 block with counter (i/8,
// step, tensor id), version 1 the top 24 bits of word i%4 of the
// Philox4x32-10 block (i/4, step, tensor id). So a slice's bytes depend only
// on the whole variable and the slice, never on how the variable is cut.
//
// Speed: the encoder makes one pass per bucket (the norm, then the levels
// while the bucket is still in cache). The Philox words come from quantize's
// vector generator (philox_batch.h, the TernGrad encode's: same streams). On
// x86 the levels of the byte-aligned widths (2, 4, 8 bits) are computed and
// packed in registers by AVX-512 / AVX2 kernels (intrinsics), with the
// division done as a correctly rounded reciprocal plus one FMA correction
// (BucketDiv below); the other widths and the portable level use plain loops
// that GCC vectorizes, compiled three times (baseline x86-64, AVX2, AVX-512
// via target attributes). The level is terngrad::quantize::cpu_simd_level()
// (TG_CPU_SIMD forces one). The file is compiled with -ffp-contract=off, so
// every copy does the same float32 operations and gives the same bytes;
// tests/comm/qsgd_codec_test.cpp checks each level against a float64 scalar
// reference written from FORMATS.md, and the division against the divide.
#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "builtin_codecs.h"
#include "parallel_ranges.h"
#include "qsgd_internal.h"
#include "slices.h"
#include "terngrad/quantize/cpu_features.h"
#include "terngrad/quantize/format.h"
#include "terngrad/quantize/philox.h"
#include "terngrad/quantize/philox_batch.h"
#include "terngrad/quantize/ternary_math.h"

namespace terngrad::comm::detail {

namespace {

namespace tq = terngrad::quantize;

constexpr uint32_t kQsgdMagicLe32 = 0x53514754u;  // "TGQS"
constexpr size_t kQsgdHeaderBytes = 32;
constexpr size_t kOffMagic = 0, kOffVersion = 4, kOffBits = 5, kOffLevels = 6, kOffBucket = 8, kOffFirst = 12,
                 kOffCount = 16, kOffReserved = 24, kOffCrc = 28;
constexpr int kNormLanes = 16;
constexpr size_t kChunk = 192;  // elements per Philox batch (48 blocks: 6 vector Philox chains at AVX-512)
// The header's format version is the stream's number (1 or 2).
constexpr uint8_t kOldestVersion = static_cast<uint8_t>(tq::RandomStream::kPhilox10Word32),
                  kNewestVersion = static_cast<uint8_t>(tq::RandomStream::kPhilox7Half16);

uint32_t field_bits(uint32_t levels) { return 1u + static_cast<uint32_t>(std::bit_width(levels)); }

// Norm slots a payload of n elements carries: the most buckets n elements
// starting at a multiple of 4 can touch.
uint64_t norm_slots(uint64_t n, uint64_t bucket) { return n == 0 ? 0 : (n + bucket - 4 + bucket - 1) / bucket; }
// Buckets a slice of n elements starting at offset `first` (begin % B) touches.
uint64_t used_slots(uint64_t n, uint64_t first, uint64_t bucket) {
  return n == 0 ? 0 : (first + n + bucket - 1) / bucket;
}

// ---------------------------------------------------------------- kernels
// Each is always_inline into the per-target wrappers below, so the loops are
// vectorized for that target.
#define TG_QSGD_INLINE inline __attribute__((always_inline))

// Sum of squares of x[0, len) in float64: element m into lane m % 16, in
// index order; the lanes fold as lane[l] += lane[l + o] for o = 8, 4, 2, 1.
TG_QSGD_INLINE double sum_squares_impl(const float* x, size_t len) {
  double lane[kNormLanes] = {};
  size_t m = 0;
  for (; m + kNormLanes <= len; m += kNormLanes)
    for (int l = 0; l < kNormLanes; ++l) {
      const double v = static_cast<double>(x[m + l]);
      lane[l] += v * v;
    }
  for (int l = 0; m + l < len; ++l) {
    const double v = static_cast<double>(x[m + l]);
    lane[l] += v * v;
  }
  for (int o = kNormLanes / 2; o >= 1; o /= 2)
    for (int l = 0; l < o; ++l) lane[l] += lane[l + o];
  return lane[0];
}

// Fields (level << 1 | sign) of len <= kChunk elements of one bucket whose
// divisor is div (the norm, or 1 for an all-zero bucket). FORMATS.md step 3.
TG_QSGD_INLINE void fields_impl(const float* g, size_t len, float div, float levels, const uint32_t* words,
                                uint16_t* fields) {
  for (size_t i = 0; i < len; ++i) {
    const float a = std::fabs(g[i]);
    const float q = a / div;
    const float r = q * levels;
    const uint32_t l = static_cast<uint32_t>(static_cast<int32_t>(r));
    const float frac = r - static_cast<float>(static_cast<int32_t>(l));
    const float u = static_cast<float>(static_cast<int32_t>(words[i] >> 8));
    const uint32_t level = l + (u < frac * 16777216.0f ? 1u : 0u);
    const uint32_t neg = std::bit_cast<uint32_t>(g[i]) >> 31;
    fields[i] = static_cast<uint16_t>((level << 1) | (level != 0 ? neg : 0u));
  }
}

// Version 2's words from 16-bit halves: word j = half_word(h[j]) (so
// u = word >> 8 = 256 h + 128), h[j] the j-th 16-bit half of the Philox words
// in element order (the low half of a word first).
TG_QSGD_INLINE void half_words_impl(const uint32_t* raw, size_t first_half, size_t len, uint32_t* words) {
  for (size_t j = 0; j < len; ++j) {
    const size_t t = first_half + j;
    words[j] = tq::half_word((raw[t / 2] >> (16 * (t % 2))) & 0xFFFFu);
  }
}

// The reference's level for version 2 (fields_impl's arithmetic from r on):
// l = trunc(r), rounded up iff u = 256 h + 128 < (r - l) * 2^24.
inline uint32_t level_of_halves_reference(float r, uint16_t h) {
  const uint32_t l = static_cast<uint32_t>(static_cast<int32_t>(r));
  const float frac = r - static_cast<float>(static_cast<int32_t>(l));
  const float u = static_cast<float>(static_cast<int32_t>(tq::half_word(h) >> 8));
  return l + (u < frac * 16777216.0f ? 1u : 0u);
}

// Byte-aligned packers for the widths a byte holds whole: fields 0..len
// (len a multiple of 8 / width) into len * width / 8 bytes, field e at bits
// [e*w, (e+1)*w) as the general BitWriter below (the reference) puts them.
TG_QSGD_INLINE void pack2_impl(const uint16_t* f, size_t len, uint8_t* out) {
  for (size_t i = 0; i < len / 4; ++i)
    out[i] = static_cast<uint8_t>(f[4 * i] | f[4 * i + 1] << 2 | f[4 * i + 2] << 4 | f[4 * i + 3] << 6);
}
TG_QSGD_INLINE void pack4_impl(const uint16_t* f, size_t len, uint8_t* out) {
  for (size_t i = 0; i < len / 2; ++i) out[i] = static_cast<uint8_t>(f[2 * i] | f[2 * i + 1] << 4);
}
TG_QSGD_INLINE void pack8_impl(const uint16_t* f, size_t len, uint8_t* out) {
  for (size_t i = 0; i < len; ++i) out[i] = static_cast<uint8_t>(f[i]);
}


// ---------------------------------------------------------------- fused x86 kernels
// Fields of whole vectors of one bucket's elements computed and packed in
// registers, for the byte-aligned widths (2, 4, 8 bits); the rest of a chunk
// (and every other width) goes through fields_impl and the packers above.
//
// The division q = |g| / div is computed without a divide: with y = RN(1/div),
// q0 = RN(|g| * y), r = fma(-q0, div, |g|) (exact) and q = fma(r, y, q0),
// q is the correctly rounded quotient (Markstein's theorem: y within half an
// ulp of 1/div, q0 within one ulp of the quotient, no underflow or overflow).
// The conditions are kept by construction: a bucket takes this route only if
// 2^-100 <= div <= 2^100 (y normal), and a vector holding an element with
// 0 < |g| < lo = max(2^-100, div * 2^-119) (where r or q could be subnormal)
// is divided instead. tests/comm/qsgd_codec_test.cpp checks the bytes against
// a float64 reference at every level, tiny and subnormal values included, and
// QsgdDivision.* checks the quotient against the divide over whole binades.
struct BucketDiv {
  float div, y, lo;
  bool fast;
};

inline BucketDiv bucket_div(float div) {
  const bool fast = div >= 0x1p-100f && div <= 0x1p100f;
  return {div, fast ? 1.0f / div : 0.0f, std::max(0x1p-100f, div * 0x1p-119f), fast};
}

#if defined(__x86_64__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define TG_QSGD_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,bmi2"), always_inline)) inline

// a / div, correctly rounded, for 16 a >= 0 (see BucketDiv).
TG_QSGD_AVX512 __m512 quotient16(__m512 a, const BucketDiv& bd) {
  const __m512 div = _mm512_set1_ps(bd.div);
  if (!bd.fast) return _mm512_div_ps(a, div);
  const __m512 y = _mm512_set1_ps(bd.y);
  const __m512 q0 = _mm512_mul_ps(a, y);
  const __mmask16 tiny = _mm512_mask_cmp_ps_mask(_mm512_cmp_ps_mask(a, _mm512_set1_ps(bd.lo), _CMP_LT_OQ), a,
                                                 _mm512_setzero_ps(), _CMP_NEQ_OQ);
  if (__builtin_expect(tiny != 0, 0)) return _mm512_div_ps(a, div);
  return _mm512_fmadd_ps(_mm512_fnmadd_ps(q0, div, a), y, q0);
}

// Version 2's level without u as a float, for r = q * levels < 128 (every
// fused kernel: 8-bit fields hold levels <= 127, and q = |g| / norm <= 1, as
// the float norm is at least the bucket's largest |g|). The reference takes
// l = trunc(r), frac = r - l and rounds up iff u < t, with u = 256 h + 128 (h
// the element's 16-bit half) and t = frac * 2^24 (both exact). Dividing by
// 256: h + 1/2 < frac * 2^16, and for an integer h that is
// h < ceil(frac * 2^16 - 1/2). With M = r * 2^16 = l * 2^16 + frac * 2^16
// (exact: a power of two) and T = ceil(M - 1/2) = l * 2^16 + that ceiling,
// it rounds up iff h <= T - l * 2^16 - 1, so the level l + up is
// floor((T - 1 - h) / 2^16) + 1 = (T + 65535 - h) >> 16: T - 1 - h lies in
// [(l - 1) * 2^16, (l + 1) * 2^16) as h runs over [0, 2^16).
// M - 1/2 is exact in float: for M >= 1/2, M < 2^23 is a multiple of its ulp
// (<= 1/2, so 1/2 is one too) and M - 1/2 < M keeps that grid with fewer
// than 2^24 steps; for M < 1/2 it is negative, T = 0, and the level is 0 as
// in the reference (t < 128 <= u). So the FMA's one rounding changes
// nothing and T in [0, 2^23) converts exactly.
// tests/comm/qsgd_codec_test.cpp checks it for every h at its tie and the
// floats beside it, over a spread of integer parts, and r over every binade
// below 128 (QsgdRounding.*), and the bytes against the float64 reference
// at every SIMD level, both streams.

// Version 2's levels of 16 elements: r in [0, 128), h their halves.
TG_QSGD_AVX512 __m512i level_of_halves16(__m512 r, __m256i h) {
  const __m512i t = _mm512_cvt_roundps_epi32(_mm512_fmsub_ps(r, _mm512_set1_ps(65536.0f), _mm512_set1_ps(0.5f)),
                                             _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC);
  return _mm512_srli_epi32(_mm512_sub_epi32(_mm512_add_epi32(t, _mm512_set1_epi32(65535)), _mm512_cvtepu16_epi32(h)),
                           16);
}

// Levels and sign-of-kept masks of 16 elements with their random integers:
// version 1's words (u = word >> 8) or version 2's halves.
template <bool kUnitLevels, bool kHalves>  // levels = 1 (2-bit fields): r = q * 1 = q, the multiply skipped
TG_QSGD_AVX512 __m512i levels16(const float* g, const void* rnd, const BucketDiv& bd, __m512 levels,
                                __mmask16& neg) {
  const __m512 x = _mm512_loadu_ps(g);
  const __m512 a = _mm512_abs_ps(x);
  const __m512 q = quotient16(a, bd);
  const __m512 r = kUnitLevels ? q : _mm512_mul_ps(q, levels);
  __m512i level;
  if constexpr (kHalves) {
    level = level_of_halves16(r, _mm256_loadu_si256(static_cast<const __m256i*>(rnd)));
  } else {
    const __m512i l = _mm512_cvttps_epi32(r);
    const __m512 t = _mm512_mul_ps(_mm512_sub_ps(r, _mm512_cvtepi32_ps(l)), _mm512_set1_ps(16777216.0f));
    const __m512 u = _mm512_cvtepi32_ps(_mm512_srli_epi32(_mm512_loadu_si512(rnd), 8));
    level = _mm512_mask_add_epi32(l, _mm512_cmp_ps_mask(u, t, _CMP_LT_OQ), l, _mm512_set1_epi32(1));
  }
  neg = _mm512_movepi32_mask(_mm512_castps_si512(x)) & _mm512_test_epi32_mask(level, level);
  return level;
}

// Elements [0, len) (whole vectors of 16 only) packed at kBits bits from out;
// returns the elements done. rnd: len words (version 1) or halves (2).
template <int kBits, bool kHalves>
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,bmi2"))) size_t avx512_fields_packed(
    const float* g, size_t len, const BucketDiv& bucket, float lv, const void* rnd, uint8_t* out) {
  const BucketDiv bd = bucket;  // a local copy: the stores to out cannot alias it, so its broadcasts stay hoisted
  const __m512 levels = _mm512_set1_ps(lv);
  const auto* words = static_cast<const uint32_t*>(rnd);
  const auto* halves = static_cast<const uint16_t*>(rnd);
  size_t i = 0;
  for (; i + 16 <= len; i += 16) {
    __mmask16 neg;
    const void* ri = kHalves ? static_cast<const void*>(halves + i) : static_cast<const void*>(words + i);
    const __m512i level = levels16<kBits == 2, kHalves>(g + i, ri, bd, levels, neg);
    if (kBits == 2) {  // levels = 1: field = level << 1 | sign, level 0 or 1
      const uint32_t bits = _pdep_u32(_cvtmask16_u32(_mm512_test_epi32_mask(level, level)), 0xAAAAAAAAu) |
                            _pdep_u32(_cvtmask16_u32(neg), 0x55555555u);
      std::memcpy(out + i / 4, &bits, 4);
    } else {
      const __m512i f = _mm512_mask_or_epi32(_mm512_slli_epi32(level, 1), neg, _mm512_slli_epi32(level, 1),
                                             _mm512_set1_epi32(1));
      if (kBits == 8) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm512_cvtepi32_epi8(f));
      } else {  // 4 bits: in each 64-bit lane, the odd field joins the even one's byte
        const __m512i pair = _mm512_or_si512(f, _mm512_srli_epi64(f, 28));
        _mm_storel_epi64(reinterpret_cast<__m128i*>(out + i / 2), _mm512_cvtepi64_epi8(pair));
      }
    }
  }
  return i;
}

#define TG_QSGD_AVX2 __attribute__((target("avx2,fma,bmi2"), always_inline)) inline

// a[v] / div, correctly rounded, for V vectors of 8 a >= 0 (see BucketDiv).
// One test of the V vectors for a tiny element, in integers: 0 < a < lo iff
// bits(a) - 1 < bits(lo) - 1 unsigned, which a signed compare of both sides
// plus 2^31 - 1 (mod 2^32) decides.
template <int V>
TG_QSGD_AVX2 void quotients8(const __m256 (&a)[V], const BucketDiv& bd, __m256 (&q)[V]) {
  const __m256 div = _mm256_set1_ps(bd.div);
  bool divide = !bd.fast;
  if (!divide) {
    const __m256i bias = _mm256_set1_epi32(0x7FFFFFFF);
    const __m256i lo_key = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(std::bit_cast<uint32_t>(bd.lo))), bias);
    __m256i tiny = _mm256_setzero_si256();
    for (int v = 0; v < V; ++v)
      tiny = _mm256_or_si256(tiny, _mm256_cmpgt_epi32(lo_key, _mm256_add_epi32(_mm256_castps_si256(a[v]), bias)));
    divide = __builtin_expect(!_mm256_testz_si256(tiny, tiny), 0);
  }
  if (divide) {
    for (int v = 0; v < V; ++v) q[v] = _mm256_div_ps(a[v], div);
    return;
  }
  const __m256 y = _mm256_set1_ps(bd.y);
  for (int v = 0; v < V; ++v) {
    const __m256 q0 = _mm256_mul_ps(a[v], y);
    q[v] = _mm256_fmadd_ps(_mm256_fnmadd_ps(q0, div, a[v]), y, q0);
  }
}

// Version 2's levels of 8 elements (see level_of_halves16): r in [0, 128).
TG_QSGD_AVX2 __m256i level_of_halves8(__m256 r, __m128i h) {
  const __m256 m = _mm256_fmsub_ps(r, _mm256_set1_ps(65536.0f), _mm256_set1_ps(0.5f));
  const __m256i t = _mm256_cvttps_epi32(_mm256_round_ps(m, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC));
  return _mm256_srli_epi32(_mm256_sub_epi32(_mm256_add_epi32(t, _mm256_set1_epi32(65535)), _mm256_cvtepu16_epi32(h)),
                           16);
}

// Levels of 8 elements; sign-of-kept as 0/1 per lane. rnd: 8 words (version
// 1) or halves (2: level_of_halves8).
template <bool kHalves>
TG_QSGD_AVX2 __m256i levels8(__m256 x, __m256 q, const void* rnd, __m256 levels, __m256i& sign) {
  const __m256 r = _mm256_mul_ps(q, levels);
  __m256i level;
  if constexpr (kHalves) {
    level = level_of_halves8(r, _mm_loadu_si128(static_cast<const __m128i*>(rnd)));
  } else {
    const __m256i l = _mm256_cvttps_epi32(r);
    const __m256 t = _mm256_mul_ps(_mm256_sub_ps(r, _mm256_cvtepi32_ps(l)), _mm256_set1_ps(16777216.0f));
    const __m256 u = _mm256_cvtepi32_ps(_mm256_srli_epi32(_mm256_loadu_si256(static_cast<const __m256i*>(rnd)), 8));
    level = _mm256_sub_epi32(l, _mm256_castps_si256(_mm256_cmp_ps(u, t, _CMP_LT_OQ)));  // - (-1)
  }
  const __m256i nonzero = _mm256_cmpgt_epi32(level, _mm256_setzero_si256());
  sign = _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(x), 31), nonzero);
  return level;
}

// V vectors of 8 elements from g: their values and quotients |x| / div.
template <int V>
TG_QSGD_AVX2 void load_quotients8(const float* g, const BucketDiv& bd, __m256 (&x)[V], __m256 (&q)[V]) {
  __m256 a[V];
  for (int v = 0; v < V; ++v) {
    x[v] = _mm256_loadu_ps(g + 8 * v);
    a[v] = _mm256_and_ps(x[v], _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF)));
  }
  quotients8<V>(a, bd, q);
}

template <int kBits, bool kHalves>
__attribute__((target("avx2,fma,bmi2"))) size_t avx2_fields_packed(const float* g, size_t len,
                                                                   const BucketDiv& bucket, float lv, const void* rnd,
                                                                   uint8_t* out) {
  const BucketDiv bd = bucket;  // a local copy: the stores to out cannot alias it, so its broadcasts stay hoisted
  const __m256 levels = _mm256_set1_ps(lv);
  const auto at = [rnd](size_t i) -> const void* {
    return kHalves ? static_cast<const void*>(static_cast<const uint16_t*>(rnd) + i)
                   : static_cast<const void*>(static_cast<const uint32_t*>(rnd) + i);
  };
  size_t i = 0;
  if (kBits == 2) {
    for (; i + 16 <= len; i += 16) {
      __m256 x[2], q[2];
      load_quotients8<2>(g + i, bd, x, q);
      __m256i s0, s1;
      const __m256i l0 = levels8<kHalves>(x[0], q[0], at(i), levels, s0),
                    l1 = levels8<kHalves>(x[1], q[1], at(i + 8), levels, s1);
      // Bit 31 of each lane: level 1 (its bit 0 shifted up), sign.
      const uint32_t lm = static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_slli_epi32(l0, 31)))) |
                          static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_slli_epi32(l1, 31)))) << 8;
      const uint32_t sm = static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_slli_epi32(s0, 31)))) |
                          static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_slli_epi32(s1, 31)))) << 8;
      const uint32_t bits = _pdep_u32(lm, 0xAAAAAAAAu) | _pdep_u32(sm, 0x55555555u);
      std::memcpy(out + i / 4, &bits, 4);
    }
    return i;
  }
  for (; i + 32 <= len; i += 32) {
    __m256 x[4], q[4];
    load_quotients8<4>(g + i, bd, x, q);
    __m256i f[4];
    for (int v = 0; v < 4; ++v) {
      __m256i sign;
      const __m256i level = levels8<kHalves>(x[v], q[v], at(i + 8 * v), levels, sign);
      f[v] = _mm256_or_si256(_mm256_slli_epi32(level, 1), sign);
    }
    // 32-bit fields -> bytes in element order (the packs work per 128-bit lane).
    const __m256i b = _mm256_permutevar8x32_epi32(
        _mm256_packus_epi16(_mm256_packus_epi32(f[0], f[1]), _mm256_packus_epi32(f[2], f[3])),
        _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    if (kBits == 8) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), b);
    } else {  // 4 bits: byte pairs -> f_even + 16 * f_odd in 16-bit lanes, then bytes
      const __m256i pairs = _mm256_maddubs_epi16(b, _mm256_set1_epi16(0x1001));
      const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi16(pairs, pairs), 0x08);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i / 2), _mm256_castsi256_si128(packed));
    }
  }
  return i;
}

// FORMATS.md's sum of squares (16 float64 lanes, lane m % 16 in index order,
// folded 8, 4, 2, 1) with one FMA per square: x * x of a float is exact in
// float64, so acc + x * x rounds once either way and the FMA gives the bits
// of the separate multiply and add (which -ffp-contract=off leaves GCC's
// vectorized loop: 6 uops per 16 elements instead of 4).
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl"))) double avx512_sum_squares_fma(const float* x,
                                                                                           size_t len) {
  __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();  // lanes 0-7, 8-15
  size_t m = 0;
  for (; m + 16 <= len; m += 16) {
    const __m512d a = _mm512_cvtps_pd(_mm256_loadu_ps(x + m)), b = _mm512_cvtps_pd(_mm256_loadu_ps(x + m + 8));
    lo = _mm512_fmadd_pd(a, a, lo);
    hi = _mm512_fmadd_pd(b, b, hi);
  }
  alignas(64) double lane[kNormLanes];
  _mm512_store_pd(lane, lo);
  _mm512_store_pd(lane + 8, hi);
  for (int l = 0; m + l < len; ++l) {
    const double v = static_cast<double>(x[m + l]);
    lane[l] += v * v;
  }
  for (int o = kNormLanes / 2; o >= 1; o /= 2)
    for (int l = 0; l < o; ++l) lane[l] += lane[l + o];
  return lane[0];
}

__attribute__((target("avx2,fma"))) double avx2_sum_squares_fma(const float* x, size_t len) {
  __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
  size_t m = 0;
  for (; m + 16 <= len; m += 16)
    for (int v = 0; v < 4; ++v) {
      const __m256d a = _mm256_cvtps_pd(_mm_loadu_ps(x + m + 4 * v));
      acc[v] = _mm256_fmadd_pd(a, a, acc[v]);
    }
  alignas(32) double lane[kNormLanes];
  for (int v = 0; v < 4; ++v) _mm256_store_pd(lane + 4 * v, acc[v]);
  for (int l = 0; m + l < len; ++l) {
    const double v = static_cast<double>(x[m + l]);
    lane[l] += v * v;
  }
  for (int o = kNormLanes / 2; o >= 1; o /= 2)
    for (int l = 0; l < o; ++l) lane[l] += lane[l + o];
  return lane[0];
}

__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,bmi2"))) void avx512_quotients(const float* a, size_t n,
                                                                                         float div, float* q) {
  const BucketDiv bd = bucket_div(div);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(q + i, quotient16(_mm512_loadu_ps(a + i), bd));
  for (; i < n; ++i) q[i] = a[i] / div;
}
__attribute__((target("avx2,fma,bmi2"))) void avx2_quotients(const float* a, size_t n, float div, float* q) {
  const BucketDiv bd = bucket_div(div);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {  // as the packed kernel divides: 4 vectors, one tiny test
    __m256 av[4], qv[4];
    for (int v = 0; v < 4; ++v) av[v] = _mm256_loadu_ps(a + i + 8 * v);
    quotients8<4>(av, bd, qv);
    for (int v = 0; v < 4; ++v) _mm256_storeu_ps(q + i + 8 * v, qv[v]);
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 av[1] = {_mm256_loadu_ps(a + i)};
    __m256 qv[1];
    quotients8<1>(av, bd, qv);
    _mm256_storeu_ps(q + i, qv[0]);
  }
  for (; i < n; ++i) q[i] = a[i] / div;
}
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,bmi2"))) void avx512_levels_of_halves(
    const float* r, const uint16_t* h, size_t n, uint32_t* level) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_si512(level + i, level_of_halves16(_mm512_loadu_ps(r + i),
                                                     _mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + i))));
  for (; i < n; ++i) level[i] = level_of_halves_reference(r[i], h[i]);
}
__attribute__((target("avx2,fma,bmi2"))) void avx2_levels_of_halves(const float* r, const uint16_t* h, size_t n,
                                                                    uint32_t* level) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(level + i),
                        level_of_halves8(_mm256_loadu_ps(r + i), _mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
  for (; i < n; ++i) level[i] = level_of_halves_reference(r[i], h[i]);
}
// half_words_impl with the halves widened in registers (x86 is little-endian:
// the 16-bit halves lie in memory in element order).
__attribute__((target("avx512f,avx512bw"))) void avx512_half_words(const uint32_t* raw, size_t first_half,
                                                                   size_t len, uint32_t* words) {
  const uint16_t* h = reinterpret_cast<const uint16_t*>(raw) + first_half;
  const __m512i mid = _mm512_set1_epi32(0x8000);
  size_t j = 0;
  for (; j + 16 <= len; j += 16) {
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + j)));
    _mm512_storeu_si512(words + j, _mm512_or_si512(_mm512_slli_epi32(wide, 16), mid));
  }
  half_words_impl(raw, first_half + j, len - j, words + j);
}
__attribute__((target("avx2"))) void avx2_half_words(const uint32_t* raw, size_t first_half, size_t len,
                                                     uint32_t* words) {
  const uint16_t* h = reinterpret_cast<const uint16_t*>(raw) + first_half;
  const __m256i mid = _mm256_set1_epi32(0x8000);
  size_t j = 0;
  for (; j + 8 <= len; j += 8) {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + j)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(words + j), _mm256_or_si256(_mm256_slli_epi32(wide, 16), mid));
  }
  half_words_impl(raw, first_half + j, len - j, words + j);
}
#pragma GCC diagnostic pop
#endif

// Fused kernel: (g, len, bucket divisor, levels, random integers, out) -> elements done.
using FieldsPacked = size_t (*)(const float*, size_t, const BucketDiv&, float, const void*, uint8_t*);

struct Kernels {
  double (*sum_squares)(const float*, size_t);
  void (*fields)(const float*, size_t, float, float, const uint32_t*, uint16_t*);
  void (*pack2)(const uint16_t*, size_t, uint8_t*);
  void (*pack4)(const uint16_t*, size_t, uint8_t*);
  void (*pack8)(const uint16_t*, size_t, uint8_t*);
  // Fused x86 kernels for 2-, 4- and 8-bit fields, or nullptr: [0] takes
  // version 1's words, [1] version 2's halves.
  FieldsPacked packed2[2], packed4[2], packed8[2];
  void (*half_words)(const uint32_t*, size_t, size_t, uint32_t*);
};

#define TG_QSGD_KERNELS(NAME, ATTR, SS, P2, P4, P8, HW)                                                           \
  ATTR void NAME##_fields(const float* g, size_t len, float div, float lv, const uint32_t* w, uint16_t* f) { \
    fields_impl(g, len, div, lv, w, f);                                                                       \
  }                                                                                                           \
  ATTR void NAME##_pack2(const uint16_t* f, size_t len, uint8_t* o) { pack2_impl(f, len, o); }                \
  ATTR void NAME##_pack4(const uint16_t* f, size_t len, uint8_t* o) { pack4_impl(f, len, o); }                \
  ATTR void NAME##_pack8(const uint16_t* f, size_t len, uint8_t* o) { pack8_impl(f, len, o); }                \
  constexpr Kernels k##NAME = {SS,           NAME##_fields, NAME##_pack2, NAME##_pack4, NAME##_pack8,         \
                               P2,                 P4,            P8,            HW};

double portable_sum_squares(const float* x, size_t len) { return sum_squares_impl(x, len); }
void portable_half_words(const uint32_t* raw, size_t first_half, size_t len, uint32_t* words) {
  half_words_impl(raw, first_half, len, words);
}
TG_QSGD_KERNELS(portable, , portable_sum_squares, {}, {}, {}, portable_half_words)
#if defined(__x86_64__)
#define TG_QSGD_BOTH_STREAMS(F, BITS) \
  { F<BITS, false>, F<BITS, true> }
TG_QSGD_KERNELS(avx2, __attribute__((target("avx2,fma,bmi2"))), avx2_sum_squares_fma,
                TG_QSGD_BOTH_STREAMS(avx2_fields_packed, 2), TG_QSGD_BOTH_STREAMS(avx2_fields_packed, 4),
                TG_QSGD_BOTH_STREAMS(avx2_fields_packed, 8), avx2_half_words)
TG_QSGD_KERNELS(avx512, __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl"))), avx512_sum_squares_fma,
                TG_QSGD_BOTH_STREAMS(avx512_fields_packed, 2), TG_QSGD_BOTH_STREAMS(avx512_fields_packed, 4),
                TG_QSGD_BOTH_STREAMS(avx512_fields_packed, 8), avx512_half_words)
#endif

const Kernels& kernels() {
#if defined(__x86_64__)
  switch (tq::cpu_simd_level()) {
    case tq::SimdLevel::kAvx512: return kavx512;
    case tq::SimdLevel::kAvx2: return kavx2;
    default: break;
  }
#endif
  return kportable;
}

// ---------------------------------------------------------------- packing
// A little-endian bit stream: field e of width w at bits [e*w, (e+1)*w).
struct BitWriter {
  uint8_t* p;
  uint64_t acc = 0;
  uint32_t nbits = 0;
  TG_QSGD_INLINE void put(uint32_t f, uint32_t w) {
    acc |= static_cast<uint64_t>(f) << nbits;
    nbits += w;
    if (nbits >= 32) {
      tq::store_le32(p, static_cast<uint32_t>(acc));
      p += 4;
      acc >>= 32;
      nbits -= 32;
    }
  }
  void flush() {  // the last partial bytes; unused bits are zero
    for (; nbits > 0; nbits = nbits >= 8 ? nbits - 8 : 0) {
      *p++ = static_cast<uint8_t>(acc);
      acc >>= 8;
    }
  }
};

uint32_t read_field(const uint8_t* body, uint64_t e, uint32_t w) {
  const uint64_t bit = e * w;
  const uint8_t* p = body + (bit >> 3);
  const uint32_t s = static_cast<uint32_t>(bit & 7);
  const uint32_t need = (s + w + 7) / 8;  // bytes the field spans, <= 3
  uint32_t v = p[0];
  if (need > 1) v |= static_cast<uint32_t>(p[1]) << 8;
  if (need > 2) v |= static_cast<uint32_t>(p[2]) << 16;
  return (v >> s) & ((1u << w) - 1);
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08X", v);
  return buf;
}

class QsgdCodec final : public GradientCodec {
 public:
  explicit QsgdCodec(const QsgdParams& p) : params_(p), bits_(field_bits(p.levels)) {
    if (p.levels < 1 || p.levels > 32767)
      throw std::invalid_argument("qsgd: levels=" + std::to_string(p.levels) + " is outside 1..32767");
    if (p.bucket < 4 || p.bucket % 4 != 0)
      throw std::invalid_argument("qsgd: bucket=" + std::to_string(p.bucket) + " must be a multiple of 4, >= 4");
  }

  std::string spec() const override { return to_spec(config()); }
  CodecConfig config() const override { return {params_, std::nullopt}; }

  size_t payload_bytes(uint64_t n) const override {
    const uint64_t slots = norm_slots(n, params_.bucket);
    if (n > (std::numeric_limits<uint64_t>::max() / 2 - 64) / bits_)
      throw std::invalid_argument("qsgd payload_bytes: element count " + std::to_string(n) + " is too large");
    return kQsgdHeaderBytes + 4 * slots + (n * bits_ + 7) / 8;
  }

  void encode_slices(std::span<const float> grad, const EncodeContext& ctx, std::span<const ElementRange> slices,
                     std::span<const std::span<uint8_t>> outs) override {
    check_slices("qsgd", grad.size(), slices, outs, *this);
    const Kernels& k = kernels();
    for (size_t i = 0; i < slices.size(); ++i) encode_one(k, grad, ctx, slices[i], outs[i].data());
  }

  void decode(std::span<const uint8_t> payload, std::span<float> out) const override { decode_impl(payload, out, false); }
  void decode_accumulate(std::span<const uint8_t> payload, std::span<float> out) const override {
    decode_impl(payload, out, true);
  }
  void validate(std::span<const uint8_t> payload, uint64_t n) const override { check(payload, n, "validate"); }

 private:
  struct Parsed {
    uint64_t n, first, used, slots;
    const uint8_t* norms;
    const uint8_t* body;
  };

  void encode_one(const Kernels& k, std::span<const float> grad, const EncodeContext& ctx, const ElementRange& s,
                  uint8_t* out) const {
    const uint64_t B = params_.bucket, N = grad.size();
    const uint64_t first = s.begin % B, used = used_slots(s.count, first, B), slots = norm_slots(s.count, B);
    uint8_t* h = out;
    tq::store_le32(h + kOffMagic, kQsgdMagicLe32);
    h[kOffVersion] = static_cast<uint8_t>(params_.stream);
    h[kOffBits] = static_cast<uint8_t>(bits_);
    h[kOffLevels] = static_cast<uint8_t>(params_.levels);
    h[kOffLevels + 1] = static_cast<uint8_t>(params_.levels >> 8);
    tq::store_le32(h + kOffBucket, static_cast<uint32_t>(B));
    tq::store_le32(h + kOffFirst, static_cast<uint32_t>(first));
    tq::store_le64(h + kOffCount, s.count);
    tq::store_le32(h + kOffReserved, 0);
    tq::store_le32(h + kOffCrc, tq::crc32_ieee(h, kOffCrc));
    uint8_t* norms = out + kQsgdHeaderBytes;
    for (uint64_t j = used; j < slots; ++j) tq::store_le32(norms + 4 * j, 0);  // the unused slot: +0.0
    uint8_t* body = norms + 4 * slots;
    // The slice's elements on the OpenMP team, cut at multiples of 8 (every
    // range starts on a whole byte of the body and on a Philox block). A
    // bucket the cut splits has its norm computed by both threads from the
    // whole bucket (same bits) and stored by the one holding its start.
    // A non-finite bucket stops its thread; the first one is named.
    std::atomic<uint64_t> bad{kNoBucket};
    for_each_range(s.count, 8, [&](uint64_t r0, uint64_t r1) {
      const uint64_t bad_here = encode_range(k, grad, ctx, s, s.begin + r0, s.begin + r1, norms, body + r0 * bits_ / 8);
      for (uint64_t cur = bad.load(); bad_here < cur && !bad.compare_exchange_weak(cur, bad_here);) {
      }
    });
    if (const uint64_t j = bad.load(); j != kNoBucket) {
      const uint64_t b0 = (s.begin / B + j) * B;
      throw_non_finite(grad, b0, std::min(b0 + B, N));
    }
  }

  static constexpr uint64_t kNoBucket = ~uint64_t{0};

  // Elements [a0, a1) of slice s, their fields written from `out` on (a0 -
  // s.begin a multiple of 8), and the norms of the buckets that start in the
  // range. Returns the slot of the first bucket whose sum of squares is not
  // finite (nothing after it is written), or kNoBucket.
  uint64_t encode_range(const Kernels& k, std::span<const float> grad, const EncodeContext& ctx,
                        const ElementRange& s, uint64_t a0, uint64_t a1, uint8_t* norms, uint8_t* out) const {
    const uint64_t B = params_.bucket, N = grad.size();
    BitWriter bw{out};
    const float levels = static_cast<float>(params_.levels);
    alignas(64) uint32_t words[kChunk];
    alignas(64) uint32_t raw[4 * ((kChunk + 4 + 7) / 8)];  // version 2's Philox words: the halves
    alignas(64) uint16_t fields[kChunk];
    const bool halves = params_.stream == tq::RandomStream::kPhilox7Half16;
    tq::PhiloxStream philox(ctx.seed, ctx.step, ctx.tensor_id, halves ? 7 : 10);
    const int stream = halves ? 1 : 0;
    const FieldsPacked packed = bits_ == 2   ? k.packed2[stream]
                                : bits_ == 4 ? k.packed4[stream]
                                : bits_ == 8 ? k.packed8[stream]
                                             : nullptr;
    // Prefetches run 2 buckets (at least 4 KiB) ahead and stop at the end of
    // the last bucket this range touches.
    const uint64_t ahead = std::max<uint64_t>(2 * B, 1024), prefetch_end = std::min(N, (a1 + B - 1) / B * B);
    for (uint64_t j = a0 / B - s.begin / B;; ++j) {
      const uint64_t b0 = (s.begin / B + j) * B, b1 = std::min(b0 + B, N);
      if (b0 >= a1) break;
      const double sumsq = k.sum_squares(grad.data() + b0, b1 - b0);
      if (!std::isfinite(sumsq)) return j;
      const double nd = std::sqrt(sumsq);
      // Saturates: a norm above FLT_MAX is sent as FLT_MAX (every |g| <= FLT_MAX still).
      const float norm = nd > std::numeric_limits<float>::max() ? std::numeric_limits<float>::max()
                                                                : static_cast<float>(nd);
      if (std::max(b0, s.begin) >= a0) tq::store_le32(norms + 4 * j, std::bit_cast<uint32_t>(norm));
      const float div = norm > 0.0f ? norm : 1.0f;
      const BucketDiv bd = bucket_div(div);
      const uint64_t e1 = std::min(b1, a1);
      for (uint64_t e = std::max(b0, a0); e < e1; e += kChunk) {
        const size_t len = static_cast<size_t>(std::min<uint64_t>(kChunk, e1 - e));
        // Buckets ahead are fetched while this one's levels are computed (the
        // norm pass is the first touch of a bucket and otherwise waits on
        // memory), a chunk's worth of lines per chunk: a whole bucket of
        // prefetches at once stalls on the line fill buffers.
        for (uint64_t q = e + ahead, q1 = std::min({e + ahead + len, prefetch_end}); q < q1; q += 16)
          __builtin_prefetch(grad.data() + q, 0, 2);
        // Version 2: element i's half is half (e % 8) + i of the blocks from
        // e / 8 (a bucket or cut may start mid-block); x86 is little-endian,
        // so the halves lie in raw in element order, and the fused kernels
        // read them there. Version 1: element i's word is words[i].
        const size_t off = static_cast<size_t>(e % 8);
        if (halves)
          philox.words(e / 8, (off + len + 7) / 8, raw);
        else
          philox.words(e / 4, (len + 3) / 4, words);  // e is a multiple of 4 (buckets and cuts are)
        size_t done = 0;
        if (packed != nullptr && bw.nbits == 0) {  // whole vectors in registers, straight to bytes
          const void* rnd = halves ? static_cast<const void*>(reinterpret_cast<const uint16_t*>(raw) + off)
                                   : static_cast<const void*>(words);
          done = packed(grad.data() + e, len, bd, levels, rnd, bw.p);
          bw.p += done * bits_ / 8;
        }
        if (done < len) {
          if (halves) k.half_words(raw, off + done, len - done, words + done);
          k.fields(grad.data() + e + done, len - done, div, levels, words + done, fields);
          pack(k, bw, fields, len - done);
        }
      }
    }
    bw.flush();
    return kNoBucket;
  }

  // Appends len fields. Whole bytes of 2-, 4- and 8-bit fields go through
  // the level's packers while the stream is byte-aligned (it is at every
  // chunk start: chunks and buckets are multiples of 4 elements); the rest,
  // and every other width, through the general BitWriter.
  void pack(const Kernels& k, BitWriter& bw, const uint16_t* f, size_t len) const {
    if (bw.nbits == 0) {
      size_t done = 0;
      if (bits_ == 2) {
        done = len / 4 * 4;
        k.pack2(f, done, bw.p);
      } else if (bits_ == 4) {
        done = len / 2 * 2;
        k.pack4(f, done, bw.p);
      } else if (bits_ == 8) {
        done = len;
        k.pack8(f, done, bw.p);
      } else if (bits_ == 16) {
        for (size_t i = 0; i < len; ++i) {
          bw.p[2 * i] = static_cast<uint8_t>(f[i]);
          bw.p[2 * i + 1] = static_cast<uint8_t>(f[i] >> 8);
        }
        done = len;
      }
      bw.p += done * bits_ / 8;
      f += done;
      len -= done;
    }
    const uint32_t w = bits_;
    for (size_t i = 0; i < len; ++i) bw.put(f[i], w);
  }

  [[noreturn]] static void throw_non_finite(std::span<const float> grad, uint64_t b0, uint64_t b1) {
    for (uint64_t i = b0; i < b1; ++i)
      if (!std::isfinite(grad[i]))
        throw std::invalid_argument("qsgd encode: element " + std::to_string(i) + " is " +
                                    (std::isnan(grad[i]) ? "NaN" : "infinite"));
    throw std::logic_error("qsgd encode: non-finite bucket sum without a non-finite element");
  }

  // Every check of FORMATS.md "A decoder rejects", before anything is written.
  Parsed check(std::span<const uint8_t> payload, uint64_t expect_n, const char* op) const {
    const std::string pre = std::string("qsgd ") + op + ": ";
    if (payload.size() < kQsgdHeaderBytes)
      throw std::runtime_error(pre + "payload has " + std::to_string(payload.size()) + " bytes, less than the " +
                               std::to_string(kQsgdHeaderBytes) + "-byte header");
    const uint8_t* h = payload.data();
    if (const uint32_t m = tq::load_le32(h + kOffMagic); m != kQsgdMagicLe32)
      throw std::runtime_error(pre + "bad magic " + hex32(m) + " (expected " + hex32(kQsgdMagicLe32) + ", \"TGQS\")");
    if (h[kOffVersion] < kOldestVersion || h[kOffVersion] > kNewestVersion)
      throw std::runtime_error(pre + "unsupported format version " + std::to_string(h[kOffVersion]) + " (known: " +
                               std::to_string(kOldestVersion) + " to " + std::to_string(kNewestVersion) + ")");
    if (const uint32_t crc = tq::crc32_ieee(h, kOffCrc), got = tq::load_le32(h + kOffCrc); crc != got)
      throw std::runtime_error(pre + "header CRC " + hex32(got) + " does not match the header (" + hex32(crc) + ")");
    const uint32_t levels = h[kOffLevels] | (static_cast<uint32_t>(h[kOffLevels + 1]) << 8);
    if (levels != params_.levels)
      throw std::runtime_error(pre + "payload has levels=" + std::to_string(levels) + ", this codec levels=" +
                               std::to_string(params_.levels));
    if (h[kOffBits] != bits_)
      throw std::runtime_error(pre + "payload has " + std::to_string(h[kOffBits]) + " bits per element, levels=" +
                               std::to_string(levels) + " needs " + std::to_string(bits_));
    if (const uint32_t b = tq::load_le32(h + kOffBucket); b != params_.bucket)
      throw std::runtime_error(pre + "payload has bucket=" + std::to_string(b) + ", this codec bucket=" +
                               std::to_string(params_.bucket));
    const uint64_t first = tq::load_le32(h + kOffFirst);
    if (first >= params_.bucket || first % 4 != 0)
      throw std::runtime_error(pre + "first bucket offset " + std::to_string(first) +
                               " is not a multiple of 4 below the bucket size " + std::to_string(params_.bucket));
    if (const uint32_t r = tq::load_le32(h + kOffReserved); r != 0)
      throw std::runtime_error(pre + "reserved header bytes 24-27 are " + hex32(r) + " (must be 0)");
    const uint64_t n = tq::load_le64(h + kOffCount);
    if (n > (uint64_t{1} << 56))
      throw std::runtime_error(pre + "element count " + std::to_string(n) + " is implausibly large");
    if (const size_t want = payload_bytes(n); payload.size() != want)
      throw std::runtime_error(pre + "payload has " + std::to_string(payload.size()) + " bytes, " +
                               std::to_string(n) + " elements take exactly " + std::to_string(want));
    if (n != expect_n)
      throw std::invalid_argument(pre + "output has " + std::to_string(expect_n) + " elements, payload has " +
                                  std::to_string(n));
    Parsed p{n, first, used_slots(n, first, params_.bucket), norm_slots(n, params_.bucket), h + kQsgdHeaderBytes,
             nullptr};
    p.body = p.norms + 4 * p.slots;
    for (uint64_t j = 0; j < p.slots; ++j) {
      const uint32_t bits = tq::load_le32(p.norms + 4 * j);
      const float v = std::bit_cast<float>(bits);
      if (j >= p.used) {
        if (bits != 0)
          throw std::runtime_error(pre + "unused norm slot " + std::to_string(j) + " holds " + hex32(bits) +
                                   " (must be 0)");
      } else if (!std::isfinite(v) || (bits >> 31) != 0) {
        throw std::runtime_error(pre + "norm " + std::to_string(j) + " is " +
                                 (std::isnan(v) ? "NaN" : std::isinf(v) ? "infinite" : "negative") + " (" +
                                 hex32(bits) + ")");
      }
    }
    const uint32_t w = bits_;
    const uint64_t B = params_.bucket;
    for (uint64_t j = 0; j < p.used; ++j) {
      const uint64_t e0 = j == 0 ? 0 : j * B - first, e1 = std::min(n, (j + 1) * B - first);
      const bool zero_norm = tq::load_le32(p.norms + 4 * j) == 0;
      for (uint64_t e = e0; e < e1; ++e) {
        const uint32_t f = read_field(p.body, e, w), level = f >> 1;
        if (level > levels || (f == 1) || (zero_norm && level != 0))
          throw std::runtime_error(pre + "element " + std::to_string(e) + " has level " + std::to_string(level) +
                                   (f & 1 ? " negative" : "") +
                                   (level > levels ? " above levels=" + std::to_string(levels)
                                    : f == 1     ? " (a negative zero, not canonical)"
                                                 : " in a bucket whose norm is 0"));
      }
    }
    const uint64_t bits_used = n * w, body_bytes = (bits_used + 7) / 8;
    if (bits_used % 8 != 0 && (p.body[body_bytes - 1] >> (bits_used % 8)) != 0)
      throw std::runtime_error(pre + "nonzero padding bits in the last body byte");
    return p;
  }

  void decode_impl(std::span<const uint8_t> payload, std::span<float> out, bool accumulate) const {
    const Parsed p = check(payload, out.size(), accumulate ? "decode_accumulate" : "decode");
    const uint64_t B = params_.bucket;
    const double S = params_.levels;
    const uint32_t w = bits_;
    float* o = out.data();
    for (uint64_t j = 0; j < p.used; ++j) {
      const uint64_t e0 = j == 0 ? 0 : j * B - p.first, e1 = std::min(p.n, (j + 1) * B - p.first);
      const double norm = std::bit_cast<float>(tq::load_le32(p.norms + 4 * j));
      for (uint64_t e = e0; e < e1; ++e) {
        const uint32_t f = w == 8 ? p.body[e] : read_field(p.body, e, w);
        float v = static_cast<float>(norm * static_cast<double>(f >> 1) / S);
        if (f & 1) v = -v;
        if (accumulate)
          o[e] += v;
        else
          o[e] = v;
      }
    }
  }

  QsgdParams params_;
  uint32_t bits_;
};

}  // namespace

void qsgd_quotients(const float* a, size_t n, float div, float* q) {
#if defined(__x86_64__)
  switch (tq::cpu_simd_level()) {
    case tq::SimdLevel::kAvx512: return avx512_quotients(a, n, div, q);
    case tq::SimdLevel::kAvx2: return avx2_quotients(a, n, div, q);
    default: break;
  }
#endif
  for (size_t i = 0; i < n; ++i) q[i] = a[i] / div;
}

void qsgd_levels_of_halves(const float* r, const uint16_t* h, size_t n, uint32_t* level) {
#if defined(__x86_64__)
  switch (tq::cpu_simd_level()) {
    case tq::SimdLevel::kAvx512: return avx512_levels_of_halves(r, h, n, level);
    case tq::SimdLevel::kAvx2: return avx2_levels_of_halves(r, h, n, level);
    default: break;
  }
#endif
  for (size_t i = 0; i < n; ++i) level[i] = level_of_halves_reference(r[i], h[i]);
}

std::unique_ptr<GradientCodec> make_qsgd_codec(const QsgdParams& params) {
  return std::make_unique<QsgdCodec>(params);
}

}  // namespace terngrad::comm::detail
