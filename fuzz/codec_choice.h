// The registry codecs a mode byte picks, for the codec targets. Built once:
// make_codec parses a spec, which is not what these targets fuzz.
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "terngrad/comm/gradient_codec.h"

namespace terngrad::fuzz {

inline comm::GradientCodec& codec_for_mode(uint8_t mode) {
  // Every payload family a ps or worker may receive (ef() adds none: its
  // payloads are its inner codec's).
  static const std::array<std::unique_ptr<comm::GradientCodec>, 10> codecs = {
      comm::make_codec("fp32"),          comm::make_codec("fp16"),
      comm::make_codec("terngrad:clip=2.5"), comm::make_codec("qsgd:levels=7,bucket=16"),
      comm::make_codec("qsgd:levels=127,bucket=512"), comm::make_codec("sign"),
      comm::make_codec("sign:vote=sign"), comm::make_codec("sign:scale=mean"),
      comm::make_codec("topk:ratio=0.25,values=fp16"), comm::make_codec("randomk:ratio=0.25")};
  return *codecs[mode % codecs.size()];
}

}  // namespace terngrad::fuzz
