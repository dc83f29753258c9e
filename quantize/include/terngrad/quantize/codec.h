// TernGrad codec, CPU path: statistics, encode to the packed 2-bit format,
// decode, decode-accumulate and shared-scale summation.
//
// All buffers are the caller's; nothing here allocates on the hot path.
// Large tensors run on all OpenMP threads, small ones on the calling thread;
// the output is bit-identical for any thread count and to the CUDA path.
// Every function throws CodecError (error.h) on bad input and writes nothing
// to its output in that case.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "terngrad/quantize/error.h"
#include "terngrad/quantize/format.h"
#include "terngrad/quantize/ternary_math.h"

namespace terngrad::quantize {

// How an element becomes a ternary code.
enum class Rounding {
  kStochastic,  // TernGrad: +-s with probability |g|/s, unbiased (the paper)
  kNearest,     // deterministic: +-s iff |g| > s/2 (ternary_math.h); biased, contractive: for ef()
};

// How the codes travel (FORMAT.md). The codes themselves, and so the decoded
// values, are the same for every packing: only the bytes differ.
enum class Packing : uint8_t {
  k2Bit,     // codec 1: 2 bits per element, 4 per byte (the paper's)
  kBase3,    // codec 4: 5 elements per byte, 1.6 bits, fixed size
  kEntropy,  // codec 5: rANS-coded blocks, size depends on the values; the
             // encoder writes codec 4 instead when that is not larger
};

// "2bit", "base3", "entropy"; parse_packing() takes the same names and
// returns nullopt for anything else.
const char* packing_name(Packing p);
std::optional<Packing> parse_packing(std::string_view name);

// "philox10" (format version 1), "philox7x16" (version 2); parse_random_stream()
// takes the same names and returns nullopt for anything else.
const char* random_stream_name(RandomStream s);
std::optional<RandomStream> parse_random_stream(std::string_view name);

struct EncodeParams {
  // c in s = min(max|g|, c * sigma); 0 disables clipping (s = max|g|).
  float clip_factor = 2.5f;
  // Random stream: Philox keyed by seed at counters (block, step, tensor_id);
  // which blocks and bits an element draws is the stream's (ternary_math.h,
  // RandomStream), and the header's format version names it. Version 2 (the
  // default) costs 0.35 of version 1's Philox arithmetic per element with
  // P(keep) within 2^-17 of |g|/s; version 1 reproduces earlier payloads.
  uint64_t seed = 0;
  uint32_t step = 0;
  uint32_t tensor_id = 0;
  RandomStream stream = RandomStream::kPhilox7Half16;
  // Scale sharing: the max of all workers' own scales. Must be >= this
  // tensor's own scale; then every worker's payload has the same scale and
  // their sum is an integer count per element times that one scale.
  std::optional<float> shared_scale;
  // Slices: the tensor passed in is elements [element_offset, element_offset + n)
  // of a larger tensor (a variable split across parameter servers). With the
  // whole tensor's statistics (encode_with_stats), the payload's body equals
  // those bytes of the whole tensor's payload: same scale, same random draws.
  // A multiple of 4, so a slice starts on a body byte.
  uint64_t element_offset = 0;
  // kNearest draws no random numbers: the header's flags carry kFlagNearest
  // and its seed field is 0 (seed is ignored).
  Rounding rounding = Rounding::kStochastic;
  Packing packing = Packing::k2Bit;
};

// The most bytes encode() writes for n elements with this packing: exact for
// k2Bit and kBase3, the base-3 size for kEntropy (never exceeded).
size_t max_encoded_bytes(uint64_t n, Packing packing);

// The length of the payload at the start of buffer, from its header (codec
// 1, 4 or 5): what an encoder wrote into a max_encoded_bytes() buffer.
// Checks the header's magic, codec, CRC and that the buffer holds that many
// bytes; throws CodecError(kMalformedPayload) otherwise. The body is not
// validated (inspect() does that).
size_t payload_length(std::span<const uint8_t> buffer);

// One pass: mean, population standard deviation, max|g|.
// Throws kNonFinite (naming the first bad index) on NaN/Inf.
TensorStats compute_stats(std::span<const float> x);

// The scale encode() would use for these statistics and clip factor.
// Throws kInvalidArgument on a negative or NaN clip factor.
float local_scale(const TensorStats& stats, float clip_factor);

// The scale encode() uses: local_scale(), or params.shared_scale after checking it.
float resolve_scale(const TensorStats& stats, const EncodeParams& params);

// Encodes x into out (at least max_encoded_bytes(x.size(), params.packing)
// bytes); returns the bytes written (max_encoded_bytes for the fixed-size
// packings, at most that for kEntropy).
size_t encode(std::span<const float> x, const EncodeParams& params, std::span<uint8_t> out);

// The same with statistics the caller already computed (the scale-sharing
// flow computes them once to exchange the local scale). They describe x, or,
// for a slice, the whole tensor: stats.count >= element_offset + x.size().
size_t encode_with_stats(std::span<const float> x, const TensorStats& stats,
                         const EncodeParams& params, std::span<uint8_t> out);

// Decoders below take every packing: codec 1, 4 or 5 (header.codec says which).
// Validates a whole payload (header, length, every code, padding) and returns its header.
// An entropy-coded payload of B bytes may describe thousands of times B
// elements (a block of zeros costs a few bytes) and inspect() decodes it
// into n/5 bytes of scratch: a caller holding bytes from the network checks
// read_header()'s count against what it expects first. The decoders below
// that take an output check its size before decoding anything.
PayloadHeader inspect(std::span<const uint8_t> payload);

// Validates the header and the length only (codec 5: also its block
// directory), not the body; returns the header. Cheap at any size.
PayloadHeader read_header(std::span<const uint8_t> payload);

// The same codes in another packing: validates the whole payload (codec 1,
// 4 or 5) as inspect() does, then writes into out (at least
// max_encoded_bytes(count, to) bytes) the payload of `to` with the same
// header fields (version, flags, count, scale, tensor id, seed, step) and
// codes, so the same decoded values; returns its length. kEntropy falls back
// to base-3 when not smaller, as encode() does, and the bytes are encode()'s
// for the same input and parameters. What a server uses to keep an
// entropy-coded push as 2-bit codes (it decodes the push to validate it
// anyway; the step's sum then adds codes instead of decoding it again), and
// to pack a lone push for the pull. Throws CodecError (kInvalidArgument for
// a short out) and writes nothing on failure.
size_t repack(std::span<const uint8_t> payload, Packing to, std::span<uint8_t> out);

// out = decoded payload. out.size() must equal the payload's element count.
void decode(std::span<const uint8_t> payload, std::span<float> out);

// out += decoded payload (the server-side / all-gather reduction).
void decode_accumulate(std::span<const uint8_t> payload, std::span<float> out);

// counts += the signed codes of a payload: the exact integer form of summing
// payloads that share one scale. Returns the payload's scale. Callers summing
// several payloads check that the scales agree (sum_shared does).
float accumulate_counts(std::span<const uint8_t> payload, std::span<int16_t> counts);

// Sums payloads that share one scale and element count: counts = sum of
// codes (each in [-k, k]), returns the shared scale; the decoded sum is
// scale * counts[i]. Throws kScaleMismatch if scales or counts differ.
float sum_shared(std::span<const std::span<const uint8_t>> payloads, std::span<int16_t> counts);

}  // namespace terngrad::quantize
