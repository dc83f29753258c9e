// Error feedback fused into the codec's passes.
//
// comm's ef() keeps per variable a residual e (what the codec has not sent
// yet), encodes p = g + e and keeps e' = p - decode(payload). Done with the
// plain calls that is about seven passes over the variable (p, its
// statistics, the encode, -p, the validating decode-accumulate, 0 - e, and
// the next step's read of e). These two calls do it in two, with the same
// floats and bytes, and never store p:
//
//   const TensorStats st = stats_of_sum(g, e);               // compute_stats(g + e)
//   encode_error_feedback(g, e, st, params, out);             // the payload of g + e; e' over e
//
// Each call works through cache-sized blocks, summing g + e into a buffer of
// the thread's, so the SIMD kernels of compute_stats() and encode() run
// unchanged on it and the results are theirs bit for bit.
#pragma once

#include <cstdint>
#include <span>

#include "terngrad/quantize/codec.h"

namespace terngrad::quantize {

// compute_stats(p) of p[i] = a[i] + b[i] (float adds), bit for bit, without
// storing p. a and b have one length (kInvalidArgument otherwise). Throws
// kNonFinite naming the first non-finite element of p.
TensorStats stats_of_sum(std::span<const float> a, std::span<const float> b);

// encode_with_stats(p, stats, params, out) of p = g + residual (float adds),
// and error feedback's residual of it over `residual`: 0 - (-p[i] + d[i]),
// d the payload's decoding (+0 or +-scale), which is p[i] - d[i] written as
// ef()'s generic path computes it (the same sign of zero). g and residual
// have one length and do not overlap (kInvalidArgument otherwise). For a
// slice, g and residual are the slice's elements and stats the whole
// variable's (params.element_offset, as encode_with_stats()). Every packing;
// the 2-bit one in the encode's own pass, the others with a decode of the
// payload. Checks as encode_with_stats(), before anything is written.
size_t encode_error_feedback(std::span<const float> g, std::span<float> residual, const TensorStats& stats,
                             const EncodeParams& params, std::span<uint8_t> out);

}  // namespace terngrad::quantize
