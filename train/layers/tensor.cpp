#include "terngrad/train/tensor.h"

#include <stdexcept>

namespace terngrad::train {

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) {
    // A negative extent would wrap to a huge allocation in Tensor's vector.
    if (d < 0) throw std::invalid_argument("numel: negative dimension in shape " + shape_string(s));
    n *= d;
  }
  return n;
}

std::string shape_string(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

}  // namespace terngrad::train
