#include "dense_header.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

#include "terngrad/quantize/format.h"  // store_le32/64, load_le32/64

namespace terngrad::comm::detail {

namespace {

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08X", v);
  return buf;
}

std::string prefix(DenseType t, const char* op) { return std::string(codec_name(t)) + " " + op + ": "; }

}  // namespace

const char* codec_name(DenseType t) { return t == DenseType::kFloat32 ? "fp32" : "fp16"; }

size_t dense_payload_bytes(DenseType t, uint64_t n) {
  const uint64_t w = element_bytes(t);
  if (n > (std::numeric_limits<size_t>::max() - kDenseHeaderBytes) / w)
    throw std::invalid_argument(prefix(t, "payload_bytes") + "element count " + std::to_string(n) +
                                " is too large for one payload");
  return kDenseHeaderBytes + static_cast<size_t>(n * w);
}

void write_dense_header(DenseType t, uint64_t n, std::span<uint8_t> out) {
  const size_t need = dense_payload_bytes(t, n);
  if (out.size() < need)
    throw std::invalid_argument(prefix(t, "encode") + "output buffer has " + std::to_string(out.size()) +
                                " bytes, " + std::to_string(n) + " elements need " + std::to_string(need));
  write_dense_header_bytes(t, n, out.first<kDenseHeaderBytes>());
}

void write_dense_header_bytes(DenseType t, uint64_t n, std::span<uint8_t, kDenseHeaderBytes> header) {
  uint8_t* p = header.data();
  quantize::store_le32(p + kDenseMagicOffset, kDenseMagicLe32);
  p[kDenseVersionOffset] = kDenseVersion;
  p[kDenseTypeOffset] = static_cast<uint8_t>(t);
  std::fill_n(p + kDenseReservedOffset, kDenseReservedBytes, uint8_t{0});
  quantize::store_le64(p + kDenseCountOffset, n);
}

uint64_t check_dense_payload(DenseType t, std::span<const uint8_t> payload, size_t out_elements) {
  const std::string pre = prefix(t, "decode");
  if (payload.size() < kDenseHeaderBytes)
    throw std::runtime_error(pre + "payload has " + std::to_string(payload.size()) + " bytes, less than the " +
                             std::to_string(kDenseHeaderBytes) + "-byte header");
  const uint8_t* p = payload.data();
  if (const uint32_t magic = quantize::load_le32(p + kDenseMagicOffset); magic != kDenseMagicLe32)
    throw std::runtime_error(pre + "bad magic " + hex32(magic) + " (expected " + hex32(kDenseMagicLe32) +
                             ", \"TGDN\")");
  if (const uint8_t version = p[kDenseVersionOffset]; version != kDenseVersion)
    throw std::runtime_error(pre + "unsupported version " + std::to_string(version) + " (expected " +
                             std::to_string(kDenseVersion) + ")");
  if (const uint8_t type = p[kDenseTypeOffset]; type != static_cast<uint8_t>(t)) {
    const bool other = type == static_cast<uint8_t>(DenseType::kFloat16) ||
                       type == static_cast<uint8_t>(DenseType::kFloat32);
    throw std::runtime_error(pre + "element type " + std::to_string(type) +
                             (other ? std::string(" (a ") + codec_name(static_cast<DenseType>(type)) + " payload)"
                                    : std::string(" (unknown)")) +
                             ", this codec decodes type " + std::to_string(static_cast<int>(t)));
  }
  if (const uint8_t* reserved = p + kDenseReservedOffset; reserved[0] != 0 || reserved[1] != 0)
    throw std::runtime_error(pre + "reserved header bytes 6-7 are " + std::to_string(reserved[0]) + ", " +
                             std::to_string(reserved[1]) + " (must be 0)");
  const uint64_t count = quantize::load_le64(p + kDenseCountOffset);
  const uint64_t body = payload.size() - kDenseHeaderBytes, w = element_bytes(t);
  // Compare by division so a huge count cannot wrap the size computation.
  if (body % w != 0 || body / w != count)
    throw std::runtime_error(pre + "header says " + std::to_string(count) + " elements but the payload has " +
                             std::to_string(payload.size()) + " bytes (" + std::to_string(body) +
                             " body bytes, " + std::to_string(w) + " per element)");
  if (count != out_elements)
    throw std::invalid_argument(pre + "output has " + std::to_string(out_elements) + " elements, payload has " +
                                std::to_string(count));
  return count;
}

void store_f32s(const float* in, size_t n, uint8_t* out) {
  if (n == 0) return;
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(out, in, n * sizeof(float));
  } else {
    for (size_t i = 0; i < n; ++i) quantize::store_le32(out + 4 * i, std::bit_cast<uint32_t>(in[i]));
  }
}

void load_f32s(const uint8_t* in, size_t n, float* out) {
  if (n == 0) return;
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(out, in, n * sizeof(float));
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = std::bit_cast<float>(quantize::load_le32(in + 4 * i));
  }
}

void write_fp32_payload(std::span<const float> values, std::span<uint8_t> out) {
  write_dense_header(DenseType::kFloat32, values.size(), out);
  store_f32s(values.data(), values.size(), out.data() + kDenseHeaderBytes);
}

void read_fp32_payload(std::span<const uint8_t> payload, std::span<float> out) {
  const uint64_t n = check_dense_payload(DenseType::kFloat32, payload, out.size());
  load_f32s(payload.data() + kDenseHeaderBytes, n, out.data());
}

}  // namespace terngrad::comm::detail
