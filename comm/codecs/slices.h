// Private: argument checks shared by the codecs' encode_slices().
#pragma once

#include <span>
#include <string>

#include "terngrad/comm/gradient_codec.h"

namespace terngrad::comm::detail {

// Same number of slices and outputs, each slice aligned and inside n
// elements, each output large enough; std::invalid_argument naming the
// codec and the slice otherwise.
void check_slices(const std::string& codec, uint64_t n, std::span<const ElementRange> slices,
                  std::span<const std::span<uint8_t>> outs, const GradientCodec& c);

}  // namespace terngrad::comm::detail
