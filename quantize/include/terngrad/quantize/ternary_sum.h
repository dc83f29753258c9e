// The aggregated update of TernGrad with scale sharing: the sum of R payloads
// that share one scale is an integer count in [-R, R] per element times that
// scale, so the server-to-worker direction travels in bit_width(2R) bits per
// element instead of 32 (3 bits for 2 workers, 4 for 4, 5 for 8).
//
// Format (quantize/FORMAT.md, "Ternary sum payload"): the 40-byte TGRD header
// with codec id 2, whose seed field holds the number of summed payloads and
// the bits per element, then the counts offset by +R as unsigned b-bit fields
// in a little-endian bit stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "terngrad/quantize/error.h"
#include "terngrad/quantize/format.h"

namespace terngrad::quantize {

// kCodecTernarySum (format.h) is this payload's codec id.
// int16 counts: at most this many payloads in one sum.
inline constexpr uint32_t kMaxSumContributions = 32767;
// The entropy-coded sum (codec 6) holds a count + R digit in a byte symbol:
// sums of more payloads travel bit-packed (codec 2).
inline constexpr uint32_t kMaxEntropySumContributions = 127;

// How a sum travels: bit-packed fields (codec 2, bit_width(2R) bits per
// element), or entropy-coded (codec 6, FORMAT.md), which an encoder writes
// only when R <= kMaxEntropySumContributions and it comes out smaller than
// codec 2 (otherwise codec 2): so sum_payload_bytes() bounds both.
enum class SumPacking : uint8_t { kBitPacked, kEntropy };

struct SumHeader {
  uint8_t codec = kCodecTernarySum;  // 2 (bit-packed) or 6 (entropy-coded)
  uint64_t count = 0;          // elements
  float scale = 0.0f;          // element value = scale * count_i
  uint32_t contributions = 0;  // R: payloads summed, counts lie in [-R, R]
  uint32_t bits = 0;           // bits per element of codec 2, bit_width(2R) (codec 6: what it replaces)
  uint32_t tensor_id = 0;
  uint32_t step = 0;
};

namespace detail {
// Codec 2's body, 8 fields at a time: fields [8g, 8g + 8) (count + R, b bits
// each, little-endian bit order) fill exactly b bytes, which this writes to
// out[0, b); fields at n and beyond are zero padding. For the device packer
// (quantize/cuda/sum_kernels.cu, one thread per group), kept here so the CPU
// tests check it against encode_sum()'s bytes. counts[e - 8g] is element e.
TG_HOST_DEVICE void pack_sum_group(const int16_t* counts, uint64_t g, uint64_t n, uint32_t r, uint32_t bits,
                                   uint8_t* out) {
  uint8_t bytes[18] = {};  // 8 fields of <= 16 bits, and the spill of the last one's shift
  for (uint32_t f = 0; f < 8 && 8 * g + f < n; ++f) {
    const uint32_t pos = f * bits;
    const uint32_t w = static_cast<uint32_t>(counts[f] + static_cast<int32_t>(r)) << (pos % 8);
    bytes[pos / 8] |= static_cast<uint8_t>(w);
    bytes[pos / 8 + 1] |= static_cast<uint8_t>(w >> 8);
    bytes[pos / 8 + 2] |= static_cast<uint8_t>(w >> 16);
  }
  for (uint32_t k = 0; k < bits; ++k) out[k] = bytes[k];
}
}  // namespace detail

// Bits per element for R contributions: the smallest b with 2^b > 2R.
// Throws kInvalidArgument for R = 0 or R > kMaxSumContributions.
uint32_t sum_bits(uint32_t contributions);

// Exact codec-2 payload size for n elements summed from R payloads; the most
// any sum of them takes (codec 6 is written only when smaller).
size_t sum_payload_bytes(uint64_t n, uint32_t contributions);

// Packs counts (each in [-R, R], else kInvalidArgument naming the element)
// into out (at least sum_payload_bytes(n, R) bytes); returns the bytes written.
size_t encode_sum(std::span<const int16_t> counts, float scale, uint32_t contributions,
                  uint32_t tensor_id, uint32_t step, std::span<uint8_t> out);

// The sum of R payloads that share one scale and element count, straight
// from their 2-bit codes to the packed sum (no per-element integer counts):
// the same bytes as sum_shared() followed by encode_sum(). Payloads are
// checked (headers, codes, padding) and refused like sum_shared() refuses
// them; tensor id and step come from the first. Returns the bytes written
// to out, which must hold sum_payload_bytes(n, R).
// Inputs may be of any packing (codec 1, 4 or 5; mixed is fine).
size_t sum_payloads(std::span<const std::span<const uint8_t>> payloads, std::span<uint8_t> out);
// The same sum packed as asked (kEntropy: codec 6 when that is smaller).
size_t sum_payloads(std::span<const std::span<const uint8_t>> payloads, std::span<uint8_t> out, SumPacking packing);

// encode_sum() with the packing chosen as sum_payloads() chooses it.
size_t encode_sum(std::span<const int16_t> counts, float scale, uint32_t contributions, uint32_t tensor_id,
                  uint32_t step, SumPacking packing, std::span<uint8_t> out);

// Decoders below take codec 2 and codec 6 (header.codec says which).
// Validates header, length, every field (<= 2R) and the padding bits; returns the header.
SumHeader inspect_sum(std::span<const uint8_t> payload);

// Validates the header and the length only, not the body: for a decoder that
// checks the fields itself where they are unpacked (the CUDA sum decode,
// quantize/cuda_sum.h), so the body is not read twice on the host. Codec 2
// only: a codec-6 payload is refused here (decode it with decode_sum()).
SumHeader read_sum_header(std::span<const uint8_t> payload);
// The same from the header's bytes alone and the payload's length: for a
// payload in device memory, of which only the header was copied to the host.
SumHeader read_sum_header(std::span<const uint8_t, kHeaderBytes> header, size_t payload_bytes);

// out = scale * count per element (one float32 rounding each). out.size()
// must equal the payload's count. Nothing is written if the payload is bad.
void decode_sum(std::span<const uint8_t> payload, std::span<float> out);

// True if the payload's header says codec id 2 or 6 (a sum), without validating it.
bool is_sum_payload(std::span<const uint8_t> payload);

}  // namespace terngrad::quantize
