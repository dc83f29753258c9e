// Private: number formatting for error messages (std::to_string prints
// 0.000000 for small scales, which would hide the value that was wrong).
#pragma once

#include <cstdio>
#include <string>

namespace terngrad::quantize::detail {

inline std::string fmt_num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

}  // namespace terngrad::quantize::detail
