// The packed 2-bit ternary wire format. quantize/FORMAT.md is the normative
// description; this header is its single source of constants.
#pragma once

#include <cstddef>
#include <cstdint>

#include "terngrad/quantize/philox.h"  // TG_HOST_DEVICE

namespace terngrad::quantize {

// "TGRD" read as a little-endian u32. A scalar rather than a byte array:
// CUDA device code cannot index a namespace-scope constexpr array.
inline constexpr uint32_t kMagicLe32 = 0x44524754u;
// The format version names the random stream that drew the codes
// (ternary_math.h, RandomStream): 1 for Philox4x32-10 words, 2 for
// Philox4x32-7 half words. The layout is the same in both. Payloads whose
// codes draw nothing (nearest rounding, the sums) are version 1.
inline constexpr uint8_t kFormatVersion = 1;
inline constexpr uint8_t kFormatVersionHalfStream = 2;
// Whether a decoder of drawn codes (codecs 1, 3, 4, 5) takes this version.
TG_HOST_DEVICE constexpr bool known_drawn_version(uint8_t v) {
  return v == kFormatVersion || v == kFormatVersionHalfStream;
}
inline constexpr uint8_t kCodecTernary2Bit = 1;
inline constexpr uint8_t kCodecTernarySum = 2;  // ternary_sum.h
inline constexpr uint8_t kCodecTernaryBucketed = 3;  // bucketed.h: one scale per bucket
inline constexpr uint8_t kCodecTernaryBase3 = 4;     // entropy_format.h: 5 elements per byte
inline constexpr uint8_t kCodecTernaryEntropy = 5;   // entropy_format.h: rANS-coded codes
inline constexpr uint8_t kCodecTernarySumEntropy = 6;  // entropy_format.h: rANS-coded sum counts
inline constexpr size_t kHeaderBytes = 40;

// Where each header field starts (FORMAT.md's table) and how it is stored.
// Every reader and writer goes through these names, so the layout is spelled
// out once. Multi-byte fields are little-endian (store_le*/load_le* below).
inline constexpr size_t kHeaderMagicOffset = 0;      // u32, kMagicLe32
inline constexpr size_t kHeaderVersionOffset = 4;    // u8, kFormatVersion or kFormatVersionHalfStream
inline constexpr size_t kHeaderCodecOffset = 5;      // u8, kCodecTernary2Bit or kCodecTernarySum
inline constexpr size_t kHeaderFlagsOffset = 6;      // u8, kFlag* bits
inline constexpr size_t kHeaderSizeOffset = 7;       // u8, kHeaderBytes: the body starts there
inline constexpr size_t kHeaderCountOffset = 8;      // u64, elements
inline constexpr size_t kHeaderScaleOffset = 16;     // u32, IEEE-754 float32 bit pattern
inline constexpr size_t kHeaderTensorIdOffset = 20;  // u32
inline constexpr size_t kHeaderSeedOffset = 24;      // u64, the Philox key (codec 1 only)
inline constexpr size_t kHeaderStepOffset = 32;      // u32
inline constexpr size_t kHeaderCrcOffset = 36;       // u32, CRC-32 of bytes [0, kHeaderCrcOffset)

// A ternary sum payload (codec id 2, ternary_sum.h) has no seed: its eight
// bytes at kHeaderSeedOffset hold the contributions R, the bits per element
// and three reserved zero bytes instead.
inline constexpr size_t kSumContributionsOffset = kHeaderSeedOffset;  // u32, R
inline constexpr size_t kSumBitsOffset = 28;                          // u8, bit_width(2R)
inline constexpr size_t kSumReservedOffset = 29;                      // reserved, zero
inline constexpr size_t kSumReservedBytes = 3;
static_assert(kSumReservedOffset + kSumReservedBytes == kHeaderStepOffset,
              "the sum fields fill exactly the seed's eight bytes");

// Header flag bits; every other bit is reserved and must be zero.
inline constexpr uint8_t kFlagSharedScale = 0x01;
// The codes were chosen by deterministic nearest rounding (EncodeParams::
// rounding), not drawn: no random stream was used and the seed field is 0.
inline constexpr uint8_t kFlagNearest = 0x02;
inline constexpr uint8_t kKnownFlags = kFlagSharedScale | kFlagNearest;

// 2-bit codes. Element i lives in body byte i/4 at bits 2*(i%4) .. 2*(i%4)+1.
inline constexpr uint8_t kCodeZero = 0b00;
inline constexpr uint8_t kCodePlus = 0b01;
inline constexpr uint8_t kCodeMinus = 0b10;
inline constexpr uint8_t kCodeInvalid = 0b11;

TG_HOST_DEVICE constexpr uint64_t body_bytes(uint64_t n) { return (n + 3) / 4; }

// Exact size of a payload holding n elements; also the most encode() writes.
constexpr size_t max_encoded_bytes(uint64_t n) { return kHeaderBytes + body_bytes(n); }

// The decoded header fields.
struct PayloadHeader {
  uint8_t version = kFormatVersion;
  uint8_t codec = kCodecTernary2Bit;
  uint8_t flags = 0;
  uint64_t count = 0;     // number of elements
  float scale = 0.0f;     // s: element value = s * {0, +1, -1}
  uint32_t tensor_id = 0;
  uint64_t seed = 0;
  uint32_t step = 0;

