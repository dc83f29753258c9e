// Private: the common frame of the codecs' state blobs (comm/codecs/
// FORMATS.md, "Codec state blobs"): u32 magic | u32 version | u64 n at the
// start, little-endian floats after the header. ef() and server_ef() write
// and check their blobs through these, so both refuse a damaged one in the
// same words.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>

#include "terngrad/quantize/format.h"

namespace terngrad::comm::detail {

struct StateFrame {
  uint32_t magic;
  uint32_t version;
  size_t header_bytes;  // >= 16
  const char* kind;     // "an error-feedback state", in "bad magic (not ...)"
};

inline void write_state_header(const StateFrame& f, uint64_t n, uint8_t* out) {
  quantize::store_le32(out, f.magic);
  quantize::store_le32(out + 4, f.version);
  quantize::store_le32(out + 8, static_cast<uint32_t>(n));
  quantize::store_le32(out + 12, static_cast<uint32_t>(n >> 32));
}

// Checks the header's length, magic and version; returns its n. `what`
// names the blob in the message ("ef(terngrad) state").
inline uint64_t read_state_header(const StateFrame& f, std::span<const uint8_t> blob, const std::string& what) {
  if (blob.size() < f.header_bytes)
    throw std::invalid_argument(what + ": " + std::to_string(blob.size()) + " bytes, shorter than its " +
                                std::to_string(f.header_bytes) + "-byte header");
  if (quantize::load_le32(blob.data()) != f.magic)
    throw std::invalid_argument(what + ": bad magic (not " + f.kind + ")");
  if (const uint32_t v = quantize::load_le32(blob.data() + 4); v != f.version)
    throw std::invalid_argument(what + ": version " + std::to_string(v) + ", this build reads version " +
                                std::to_string(f.version));
  return quantize::load_le32(blob.data() + 8) | static_cast<uint64_t>(quantize::load_le32(blob.data() + 12)) << 32;
}

inline float load_float_le(const uint8_t* p) {
  const uint32_t bits = quantize::load_le32(p);
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline void store_float_le(uint8_t* p, float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  quantize::store_le32(p, bits);
}

}  // namespace terngrad::comm::detail
