// Private: number formatting for error messages (std::to_string prints
// 0.000000 for small scales, which would hide the value that was wrong).
#pragma once

#include <cstdio>
#include <string>

#include "terngrad/quantize/error.h"
#include "terngrad/quantize/format.h"
#include "terngrad/quantize/ternary_math.h"

namespace terngrad::quantize::detail {

inline std::string fmt_num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

// Payloads summed together must share one count and one scale (bit for
// bit); `who` names the caller in the message ("sum_shared", "a sum").
inline void require_same_scale(size_t index, const PayloadHeader& h, const PayloadHeader& first, const char* who) {
  if (h.count == first.count && float_bits(h.scale) == float_bits(first.scale)) return;
  throw CodecError(Errc::kScaleMismatch, "payload " + std::to_string(index) + " has " + std::to_string(h.count) +
                                             " elements and scale " + fmt_num(h.scale) + ", payload 0 has " +
                                             std::to_string(first.count) + " and " + fmt_num(first.scale) + ": " + who +
                                             " needs one shared scale (encode with shared_scale)");
}

}  // namespace terngrad::quantize::detail
