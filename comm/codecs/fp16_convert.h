// Private: float32 <-> IEEE binary16 conversion for the fp16 codec.
//
// Rounding is round-to-nearest, ties-to-even. Two deliberate departures from
// a bare IEEE conversion, both so that a finite gradient stays finite:
//   * finite values beyond the largest half (65504) saturate to +-65504
//     instead of becoming +-Inf (IEEE would give Inf from 65520 up);
//   * +-Inf stays +-Inf and NaN stays NaN (quiet, sign and top 9 payload bits
//     kept): the codec transmits what it is given, like fp32 does.
// Half -> float is exact; a signaling NaN comes back quiet.
//
// The bulk functions use F16C (8 lanes at a time) when the CPU has it and
// fall back to the scalar functions below otherwise. Both paths give the same
// bits for every input; the tests check that over all 65536 halves and a
// large set of floats. Bulk payload data is little-endian u16.
#pragma once

#include <cstddef>
#include <cstdint>

namespace terngrad::comm::fp16 {

inline constexpr uint16_t kMaxFiniteBits = 0x7BFF;  // 65504
inline constexpr float kMaxFinite = 65504.0f;

uint16_t from_float(float x);
float to_float(uint16_t h);

void encode(const float* x, size_t n, uint8_t* out);            // out: 2n bytes
void decode(const uint8_t* in, size_t n, float* out);           // out = values
void decode_accumulate(const uint8_t* in, size_t n, float* out);  // out += values

// Whether the F16C path exists on this CPU / is in use. set_simd(false)
// forces the portable path (tests, benchmarks; TG_CPU_SIMD=0 at start-up
// does the same, as for the TernGrad codec).
bool simd_available();
bool simd_active();
void set_simd(bool enabled);

}  // namespace terngrad::comm::fp16
