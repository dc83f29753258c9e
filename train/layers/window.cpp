#include <algorithm>
#include <stdexcept>
#include <string>

#include "terngrad/train/layers.h"

namespace terngrad::train {

const char* padding_name(Padding p) { return p == Padding::kSame ? "SAME" : "VALID"; }

WindowGeometry window_geometry(int64_t in, int64_t kernel, int64_t stride, Padding padding) {
  if (kernel <= 0 || stride <= 0)
    throw std::invalid_argument("window_geometry: kernel " + std::to_string(kernel) + " and stride " +
                                std::to_string(stride) + " must be positive");
  WindowGeometry g;
  if (padding == Padding::kSame) {
    g.out = (in + stride - 1) / stride;
    const int64_t pad_total = std::max<int64_t>((g.out - 1) * stride + kernel - in, 0);
    g.pad_before = pad_total / 2;
  } else {
    const int64_t span = in - kernel + 1;
    g.out = span > 0 ? (span + stride - 1) / stride : 0;
    g.pad_before = 0;
  }
  return g;
}

}  // namespace terngrad::train
