// The parameter server's dense sum: R uncompressed payload bodies (float32 or
// IEEE binary16, little-endian) added elementwise into one float32 body. The
// fp32 and fp16 gradient codecs' aggregate (comm/codecs) is this sum between
// their header checks.
//
// Arithmetic, fixed so that every SIMD level gives the same bits as the
// portable scalar loop it replaced: per element, in float32,
//     acc = +0; acc += v_0; acc += v_1; ... acc += v_{R-1}
// in payload order (r = 0 first), one rounding per add, no reassociation and
// no fused operations. The leading +0 is part of the rule: a lone -0 input
// sums to +0. Halves are widened exactly (fp16.h, to_float) before the add.
// NaN inputs give NaN; which NaN payload survives when two meet is the
// hardware's choice, as in any float add, so only NaN-ness is promised there.
//
// Bodies and output are byte pointers with no alignment requirement (a body
// follows its payload's 16-byte header); the output must not overlap the
// inputs. Large sums split over the OpenMP threads, as the codec's other
// passes do (cpu_features.h says which kernels run).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace terngrad::quantize {

// out (4n bytes) = the float32 sum of the n-element float32 bodies
// (4n bytes each). No bodies: out = +0 everywhere.
void dense_sum_f32(std::span<const uint8_t* const> bodies, size_t n, uint8_t* out);

// out (4n bytes) = the float32 sum of the n-element binary16 bodies (2n bytes
// each), each half widened to float32 first.
void dense_sum_f16(std::span<const uint8_t* const> bodies, size_t n, uint8_t* out);

}  // namespace terngrad::quantize
