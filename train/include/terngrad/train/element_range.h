// A piece of a tensor named by its first element and its length, as the
// split-step paths (an optimizer's apply_range, the moving average's
// update_range, the session's apply_range) receive one: checked before
// anything is touched, since each piece comes from a sum that arrived over
// the network in pieces.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace terngrad::train {

// Throws std::invalid_argument "<who>: elements [begin, +count) outside
// <what> of <size>" unless 0 <= begin, 0 <= count and begin + count <= size
// (checked without overflow).
inline void check_element_range(const std::string& who, const std::string& what, int64_t begin, int64_t count,
                                int64_t size) {
  if (begin < 0 || count < 0 || begin > size || count > size - begin)
    throw std::invalid_argument(who + ": elements [" + std::to_string(begin) + ", +" + std::to_string(count) +
                                ") outside " + what + " of " + std::to_string(size));
}

}  // namespace terngrad::train
