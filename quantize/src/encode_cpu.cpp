// Encode pass: stochastic ternarization fused with 2-bit packing.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "cpu_kernels.h"
#include "messages.h"
#include "packed_cpu.h"
#include "terngrad/quantize/entropy_format.h"
#include "terngrad/quantize/codec.h"
#include "terngrad/quantize/error_feedback.h"
#include "terngrad/quantize/half_input.h"

namespace terngrad::quantize {
namespace detail {

void encode_bytes_portable(const float* x, uint64_t n, uint64_t k_begin, uint64_t k_end,
                           const TernaryQuantizer& q, const RngStream& rng, uint8_t* body) {
  for (uint64_t k = k_begin; k < k_end; ++k) {
    const uint64_t e = 4 * k;
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // absent elements encode as zero padding
    for (uint64_t j = 0; j < 4 && e + j < n; ++j) v[j] = x[e + j];
    body[k] = encode_byte(v[0], v[1], v[2], v[3], q, rng, k);
  }
}

namespace {

// nearest_code() without branches, so that the byte loop below vectorizes
// (the branchy form mispredicts on about every other element): the same
// float operations, so the same codes.
inline uint32_t nearest_code_branchless(float x, const TernaryQuantizer& q) {
  const float a = std::fmin(std::fabs(x), q.scale);
  const float t = (a * q.pre) * q.inv24;
  const float u = static_cast<float>(kNearestWord >> 8);
  const uint32_t keep = static_cast<uint32_t>(a > 0.0f) & (static_cast<uint32_t>(a >= q.scale) | static_cast<uint32_t>(u < t));
  return keep * (1u + (float_bits(x) >> 31));
}

}  // namespace

// Nearest rounding draws nothing: a branch-free loop, which the compiler
// vectorizes; the encode is then a pure function of x and the scale.
void encode_bytes_nearest(const float* x, uint64_t n, uint64_t k_begin, uint64_t k_end, const TernaryQuantizer& q,
                          uint8_t* body) {
  const uint64_t full = std::min(k_end, n / 4);  // bytes whose four elements all exist
  uint64_t k = k_begin;
#pragma omp simd
  for (uint64_t kk = k_begin; kk < std::max(k_begin, full); ++kk)
    body[kk] = static_cast<uint8_t>(nearest_code_branchless(x[4 * kk], q) | (nearest_code_branchless(x[4 * kk + 1], q) << 2) |
                                    (nearest_code_branchless(x[4 * kk + 2], q) << 4) |
                                    (nearest_code_branchless(x[4 * kk + 3], q) << 6));
  k = std::max(k_begin, full);
  for (; k < k_end; ++k) {
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // absent elements encode as zero padding
    for (uint64_t j = 0; j < 4 && 4 * k + j < n; ++j) v[j] = x[4 * k + j];
    body[k] = encode_byte_nearest(v[0], v[1], v[2], v[3], q);
  }
}

// Fused error feedback, portable. d = scale * row[j], row the body byte's
// four code_sign() values as floats: decode's +0, +s or -s, four elements
// at a time without a variable shift (baseline x86-64 has none, and a
// per-element shift loop stays scalar).
struct SignRows {
  alignas(16) float row[256][4];
};
const SignRows& sign_rows() {
  static const SignRows rows = [] {
    SignRows r{};
    for (uint32_t b = 0; b < 256; ++b)
      for (uint32_t j = 0; j < 4; ++j) r.row[b][j] = static_cast<float>(code_sign((b >> (2 * j)) & 3u));
    return r;
  }();
  return rows;
}

void add_f32_portable(const float* a, const float* b, float* out, size_t len) {
  for (size_t i = 0; i < len; ++i) out[i] = a[i] + b[i];
}

void ef_residual_portable(const float* p, const uint8_t* body, uint64_t len, float scale, float* r) {
  const SignRows& signs = sign_rows();
  uint64_t k = 0;
  for (; 4 * k + 4 <= len; ++k) {
    const float* __restrict sign = signs.row[body[k]];
    const float* __restrict pp = p + 4 * k;
    float* __restrict rr = r + 4 * k;
    for (int j = 0; j < 4; ++j) rr[j] = 0.0f - (-pp[j] + scale * sign[j]);
  }
  for (uint64_t i = 4 * k; i < len; ++i) r[i] = 0.0f - (-p[i] + scale * signs.row[body[k]][i - 4 * k]);
}

}  // namespace detail

namespace {

void require_capacity(uint64_t n, Packing packing, size_t capacity) {
  if (capacity < max_encoded_bytes(n, packing)) {
    throw CodecError(Errc::kBufferTooSmall,
                     "output buffer has " + std::to_string(capacity) + " bytes, encoding " +
                         std::to_string(n) + " elements (" + packing_name(packing) +
                         ") needs max_encoded_bytes = " + std::to_string(max_encoded_bytes(n, packing)));
  }
}

void check_offset(uint64_t element_offset) {
  if (element_offset % 4 != 0) {
    throw CodecError(Errc::kInvalidArgument, "element_offset must be a multiple of 4 (slices start on a "
                                             "body byte), got " + std::to_string(element_offset));
  }
}

// x is [element_offset, element_offset + n) of the tensor `stats` describe.
void check_slice(uint64_t element_offset, uint64_t n, uint64_t whole_count) {
  check_offset(element_offset);
  if (element_offset > whole_count || n > whole_count - element_offset) {
    throw CodecError(Errc::kInvalidArgument,
                     "stats describe " + std::to_string(whole_count) + " elements but the tensor has " +
                         std::to_string(n) + (element_offset ? " starting at element_offset " +
                                                                   std::to_string(element_offset)
                                                             : std::string()));
  }
}

// Where encode_body() reads the elements p it encodes: from memory as
// float32 (`direct`, when there is no fill), or block by block from `fill`,
// which writes p[begin, begin + len) into a buffer (g + e for error
// feedback, widened halves, or both), so p is never stored whole.
struct Source {
  uint64_t n = 0;
  const float* direct = nullptr;
  std::function<void(uint64_t begin, uint64_t len, float* out)> fill;
};

// The encode of src's p; with `residual` (whose elements the fill has read
// first), which is then overwritten with error feedback's residual of p
// (encode_error_feedback()). Each 64 Ki-element block that is not direct is
// filled into this thread's buffer, encoded from there (its Philox counters
// offset to the block, as the packed encode does) and its residual written
// back, while the block is in cache.
size_t encode_body(const Source& src, const TensorStats& stats, const EncodeParams& params, std::span<uint8_t> out,
                   float* residual = nullptr) {
  const uint64_t n = src.n;
  const float scale = resolve_scale(stats, params);
  const bool nearest = params.rounding == Rounding::kNearest;
  const uint8_t flags = (params.shared_scale ? kFlagSharedScale : 0) | (nearest ? kFlagNearest : 0);
  if (params.packing != Packing::k2Bit) {
    if (!src.fill) return detail::encode_packed(std::span<const float>(src.direct, n), scale, flags, params, out);
    // The packed encodes take p whole: p, then -p, plus the decoding, then
    // 0 - that, the generic path's steps.
    std::vector<float> p(n);
    src.fill(0, n, p.data());
    const size_t written = detail::encode_packed(p, scale, flags, params, out);
    if (residual == nullptr) return written;
    std::span<float> r(residual, n);
    for (uint64_t i = 0; i < n; ++i) r[i] = -p[i];
    decode_accumulate(out.first(written), r);
    for (uint64_t i = 0; i < n; ++i) r[i] = 0.0f - r[i];
    return written;
  }
  write_header_bits(out.data(), flags, n, float_bits(scale), params.tensor_id, nearest ? 0 : params.seed,
                    params.step, payload_version(params.stream, nearest));

  const TernaryQuantizer q = make_quantizer(scale);
  const RngStream rng{params.seed, params.step, params.tensor_id, params.element_offset / 4, params.stream};
  uint8_t* body = out.data() + kHeaderBytes;
  const uint64_t nbytes = body_bytes(n);
  auto* kernel = detail::kernels().encode_bytes;
  auto* nearest_kernel = detail::kernels().encode_bytes_nearest;
  auto* ef_residual = detail::kernels().ef_residual;
  // Blocks of 16 KiB of output (64 Ki elements): a multiple of the 16-byte SIMD group.
  constexpr uint64_t kBlockBytes = 16384;
  const uint64_t blocks = (nbytes + kBlockBytes - 1) / kBlockBytes;
  detail::for_each_block(n, blocks, [&](uint64_t b) {
    const uint64_t k0 = b * kBlockBytes;
    const uint64_t k1 = std::min(nbytes, k0 + kBlockBytes);
    if (!src.fill) {
      if (nearest)
        nearest_kernel(src.direct, n, k0, k1, q, body);
      else
        kernel(src.direct, n, k0, k1, q, rng, body);
      return;
    }
    thread_local std::vector<float> block_p;
    const uint64_t e0 = 4 * k0, len = std::min(n, 4 * k1) - e0;
    block_p.resize(4 * kBlockBytes);
    float* pb = block_p.data();
    src.fill(e0, len, pb);
    if (nearest)
      nearest_kernel(pb, len, 0, k1 - k0, q, body + k0);
    else
      kernel(pb, len, 0, k1 - k0, q, rng.advanced(k0), body + k0);
    if (residual != nullptr) ef_residual(pb, body + k0, len, scale, residual + e0);
  });
  return max_encoded_bytes(n);
}

// The checks of encode_error_feedback(), before anything is written.
template <class Gradient>
void check_error_feedback(const Gradient& g, std::span<float> residual, const TensorStats& stats,
                          const EncodeParams& params, size_t capacity) {
  require_capacity(g.size(), params.packing, capacity);
  check_slice(params.element_offset, g.size(), stats.count);
  if (residual.size() != g.size())
    throw CodecError(Errc::kInvalidArgument, "encode_error_feedback: the residual has " +
                                                 std::to_string(residual.size()) + " elements, the gradient " +
                                                 std::to_string(g.size()));
  const auto* gb = reinterpret_cast<const uint8_t*>(g.data());
  const auto* ge = gb + g.size_bytes();
  const auto* rb = reinterpret_cast<const uint8_t*>(residual.data());
  if (!g.empty() && rb < ge && gb < rb + residual.size_bytes())
    throw CodecError(Errc::kInvalidArgument, "encode_error_feedback: the residual overlaps the gradient");
}

}  // namespace

const char* packing_name(Packing p) {
  switch (p) {
    case Packing::k2Bit: return "2bit";
    case Packing::kBase3: return "base3";
    case Packing::kEntropy: return "entropy";
  }
  return "unknown";
}

std::optional<Packing> parse_packing(std::string_view name) {
  for (Packing p : {Packing::k2Bit, Packing::kBase3, Packing::kEntropy})
    if (name == packing_name(p)) return p;
  return std::nullopt;
}

const char* random_stream_name(RandomStream s) {
  switch (s) {
    case RandomStream::kPhilox10Word32: return "philox10";
    case RandomStream::kPhilox7Half16: return "philox7x16";
  }
  return "unknown";
}

std::optional<RandomStream> parse_random_stream(std::string_view name) {
  for (RandomStream s : {RandomStream::kPhilox10Word32, RandomStream::kPhilox7Half16})
    if (name == random_stream_name(s)) return s;
  return std::nullopt;
}

size_t max_encoded_bytes(uint64_t n, Packing packing) {
  return packing == Packing::k2Bit ? max_encoded_bytes(n) : base3_payload_bytes(n);
}

size_t encode_with_stats(std::span<const float> x, const TensorStats& stats,
                         const EncodeParams& params, std::span<uint8_t> out) {
  require_capacity(x.size(), params.packing, out.size());
  check_slice(params.element_offset, x.size(), stats.count);
  return encode_body(Source{x.size(), x.data(), {}}, stats, params, out);
}

size_t encode_error_feedback(std::span<const float> g, std::span<float> residual, const TensorStats& stats,
                             const EncodeParams& params, std::span<uint8_t> out) {
  check_error_feedback(g, residual, stats, params, out.size());
  auto* add = detail::kernels().add_f32;
  const Source p{g.size(), nullptr, [&](uint64_t begin, uint64_t len, float* to) {
                   add(g.data() + begin, residual.data() + begin, to, len);
                 }};
  return encode_body(p, stats, params, out, residual.data());
}

size_t encode(std::span<const float> x, const EncodeParams& params, std::span<uint8_t> out) {
  require_capacity(x.size(), params.packing, out.size());  // before the stats pass: fail fast
  check_offset(params.element_offset);
  return encode_body(Source{x.size(), x.data(), {}}, compute_stats(x), params, out);
}

// 16-bit inputs (half_input.h): the float32 encode of each block widened.
size_t encode_with_stats(HalfTensor x, const TensorStats& stats, const EncodeParams& params, std::span<uint8_t> out) {
  require_capacity(x.size(), params.packing, out.size());
  check_slice(params.element_offset, x.size(), stats.count);
  const Source p{x.size(), nullptr, [&](uint64_t begin, uint64_t len, float* to) {
                   widen(x.subspan(begin, len), std::span<float>(to, len));
                 }};
  return encode_body(p, stats, params, out);
}

size_t encode(HalfTensor x, const EncodeParams& params, std::span<uint8_t> out) {
  require_capacity(x.size(), params.packing, out.size());  // before the stats pass: fail fast
  check_offset(params.element_offset);
  return encode_with_stats(x, compute_stats(x), params, out);
}

size_t encode_error_feedback(HalfTensor g, std::span<float> residual, const TensorStats& stats,
                             const EncodeParams& params, std::span<uint8_t> out) {
  check_error_feedback(g.bits, residual, stats, params, out.size());
  auto* add = detail::kernels().add_f32;
  const Source p{g.size(), nullptr, [&](uint64_t begin, uint64_t len, float* to) {
                   widen(g.subspan(begin, len), std::span<float>(to, len));
                   add(to, residual.data() + begin, to, len);
                 }};
  return encode_body(p, stats, params, out, residual.data());
}

}  // namespace terngrad::quantize
