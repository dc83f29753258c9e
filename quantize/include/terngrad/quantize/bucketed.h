// Bucketed TernGrad: one scale per bucket of B consecutive elements instead
// of one per tensor (payload codec id 3, quantize/FORMAT.md "Bucketed ternary
// payload"). A bucket's scale follows only the elements near it, so a tensor
// with a few large entries no longer ternarizes everything else against them.
//
// Buckets sit at absolute positions of the whole variable (bucket j is
// elements [jB, (j+1)B)), and every scale is computed from its whole bucket,
// so a slice of the variable (a ps shard, starting at a multiple of 4) carries
// exactly the whole payload's codes and scales for its elements, however the
// variable is cut. Elements draw the same Philox words as plain TernGrad
// (ternary_math.h), and the body is the same 2-bit code stream.
//
// Scales differ between workers, so bucketed payloads have no exact integer
// sum: there is no scale sharing here and no sum payload.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "terngrad/quantize/error.h"
#include "terngrad/quantize/format.h"
#include "terngrad/quantize/ternary_math.h"

namespace terngrad::quantize {

inline constexpr size_t kBucketedHeaderBytes = 48;
inline constexpr uint32_t kMinBucket = 4;
inline constexpr uint32_t kMaxBucket = uint32_t{1} << 30;

// Header fields of codec 3 (FORMAT.md's table). Bytes 0-15 and the tensor id,
// seed and step sit where codec 1 has them; byte 16 holds the bucket size
// where codec 1 has its one scale.
inline constexpr size_t kBucketedBucketOffset = 16;  // u32, B
inline constexpr size_t kBucketedFirstOffset = 36;   // u32, begin % B
inline constexpr size_t kBucketedReservedOffset = 40;  // u32, zero
inline constexpr size_t kBucketedCrcOffset = 44;     // u32, CRC-32 of bytes [0, 44)

struct BucketedEncodeParams {
  uint32_t bucket = 0;       // B: a multiple of 4 in [kMinBucket, kMaxBucket]
  float clip_factor = 2.5f;  // c in s_b = min(max|g| of bucket b, c * sigma of the tensor); 0: no clipping
  uint64_t seed = 0;
  uint32_t step = 0;
  uint32_t tensor_id = 0;
  RandomStream stream = RandomStream::kPhilox7Half16;  // as EncodeParams::stream; the header's version
};

// The decoded header fields.
struct BucketedHeader {
  uint64_t count = 0;
  uint32_t bucket = 0;
  uint32_t first = 0;  // offset of the payload's first element in its bucket
  uint32_t tensor_id = 0;
  uint64_t seed = 0;
  uint32_t step = 0;
};

// Throws kInvalidArgument naming the value unless bucket is a multiple of 4 in [4, 2^30].
void check_bucket_size(uint32_t bucket);

// Scale slots a payload of n elements carries: the most buckets n elements
// starting at a multiple of 4 can touch (0 for n = 0).
uint64_t bucketed_scale_slots(uint64_t n, uint32_t bucket);

// Exact size of a payload of n elements: a function of n and B only, so a
// buffer can be sized before the slice's position is known.
size_t bucketed_payload_bytes(uint64_t n, uint32_t bucket);

// Encodes elements [begin, begin + count) of the tensor x (the whole
// variable; begin a multiple of 4) with x's statistics (compute_stats(x):
// sigma for clipping; it also has already refused NaN/Inf). out must hold
// bucketed_payload_bytes(count, bucket) bytes; returns that size.
size_t encode_bucketed_slice(std::span<const float> x, const TensorStats& stats, const BucketedEncodeParams& params,
                             uint64_t begin, uint64_t count, std::span<uint8_t> out);

// The whole tensor as one payload (computes its statistics).
size_t encode_bucketed(std::span<const float> x, const BucketedEncodeParams& params, std::span<uint8_t> out);

// Validates a whole payload of bucket size `bucket` (header, length, scales,
// every code, padding) and returns its header; CodecError naming the fault.
BucketedHeader inspect_bucketed(std::span<const uint8_t> payload, uint32_t bucket);

// out = / out += the decoded payload; out.size() must be its element count.
// Everything is checked before out is touched.
void decode_bucketed(std::span<const uint8_t> payload, uint32_t bucket, std::span<float> out);
void decode_bucketed_accumulate(std::span<const uint8_t> payload, uint32_t bucket, std::span<float> out);

}  // namespace terngrad::quantize
