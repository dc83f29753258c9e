// float32 <-> IEEE binary16 conversion, the fp16 gradient codec's element
// rule (comm/codecs/fp16_codec.cpp), and for anyone packing halves.
//
// Rounding is round-to-nearest, ties-to-even. Two deliberate departures from
// a bare IEEE conversion, both so that a finite gradient stays finite:
//   * finite values beyond the largest half (65504) saturate to +-65504
//     instead of becoming +-Inf (IEEE would give Inf from 65520 up);
//   * +-Inf stays +-Inf and NaN stays NaN (quiet, sign and top 9 payload bits
//     kept): the codec transmits what it is given, like fp32 does.
// Half -> float is exact; a signaling NaN comes back quiet.
//
// The bulk functions run the SIMD level in use (cpu_features.h: F16C under
// AVX2 and AVX-512, the NEON conversions on AArch64) and the scalar functions
// below under the portable level. Every level gives the same bits for every
// input; tests/quantize/fp16_convert_test.cpp checks that over all 65536
// halves and a large set of floats. Bulk data is little-endian u16.
#pragma once

#include <cstddef>
#include <cstdint>

namespace terngrad::quantize::fp16 {

inline constexpr uint16_t kMaxFiniteBits = 0x7BFF;  // 65504
inline constexpr float kMaxFinite = 65504.0f;

uint16_t from_float(float x);
float to_float(uint16_t h);

void encode(const float* x, size_t n, uint8_t* out);            // out: 2n bytes
void decode(const uint8_t* in, size_t n, float* out);           // out = values
void decode_accumulate(const uint8_t* in, size_t n, float* out);  // out += values

}  // namespace terngrad::quantize::fp16
