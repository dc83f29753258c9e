// Private: what the step units need to know of one shard of this ps: the
// codec its payloads are in and its element count. The service owns the
// codecs; the units only point at them.
#pragma once

#include <cstdint>

#include "terngrad/comm/gradient_codec.h"

namespace terngrad::comm::detail {

struct ShardCoding {
  const GradientCodec* codec = nullptr;  // not null; outlives the unit it is given to
  uint64_t elements = 0;
  uint32_t variable = 0;  // where the shard lies, for codecs that re-encode the sum
  uint64_t begin = 0;
};

}  // namespace terngrad::comm::detail
