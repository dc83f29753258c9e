// The registry codecs a mode byte picks, for the codec targets. Built once:
// make_codec parses a spec, which is not what these targets fuzz.
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "terngrad/comm/gradient_codec.h"

namespace terngrad::fuzz {

// The codec index a target's mode byte names: bits 0-1 and 3-7 (bit 2 is the
// targets' "recompute the header CRC" switch), so modes 0-7 keep picking
// fp32 / fp16 / terngrad / qsgd as they always did and the others reach the
// rest of the list.
inline uint8_t codec_index(uint8_t mode) { return static_cast<uint8_t>((mode & 0x03) | ((mode >> 3) << 2)); }

inline comm::GradientCodec& codec_for_mode(uint8_t mode) {
  // Every payload family a ps or worker may receive (ef() adds none: its
  // payloads are its inner codec's). Append only: seeds name codecs by index.
  static const std::array<std::unique_ptr<comm::GradientCodec>, 11> codecs = {
      comm::make_codec("fp32"),          comm::make_codec("fp16"),
      comm::make_codec("terngrad:clip=2.5"), comm::make_codec("qsgd:levels=7,bucket=16"),
      comm::make_codec("qsgd:levels=127,bucket=512"), comm::make_codec("sign"),
      comm::make_codec("sign:vote=sign"), comm::make_codec("sign:scale=mean"),
      comm::make_codec("topk:ratio=0.25,values=fp16"), comm::make_codec("randomk:ratio=0.25"),
      comm::make_codec("terngrad:clip=2.5,bucket=8")};
  return *codecs[mode % codecs.size()];
}

}  // namespace terngrad::fuzz
