// Statistics pass: canonical float64 sums (see ternary_math.h) so that the
// result does not depend on thread count or SIMD width and equals the CUDA path.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cpu_kernels.h"
#include "messages.h"
#include "terngrad/quantize/codec.h"

namespace terngrad::quantize {
namespace detail {

namespace {
// Adds x[from, len) into the 32 canonical lanes; lane of element e is e % 32.
void add_to_lanes(const float* x, size_t from, size_t len, double* lane_sum, double* lane_sq,
                  uint32_t& max_bits) {
  for (size_t e = from; e < len; ++e) {
    const double v = x[e];
    lane_sum[e % kStatsLanes] += v;
    lane_sq[e % kStatsLanes] += v * v;  // exact in double: no rounding before the add
    max_bits = std::max(max_bits, float_bits(x[e]) & kAbsMask);
  }
}

ChunkSums fold_lanes(double* lane_sum, double* lane_sq, uint32_t max_bits) {
  ChunkSums c;
  c.sum = butterfly_sum32(lane_sum);
  c.sum_sq = butterfly_sum32(lane_sq);
  c.max_abs_bits = max_bits;
  return c;
}
}  // namespace

ChunkSums chunk_sums_portable(const float* x, size_t len) {
  double lane_sum[kStatsLanes] = {};
  double lane_sq[kStatsLanes] = {};
  uint32_t max_bits = 0;
  add_to_lanes(x, 0, len, lane_sum, lane_sq, max_bits);
  return fold_lanes(lane_sum, lane_sq, max_bits);
}

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
  add_to_lanes(x, e, len, lane_sum, lane_sq, max_bits);  // tail continues the lanes
  return fold_lanes(lane_sum, lane_sq, max_bits);
}

}  // namespace detail

namespace {

// Chunk partials of large tensors; kept per thread so repeated calls do not allocate.
std::vector<detail::ChunkSums>& partials_scratch(size_t chunks) {
  thread_local std::vector<detail::ChunkSums> scratch;
  if (scratch.size() < chunks) scratch.resize(chunks);
  return scratch;
}

[[noreturn]] void throw_non_finite(const float* x, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) {
      throw CodecError(Errc::kNonFinite, "input element " + std::to_string(i) + " of " +
                                             std::to_string(n) + " is " +
                                             (std::isnan(x[i]) ? "NaN" : "Inf") +
                                             ": TernGrad needs finite gradients");
    }
  }
  throw CodecError(Errc::kNonFinite, "input contains NaN or Inf");
}

}  // namespace

TensorStats compute_stats(std::span<const float> x) {
  const uint64_t n = x.size();
  if (n == 0) return TensorStats{};
  const uint64_t chunks = (n + kStatsChunk - 1) / kStatsChunk;
  auto* kernel = detail::use_avx512() ? detail::chunk_sums_avx512 : detail::chunk_sums_portable;
  auto& partial = partials_scratch(chunks);
  const float* data = x.data();

  detail::for_each_block(n, chunks, [&](uint64_t c) {
    const uint64_t begin = c * kStatsChunk;
    partial[c] = kernel(data + begin, std::min<uint64_t>(kStatsChunk, n - begin));
  });

  // Level 2: chunk c goes to lane c % 32 in increasing c, then the butterfly.
  double lane_sum[kStatsLanes] = {};
  double lane_sq[kStatsLanes] = {};
  uint32_t max_bits = 0;
  for (uint64_t c = 0; c < chunks; ++c) {
    lane_sum[c % kStatsLanes] += partial[c].sum;
    lane_sq[c % kStatsLanes] += partial[c].sum_sq;
    max_bits = std::max(max_bits, partial[c].max_abs_bits);
  }
  if (max_bits >= kExpAllOnes) throw_non_finite(data, n);
  return stats_from_sums(n, butterfly_sum32(lane_sum), butterfly_sum32(lane_sq), max_bits);
}

float local_scale(const TensorStats& stats, float clip_factor) {
  if (std::isnan(clip_factor) || clip_factor < 0.0f || std::isinf(clip_factor)) {
    throw CodecError(Errc::kInvalidArgument,
                     "clip_factor must be a finite number >= 0 (0 disables clipping), got " +
                         detail::fmt_num(clip_factor));
  }
  return scale_from_stats(stats, clip_factor);
}

float resolve_scale(const TensorStats& stats, const EncodeParams& params) {
  const float own = local_scale(stats, params.clip_factor);
  if (!params.shared_scale) return own;
  const float shared = *params.shared_scale;
  if (!std::isfinite(shared) || std::signbit(shared)) {  // -0.0 too: headers carry +0.0
    throw CodecError(Errc::kInvalidArgument,
                     "shared_scale must be finite and >= +0, got " + detail::fmt_num(shared));
  }
  if (shared < own) {
    throw CodecError(Errc::kInvalidArgument,
                     "shared_scale " + detail::fmt_num(shared) +
                         " is below this tensor's own scale " + detail::fmt_num(own) +
                         ": the shared scale must be the max over workers");
  }
  return shared;
}

}  // namespace terngrad::quantize
