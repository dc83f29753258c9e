// Encode pass: stochastic ternarization fused with 2-bit packing.
#include <algorithm>
#include <string>

#include "cpu_kernels.h"
#include "messages.h"
#include "packed_cpu.h"
#include "terngrad/quantize/entropy_format.h"
#include "terngrad/quantize/codec.h"

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

// Nearest rounding draws nothing: one plain loop, which the compiler
// vectorizes; the encode is then a pure function of x and the scale.
void encode_bytes_nearest(const float* x, uint64_t n, uint64_t k_begin, uint64_t k_end, const TernaryQuantizer& q,
                          uint8_t* body) {
  const uint64_t full = std::min(k_end, n / 4);  // bytes whose four elements all exist
  uint64_t k = k_begin;
  for (; k < full; ++k)
    body[k] = encode_byte_nearest(x[4 * k], x[4 * k + 1], x[4 * k + 2], x[4 * k + 3], q);
  for (; k < k_end; ++k) {
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // absent elements encode as zero padding
    for (uint64_t j = 0; j < 4 && 4 * k + j < n; ++j) v[j] = x[4 * k + j];
    body[k] = encode_byte_nearest(v[0], v[1], v[2], v[3], q);
  }
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

size_t encode_body(std::span<const float> x, const TensorStats& stats, const EncodeParams& params,
                   std::span<uint8_t> out) {
  const uint64_t n = x.size();
  const float scale = resolve_scale(stats, params);
  const bool nearest = params.rounding == Rounding::kNearest;
  const uint8_t flags = (params.shared_scale ? kFlagSharedScale : 0) | (nearest ? kFlagNearest : 0);
  if (params.packing != Packing::k2Bit) return detail::encode_packed(x, scale, flags, params, out);
  write_header_bits(out.data(), flags, n, float_bits(scale), params.tensor_id, nearest ? 0 : params.seed,
                    params.step);

  const TernaryQuantizer q = make_quantizer(scale);
  const RngStream rng{params.seed, params.step, params.tensor_id, params.element_offset / 4};
  uint8_t* body = out.data() + kHeaderBytes;
  const uint64_t nbytes = body_bytes(n);
  auto* kernel = detail::kernels().encode_bytes;
  // Blocks of 16 KiB of output (64 Ki elements): a multiple of the 16-byte SIMD group.
  constexpr uint64_t kBlockBytes = 16384;
  const uint64_t blocks = (nbytes + kBlockBytes - 1) / kBlockBytes;
  const float* data = x.data();
  detail::for_each_block(n, blocks, [&](uint64_t b) {
    const uint64_t k0 = b * kBlockBytes;
    if (nearest)
      detail::encode_bytes_nearest(data, n, k0, std::min(nbytes, k0 + kBlockBytes), q, body);
    else
      kernel(data, n, k0, std::min(nbytes, k0 + kBlockBytes), q, rng, body);
  });
  return max_encoded_bytes(n);
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

size_t max_encoded_bytes(uint64_t n, Packing packing) {
  return packing == Packing::k2Bit ? max_encoded_bytes(n) : base3_payload_bytes(n);
}

size_t encode_with_stats(std::span<const float> x, const TensorStats& stats,
                         const EncodeParams& params, std::span<uint8_t> out) {
  require_capacity(x.size(), params.packing, out.size());
  check_slice(params.element_offset, x.size(), stats.count);
  return encode_body(x, stats, params, out);
}

size_t encode(std::span<const float> x, const EncodeParams& params, std::span<uint8_t> out) {
  require_capacity(x.size(), params.packing, out.size());  // before the stats pass: fail fast
  check_offset(params.element_offset);
  return encode_body(x, compute_stats(x), params, out);
}

}  // namespace terngrad::quantize
