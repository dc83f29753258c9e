// The registry codecs a mode byte picks, for the codec targets. Built once:
// make_codec parses a spec, which is not what these targets fuzz.
#pragma once

#include <array>
#include <cstdint>
#include <exception>
#include <memory>
#include <vector>

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
  static const std::array<std::unique_ptr<comm::GradientCodec>, 12> codecs = {
      comm::make_codec("fp32"),          comm::make_codec("fp16"),
      comm::make_codec("terngrad:clip=2.5"), comm::make_codec("qsgd:levels=7,bucket=16"),
      comm::make_codec("qsgd:levels=127,bucket=512"), comm::make_codec("sign"),
      comm::make_codec("sign:vote=sign"), comm::make_codec("sign:scale=mean"),
      comm::make_codec("topk:ratio=0.25,values=fp16"), comm::make_codec("randomk:ratio=0.25"),
      comm::make_codec("terngrad:clip=2.5,bucket=8"), comm::make_codec("powersgd:rank=2,rows=4")};
  return *codecs[mode % codecs.size()];
}

// What a multi-round codec's decoders need besides the payload: round sums
// for n elements (ones: any finite P decodes). Empty when the codec has no
// pre-rounds or n does not fit it (its decoders then refuse, naming why).
struct RoundSums {
  std::vector<std::vector<float>> sums;
  comm::DecodeContext ctx;
  RoundSums(const comm::GradientCodec& c, uint64_t n) {
    try {
      for (uint32_t r = 0; r < c.presum_rounds(); ++r) sums.emplace_back(c.presum_floats(r, n), 1.0f);
    } catch (const std::exception&) {
      sums.clear();
    }
    for (const auto& s : sums) ctx.presums.emplace_back(s);
  }
};

}  // namespace terngrad::fuzz
