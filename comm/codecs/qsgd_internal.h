// Private: qsgd_codec.cpp's division kernel, for tests/comm/qsgd_codec_test.cpp.
#pragma once

#include <cstddef>

namespace terngrad::comm::detail {

// q[i] = a[i] / div (a[i] >= 0 finite, div > 0 finite) as the encoder of the
// SIMD level in use computes it: must equal the IEEE division bit for bit.
void qsgd_quotients(const float* a, size_t n, float div, float* q);

}  // namespace terngrad::comm::detail
