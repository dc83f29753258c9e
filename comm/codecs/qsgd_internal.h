// Private: qsgd_codec.cpp's division and rounding kernels, for
// tests/comm/qsgd_codec_test.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

namespace terngrad::comm::detail {

// q[i] = a[i] / div (a[i] >= 0 finite, div > 0 finite) as the encoder of the
// SIMD level in use computes it: must equal the IEEE division bit for bit.
void qsgd_quotients(const float* a, size_t n, float div, float* q);

// level[i] = version 2's level of element i from r[i] = q * levels in
// [0, 128) and h[i] its 16-bit half, as the fused encoder of the SIMD level
// in use computes it: must equal the reference's trunc(r) + (u < frac * 2^24)
// with u = 256 h + 128.
void qsgd_levels_of_halves(const float* r, const uint16_t* h, size_t n, uint32_t* level);

}  // namespace terngrad::comm::detail
