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
inline constexpr uint8_t kFormatVersion = 1;
inline constexpr uint8_t kCodecTernary2Bit = 1;
inline constexpr size_t kHeaderBytes = 40;
inline constexpr size_t kHeaderCrcOffset = 36;  // CRC-32 covers bytes [0, 36)

// Header flag bits; every other bit is reserved and must be zero.
inline constexpr uint8_t kFlagSharedScale = 0x01;
inline constexpr uint8_t kKnownFlags = kFlagSharedScale;

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

// Serializes h into out[0, kHeaderBytes), CRC included. The scale is passed
// as its IEEE-754 bit pattern so this compiles unchanged in device code.
TG_HOST_DEVICE void write_header_bits(uint8_t* out, uint8_t flags, uint64_t count,
                                      uint32_t scale_bits, uint32_t tensor_id, uint64_t seed,
                                      uint32_t step) {
  store_le32(out, kMagicLe32);
  out[4] = kFormatVersion;
  out[5] = kCodecTernary2Bit;
  out[6] = flags;
  out[7] = static_cast<uint8_t>(kHeaderBytes);
  store_le64(out + 8, count);
  store_le32(out + 16, scale_bits);
  store_le32(out + 20, tensor_id);
  store_le64(out + 24, seed);
  store_le32(out + 32, step);
  store_le32(out + kHeaderCrcOffset, crc32_ieee(out, kHeaderCrcOffset));
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
  if (load_le32(p) != kMagicLe32) return HeaderFault::kBadMagic;
  if (p[4] != kFormatVersion) return HeaderFault::kBadVersion;
  if (p[5] != kCodecTernary2Bit) return HeaderFault::kBadCodec;
  if (p[7] != kHeaderBytes) return HeaderFault::kBadHeaderSize;
  if ((p[6] & ~kKnownFlags) != 0) return HeaderFault::kUnknownFlags;
  if (load_le32(p + kHeaderCrcOffset) != crc32_ieee(p, kHeaderCrcOffset)) return HeaderFault::kBadCrc;
  const uint32_t scale_bits = load_le32(p + 16);
  const bool negative = (scale_bits >> 31) != 0;  // -0.0 included: encoders write +0.0
  const bool non_finite = (scale_bits & 0x7F800000u) == 0x7F800000u;
  if (negative || non_finite) return HeaderFault::kBadScale;
  const uint64_t count = load_le64(p + 8);
  // count > 2^62 cannot describe a real payload; checked first so the size sum cannot wrap.
  if (count > (uint64_t{1} << 62) || payload_bytes - kHeaderBytes != body_bytes(count))
    return HeaderFault::kLengthMismatch;
  return HeaderFault::kNone;
}

const char* header_fault_name(HeaderFault f);

}  // namespace terngrad::quantize