  bool shared_scale() const { return (flags & kFlagSharedScale) != 0; }
  bool nearest() const { return (flags & kFlagNearest) != 0; }
};

// Little-endian field stores and loads: the format is little-endian on every host.
TG_HOST_DEVICE void store_le32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
TG_HOST_DEVICE void store_le64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
TG_HOST_DEVICE uint32_t load_le32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
TG_HOST_DEVICE uint64_t load_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

// CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320, the one zlib.crc32
// computes) over the 36 header bytes. The host uses a 256-entry table (the
// bitwise loop is a 288-step serial chain, which showed in small-tensor
// profiles); device code, which cannot index a namespace-scope table, keeps
// the bitwise form. Both give the same value.
namespace detail {
constexpr uint32_t crc32_table_entry(uint32_t i) {
  uint32_t c = i;
  for (int b = 0; b < 8; ++b) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  return c;
}
struct Crc32Table {
  uint32_t v[256];
  constexpr Crc32Table() : v() {
    for (uint32_t i = 0; i < 256; ++i) v[i] = crc32_table_entry(i);
  }
};
}  // namespace detail

TG_HOST_DEVICE uint32_t crc32_ieee(const uint8_t* data, size_t len) {
  uint32_t crc = 0xFFFFFFFFu;
#if defined(__CUDA_ARCH__)
  for (size_t i = 0; i < len; ++i) {
    crc ^= data[i];
    for (int b = 0; b < 8; ++b) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
#else
  static constexpr detail::Crc32Table table;
  for (size_t i = 0; i < len; ++i) crc = (crc >> 8) ^ table.v[(crc ^ data[i]) & 0xFFu];
#endif
  return ~crc;
}

namespace detail {
// The one writer of the 40-byte layout that codec 1 and codec 2 share:
// write_header_bits() and write_sum_header_bits() differ only in the codec id,
// the flags and what the eight bytes at kHeaderSeedOffset hold.
TG_HOST_DEVICE void write_header_layout(uint8_t* out, uint8_t codec, uint8_t flags, uint64_t count,
                                        uint32_t scale_bits, uint32_t tensor_id, uint64_t seed_field,
                                        uint32_t step, uint8_t version = kFormatVersion) {
  store_le32(out + kHeaderMagicOffset, kMagicLe32);
  out[kHeaderVersionOffset] = version;
  out[kHeaderCodecOffset] = codec;
  out[kHeaderFlagsOffset] = flags;
  out[kHeaderSizeOffset] = static_cast<uint8_t>(kHeaderBytes);
  store_le64(out + kHeaderCountOffset, count);
  store_le32(out + kHeaderScaleOffset, scale_bits);
  store_le32(out + kHeaderTensorIdOffset, tensor_id);
  store_le64(out + kHeaderSeedOffset, seed_field);
  store_le32(out + kHeaderStepOffset, step);
  store_le32(out + kHeaderCrcOffset, crc32_ieee(out, kHeaderCrcOffset));
}
}  // namespace detail

// Serializes a codec-1 header into out[0, kHeaderBytes), CRC included. The
// scale is passed as its IEEE-754 bit pattern so this compiles unchanged in
// device code. version: the stream's (payload_version()).
TG_HOST_DEVICE void write_header_bits(uint8_t* out, uint8_t flags, uint64_t count,
                                      uint32_t scale_bits, uint32_t tensor_id, uint64_t seed,
                                      uint32_t step, uint8_t version) {
  detail::write_header_layout(out, kCodecTernary2Bit, flags, count, scale_bits, tensor_id, seed, step, version);
}

// Serializes a ternary sum header (codec id 2, always flagged shared-scale)
// into out[0, kHeaderBytes), CRC included. The caller has checked that
// contributions and bits_per_element agree (ternary_sum.h); bits_per_element
// is at most 16, so it fits the one byte at kSumBitsOffset.
TG_HOST_DEVICE void write_sum_header_bits(uint8_t* out, uint64_t count, uint32_t scale_bits,
                                          uint32_t contributions, uint8_t bits_per_element,
                                          uint32_t tensor_id, uint32_t step) {
  // R in bytes 24..27, b in byte 28, and bytes 29..31 (reserved) zero.
  static_assert(kSumBitsOffset == kSumContributionsOffset + 4);
  const uint64_t seed_field = uint64_t{contributions} | (uint64_t{bits_per_element} << 32);
  detail::write_header_layout(out, kCodecTernarySum, kFlagSharedScale, count, scale_bits, tensor_id, seed_field, step);
}

// The fields every decoder reads, by name; none of them validates anything
// (check_header() does).
TG_HOST_DEVICE uint8_t header_codec(const uint8_t* header) { return header[kHeaderCodecOffset]; }
TG_HOST_DEVICE uint8_t header_flags(const uint8_t* header) { return header[kHeaderFlagsOffset]; }
TG_HOST_DEVICE uint64_t header_count(const uint8_t* header) { return load_le64(header + kHeaderCountOffset); }
TG_HOST_DEVICE uint32_t header_scale_bits(const uint8_t* header) {
  return load_le32(header + kHeaderScaleOffset);
}

// Header problems, in the order they are checked. kNone means well formed.
enum class HeaderFault : int {
  kNone = 0,
  kTooShort,        // fewer than kHeaderBytes bytes
  kBadMagic,
  kBadVersion,
  kBadCodec,
  kBadHeaderSize,
  kUnknownFlags,
  kBadCrc,
  kBadScale,        // NaN, Inf or negative
  kLengthMismatch,  // payload length != kHeaderBytes + ceil(count/4)
};

// Checks everything a header can say about itself and the payload length.
// Pure function of bytes, shared by the CPU decoder and the CUDA header kernel.
TG_HOST_DEVICE HeaderFault check_header(const uint8_t* p, size_t payload_bytes) {
  if (payload_bytes < kHeaderBytes) return HeaderFault::kTooShort;
  if (load_le32(p + kHeaderMagicOffset) != kMagicLe32) return HeaderFault::kBadMagic;
  if (!known_drawn_version(p[kHeaderVersionOffset])) return HeaderFault::kBadVersion;
  if (header_codec(p) != kCodecTernary2Bit) return HeaderFault::kBadCodec;
  if (p[kHeaderSizeOffset] != kHeaderBytes) return HeaderFault::kBadHeaderSize;
  if ((header_flags(p) & ~kKnownFlags) != 0) return HeaderFault::kUnknownFlags;
  if (load_le32(p + kHeaderCrcOffset) != crc32_ieee(p, kHeaderCrcOffset)) return HeaderFault::kBadCrc;
  const uint32_t scale_bits = header_scale_bits(p);
  const bool negative = (scale_bits >> 31) != 0;  // -0.0 included: encoders write +0.0
  const bool non_finite = (scale_bits & 0x7F800000u) == 0x7F800000u;
  if (negative || non_finite) return HeaderFault::kBadScale;
  const uint64_t count = header_count(p);
  // count > 2^62 cannot describe a real payload; checked first so the size sum cannot wrap.
  if (count > (uint64_t{1} << 62) || payload_bytes - kHeaderBytes != body_bytes(count))
    return HeaderFault::kLengthMismatch;
  return HeaderFault::kNone;
}

const char* header_fault_name(HeaderFault f);

// The fields of a codec-1 header as they stand, p[0, kHeaderBytes) readable;
// nothing is validated (call check_header() first). The one reader of the
// whole header on the host.
PayloadHeader read_header_fields(const uint8_t* p);

}  // namespace terngrad::quantize
