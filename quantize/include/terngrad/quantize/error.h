// Errors of the codec: one exception type with a machine-readable code and a
// message that names the offending field, value or element index.
#pragma once

#include <stdexcept>
#include <string>

namespace terngrad::quantize {

enum class Errc : int {
  kInvalidArgument = 1,  // bad clip factor, shared scale, buffer size, shape
  kNonFinite,            // NaN or Inf in the input tensor
  kBufferTooSmall,       // output buffer smaller than max_encoded_bytes(n)
  kMalformedPayload,     // header fault: magic, version, codec, CRC, scale, length
  kInvalidCode,          // body holds the reserved code 0b11 or nonzero padding
  kScaleMismatch,        // payloads summed together do not share one scale/count
  kCuda,                 // a CUDA runtime call failed
};

class CodecError : public std::runtime_error {
 public:
  CodecError(Errc code, const std::string& what) : std::runtime_error(what), code_(code) {}
  Errc code() const noexcept { return code_; }

 private:
  Errc code_;
};

}  // namespace terngrad::quantize
