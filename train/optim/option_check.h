// Private: range checks on optimizer and schedule options, with messages
// that name the component, the option and the value.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace terngrad::train::detail {

inline std::string option_number(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}

// Throws "<component>: <option> = <value> is out of range (<rule>)" unless ok.
inline void require_option(bool ok, std::string_view component, const char* option, double value,
                           const char* rule) {
  if (!ok)
    throw std::invalid_argument(std::string(component) + ": " + option + " = " + option_number(value) +
                                " is out of range (" + rule + ")");
}

}  // namespace terngrad::train::detail
