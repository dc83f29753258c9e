// Scalar float32 <-> binary16 conversion (the reference) and the dispatch of
// the bulk conversions to the SIMD level in use (fp16_simd.cpp).
#include <cstring>

#include "cpu_kernels.h"
#include "terngrad/quantize/fp16.h"

namespace terngrad::quantize::fp16 {

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

}  // namespace

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

namespace {

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

void encode(const float* x, size_t n, uint8_t* out) { detail::kernels().fp16_encode(x, n, out); }

void decode(const uint8_t* in, size_t n, float* out) { detail::kernels().fp16_decode(in, n, out); }

void decode_accumulate(const uint8_t* in, size_t n, float* out) {
  detail::kernels().fp16_decode_accumulate(in, n, out);
}

}  // namespace terngrad::quantize::fp16
