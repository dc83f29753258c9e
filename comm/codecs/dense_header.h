// Private: the 16-byte header of the uncompressed codecs (fp32, fp16).
//
//   offset size  field
//   0      4     magic "TGDN" (0x4E444754 as a little-endian u32)
//   4      1     version, 1
//   5      1     element type: 32 = float32, 16 = IEEE binary16
//   6      2     reserved, zero
//   8      8     element count n, little-endian u64
//   16     n*w   elements, little-endian (w = 4 or 2 bytes)
//
// The element type doubles as the codec id, so a payload decoded by the
// wrong codec is rejected instead of being reinterpreted. The 16-byte header
// keeps the body 8-byte aligned relative to the start of the payload.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace terngrad::comm::detail {

inline constexpr uint32_t kDenseMagicLe32 = 0x4E444754u;  // "TGDN"
inline constexpr uint8_t kDenseVersion = 1;
inline constexpr size_t kDenseHeaderBytes = 16;

// Where each field of the table above starts; every reader and writer (here
// and in the C API's device path) goes through these names.
inline constexpr size_t kDenseMagicOffset = 0;     // u32, kDenseMagicLe32
inline constexpr size_t kDenseVersionOffset = 4;   // u8, kDenseVersion
inline constexpr size_t kDenseTypeOffset = 5;      // u8, DenseType
inline constexpr size_t kDenseReservedOffset = 6;  // kDenseReservedBytes zero bytes
inline constexpr size_t kDenseReservedBytes = 2;
inline constexpr size_t kDenseCountOffset = 8;     // u64, elements
static_assert(kDenseReservedOffset + kDenseReservedBytes == kDenseCountOffset);

enum class DenseType : uint8_t { kFloat16 = 16, kFloat32 = 32 };

inline constexpr size_t element_bytes(DenseType t) { return t == DenseType::kFloat32 ? 4 : 2; }
const char* codec_name(DenseType t);  // "fp32" / "fp16"

// Header plus body for n elements; throws std::invalid_argument if that
// does not fit in size_t.
size_t dense_payload_bytes(DenseType t, uint64_t n);

// Checks that out can hold the payload for n elements (throws
// std::invalid_argument naming both sizes) and writes the header into it.
void write_dense_header(DenseType t, uint64_t n, std::span<uint8_t> out);

// The header bytes alone, for a payload whose capacity the caller has checked
// against dense_payload_bytes (the C API's device path builds the header on
// the host and the elements on the GPU).
void write_dense_header_bytes(DenseType t, uint64_t n, std::span<uint8_t, kDenseHeaderBytes> header);

// Validates everything about a payload before a single output element is
// written: length, magic, version, element type, reserved bytes, count
// against length, and count against out_elements. Throws std::runtime_error
// for a malformed payload and std::invalid_argument for an output of the
// wrong size, each naming the field and its value. Returns the count.
uint64_t check_dense_payload(DenseType t, std::span<const uint8_t> payload, size_t out_elements);

// An "fp32" payload of values (out holds dense_payload_bytes(kFloat32, n)).
void write_fp32_payload(std::span<const float> values, std::span<uint8_t> out);
// out = the values of an "fp32" payload (checked as check_dense_payload does).
void read_fp32_payload(std::span<const uint8_t> payload, std::span<float> out);
// Little-endian float32 bodies (a memcpy on little-endian hosts; the body
// need not be 4-byte aligned).
void store_f32s(const float* in, size_t n, uint8_t* out);
void load_f32s(const uint8_t* in, size_t n, float* out);

}  // namespace terngrad::comm::detail
