#include "fp16_convert.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TG_FP16_HAVE_X86 1
#else
#define TG_FP16_HAVE_X86 0
#endif

namespace terngrad::comm::fp16 {

namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Rounds q + rem/2^shift to nearest, ties to even (rem < 2^shift).
uint32_t round_shifted(uint32_t q, uint32_t rem, uint32_t shift) {
  const uint32_t half = 1u << (shift - 1);
  return q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
}

uint16_t load_le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

void encode_portable(const float* x, size_t n, uint8_t* out) {
  for (size_t i = 0; i < n; ++i) {
    const uint16_t h = from_float(x[i]);
    out[2 * i] = static_cast<uint8_t>(h);
    out[2 * i + 1] = static_cast<uint8_t>(h >> 8);
  }
}
void decode_portable(const uint8_t* in, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = to_float(load_le16(in + 2 * i));
}
void decode_accumulate_portable(const uint8_t* in, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] += to_float(load_le16(in + 2 * i));
}

#if TG_FP16_HAVE_X86
// The target attribute lets these use AVX/F16C without compiling the whole
// library for a newer CPU; they only run after the CPUID check.
__attribute__((target("avx,f16c"))) void encode_f16c(const float* x, size_t n, uint8_t* out) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256 max_half = _mm256_set1_ps(kMaxFinite);
  const __m256 inf = _mm256_set1_ps(__builtin_huge_valf());
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    // Saturate 65504 < |v| < Inf (ordered compares are false for NaN, so NaN
    // passes through); the hardware would round these to Inf.
    const __m256 a = _mm256_and_ps(v, abs_mask);
    const __m256 big = _mm256_and_ps(_mm256_cmp_ps(a, max_half, _CMP_GT_OQ), _mm256_cmp_ps(a, inf, _CMP_LT_OQ));
    const __m256 sat = _mm256_or_ps(_mm256_andnot_ps(abs_mask, v), max_half);
    v = _mm256_blendv_ps(v, sat, big);
    const __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i), h);  // x86 is little-endian
  }
  encode_portable(x + i, n - i, out + 2 * i);
}

__attribute__((target("avx,f16c"))) void decode_f16c(const uint8_t* in, size_t n, float* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i))));
  decode_portable(in + 2 * i, n - i, out + i);
}

__attribute__((target("avx,f16c"))) void decode_accumulate_f16c(const uint8_t* in, size_t n, float* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i)));
    _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_loadu_ps(out + i), v));
  }
  decode_accumulate_portable(in + 2 * i, n - i, out + i);
}
#endif

bool detect_simd() {
#if TG_FP16_HAVE_X86
  return __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
#else
  return false;
#endif
}

bool initial_simd() {
  const char* env = std::getenv("TG_CPU_SIMD");
  return detect_simd() && !(env && env[0] == '0' && env[1] == '\0');
}

std::atomic<bool>& simd_flag() {
  static std::atomic<bool> flag{initial_simd()};
  return flag;
}

}  // namespace

uint16_t from_float(float x) {
  const uint32_t u = bits_of(x);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return sign | 0x7E00u | static_cast<uint16_t>((a >> 13) & 0x1FFu);  // NaN: quiet
  if (a == 0x7F800000u) return sign | 0x7C00u;                                            // Inf
  if (a >= 0x477FE000u) return sign | kMaxFiniteBits;  // >= 65504: saturate (RNE gives 65504 up to 65520)
  if (a >= 0x38800000u) {                              // >= 2^-14: a normal half
    const uint32_t r = a - (112u << 23);               // exponent bias 127 -> 15
    return sign | static_cast<uint16_t>(round_shifted(r >> 13, r & 0x1FFFu, 13));  // a carry bumps the exponent
  }
  if (a <= 0x33000000u) return sign;  // <= 2^-25: half of the smallest subnormal ties to 0 (even)
  // Subnormal half: value / 2^-24 = mantissa * 2^(e - 126), rounded to an integer.
  const uint32_t e = a >> 23, m = (a & 0x7FFFFFu) | 0x800000u, shift = 126u - e;  // shift in [14, 24]
  return sign | static_cast<uint16_t>(round_shifted(m >> shift, m & ((1u << shift) - 1u), shift));
}

float to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0x1Fu) return float_of(sign | 0x7F800000u | (m << 13) | (m ? 0x400000u : 0u));  // Inf / quiet NaN
  if (e != 0) return float_of(sign | ((e + 112u) << 23) | (m << 13));
  // Zero or subnormal: m * 2^-24, exact in float.
  return float_of(sign | bits_of(static_cast<float>(m) * 0x1p-24f));
}

void encode(const float* x, size_t n, uint8_t* out) {
#if TG_FP16_HAVE_X86
  if (simd_active()) return encode_f16c(x, n, out);
#endif
  encode_portable(x, n, out);
}

void decode(const uint8_t* in, size_t n, float* out) {
#if TG_FP16_HAVE_X86
  if (simd_active()) return decode_f16c(in, n, out);
#endif
  decode_portable(in, n, out);
}

void decode_accumulate(const uint8_t* in, size_t n, float* out) {
#if TG_FP16_HAVE_X86
  if (simd_active()) return decode_accumulate_f16c(in, n, out);
#endif
  decode_accumulate_portable(in, n, out);
}

bool simd_available() { return detect_simd(); }
bool simd_active() { return simd_flag().load(std::memory_order_relaxed); }
void set_simd(bool enabled) { simd_flag().store(enabled && detect_simd(), std::memory_order_relaxed); }

}  // namespace terngrad::comm::fp16
