// The registry codecs a mode byte picks, for the codec targets. Built once:
// make_codec parses a spec, which is not what these targets fuzz.
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "terngrad/comm/gradient_codec.h"

namespace terngrad::fuzz {

inline comm::GradientCodec& codec_for_mode(uint8_t mode) {
  static const std::array<std::unique_ptr<comm::GradientCodec>, 3> codecs = {
      comm::make_codec("fp32"), comm::make_codec("fp16"), comm::make_codec("terngrad:clip=2.5")};
  return *codecs[mode % codecs.size()];
}

}  // namespace terngrad::fuzz
