// Statistics pass: canonical float64 sums (see ternary_math.h) so that the
// result does not depend on thread count or SIMD width and equals the CUDA path.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cpu_kernels.h"
#include "messages.h"
#include "terngrad/quantize/codec.h"
#include "terngrad/quantize/error_feedback.h"
#include "terngrad/quantize/half_input.h"
#include "thread_buffer.h"

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

ChunkSums finish_chunk(const float* x, size_t from, size_t len, double* lane_sum, double* lane_sq,
                       uint32_t max_bits) {
  add_to_lanes(x, from, len, lane_sum, lane_sq, max_bits);
  return fold_lanes(lane_sum, lane_sq, max_bits);
}

ChunkSums chunk_sums_portable(const float* x, size_t len) {
  double lane_sum[kStatsLanes] = {};
  double lane_sq[kStatsLanes] = {};
  return finish_chunk(x, 0, len, lane_sum, lane_sq, 0);
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

namespace {

// The canonical reduction of compute_stats(): chunk c's partial from
// chunk_partial(begin, len), chunks in parallel, then level 2 in order.
// On a non-finite value, non_finite() throws naming it.
template <class ChunkPartial, class NonFinite>
TensorStats reduce_chunks(uint64_t n, ChunkPartial&& chunk_partial, NonFinite&& non_finite) {
  if (n == 0) return TensorStats{};
  const uint64_t chunks = (n + kStatsChunk - 1) / kStatsChunk;
  auto& partial = partials_scratch(chunks);

  detail::for_each_block(n, chunks, [&](uint64_t c) {
    const uint64_t begin = c * kStatsChunk;
    partial[c] = chunk_partial(begin, std::min<uint64_t>(kStatsChunk, n - begin));
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
  if (max_bits >= kExpAllOnes) non_finite();
  return stats_from_sums(n, butterfly_sum32(lane_sum), butterfly_sum32(lane_sq), max_bits);
}

}  // namespace

TensorStats compute_stats(std::span<const float> x) {
  auto* kernel = detail::kernels().chunk_sums;
  const float* data = x.data();
  const uint64_t n = x.size();
  return reduce_chunks(
      n, [&](uint64_t begin, uint64_t len) { return kernel(data + begin, len); },
      [&] { throw_non_finite(data, n); });
}

TensorStats stats_of_sum(std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size())
    throw CodecError(Errc::kInvalidArgument, "stats_of_sum: a has " + std::to_string(a.size()) + " elements, b " +
                                                 std::to_string(b.size()) + " (they must have one length)");
  auto* kernel = detail::kernels().chunk_sums;
  auto* add = detail::kernels().add_f32;
  const float* pa = a.data();
  const float* pb = b.data();
  const uint64_t n = a.size();
  // Each chunk's sums go through this thread's 16 KiB buffer (in L1), never
  // to memory.
  return reduce_chunks(
      n,
      [&](uint64_t begin, uint64_t len) {
        struct Site;
        float* sum = detail::thread_buffer<float, kStatsChunk, Site>();
        add(pa + begin, pb + begin, sum, len);
        return kernel(sum, len);
      },
      [&] {
        std::vector<float> s(n);
        for (uint64_t i = 0; i < n; ++i) s[i] = pa[i] + pb[i];
        throw_non_finite(s.data(), n);
      });
}

// 16-bit inputs (half_input.h): each chunk widened into this thread's
// 16 KiB buffer (and the residual added, for error feedback), then the
// float32 kernel, so the float32 call's bits.
namespace {
TensorStats stats_of_halves(HalfTensor g, const float* residual) {
  auto* kernel = detail::kernels().chunk_sums;
  auto* add = detail::kernels().add_f32;
  auto widened = [&](uint64_t begin, uint64_t len, float* out) {
    widen(g.subspan(begin, len), std::span<float>(out, len));
    if (residual != nullptr) add(out, residual + begin, out, len);
  };
  return reduce_chunks(
      g.size(),
      [&](uint64_t begin, uint64_t len) {
        struct Site;
        float* chunk = detail::thread_buffer<float, kStatsChunk, Site>();
        widened(begin, len, chunk);
        return kernel(chunk, len);
      },
      [&] {
        std::vector<float> p(g.size());
        widened(0, g.size(), p.data());
        throw_non_finite(p.data(), p.size());
      });
}
}  // namespace

TensorStats compute_stats(HalfTensor x) { return stats_of_halves(x, nullptr); }

TensorStats stats_of_sum(HalfTensor g, std::span<const float> residual) {
  if (g.size() != residual.size())
    throw CodecError(Errc::kInvalidArgument, "stats_of_sum: the gradient has " + std::to_string(g.size()) +
                                                 " elements, the residual " + std::to_string(residual.size()) +
                                                 " (they must have one length)");
  return stats_of_halves(g, residual.data());
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
