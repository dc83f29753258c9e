#include "terngrad/quantize/format.h"

namespace terngrad::quantize {

const char* header_fault_name(HeaderFault f) {
  switch (f) {
    case HeaderFault::kNone: return "no fault";
    case HeaderFault::kTooShort: return "shorter than the 40-byte header";
    case HeaderFault::kBadMagic: return "bad magic (expected \"TGRD\")";
    case HeaderFault::kBadVersion: return "unsupported format version (expected 1)";
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

}  // namespace terngrad::quantize
