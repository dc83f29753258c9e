#include "terngrad/quantize/format.h"

#include "terngrad/quantize/ternary_math.h"  // bits_float

namespace terngrad::quantize {

const char* header_fault_name(HeaderFault f) {
  switch (f) {
    case HeaderFault::kNone: return "no fault";
    case HeaderFault::kTooShort: return "shorter than the 40-byte header";
    case HeaderFault::kBadMagic: return "bad magic (expected \"TGRD\")";
    case HeaderFault::kBadVersion: return "unsupported format version (expected 1 or 2)";
    case HeaderFault::kBadCodec: return "unknown codec id (expected 1, ternary 2-bit)";
    case HeaderFault::kBadHeaderSize: return "header size field is not 40";
    case HeaderFault::kUnknownFlags: return "reserved flag bits are set";
    case HeaderFault::kBadCrc: return "header CRC-32 mismatch (corrupt header)";
    case HeaderFault::kBadScale: return "scale is negative, NaN or Inf";
    case HeaderFault::kLengthMismatch:
      return "payload length disagrees with the element count (truncated or padded payload)";
  }
  return "unknown fault";
}

PayloadHeader read_header_fields(const uint8_t* p) {
  PayloadHeader h;
  h.version = p[kHeaderVersionOffset];
  h.codec = header_codec(p);
  h.flags = header_flags(p);
  h.count = header_count(p);
  h.scale = bits_float(header_scale_bits(p));
  h.tensor_id = load_le32(p + kHeaderTensorIdOffset);
  h.seed = load_le64(p + kHeaderSeedOffset);
  h.step = load_le32(p + kHeaderStepOffset);
  return h;
}

}  // namespace terngrad::quantize
