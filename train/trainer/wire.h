// Private to the trainer: a cluster replica's payload buffers, cut along the
// run's layout: what it pushes to the ps (one payload per shard) and the
// sums it pulls back.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "session.h"
#include "terngrad/comm/placement.h"

namespace terngrad::train::detail {

struct Wire {
  std::vector<std::vector<comm::ElementRange>> slices;       // [variable]
  std::vector<std::vector<uint8_t>> payloads;                // [shard]
  std::vector<std::vector<std::span<uint8_t>>> outs;         // [variable][slice]
  std::vector<std::span<const uint8_t>> views;               // [shard]
  std::vector<std::vector<uint8_t>> sums;                    // [shard]
  double payload_bytes = 0;  // and the float32 vectors of multi-round codecs' pre-rounds

  Wire(TrainingSession& s, const comm::Layout& l) : slices(l.variables.size()), payloads(l.shards.size()),
                                                    outs(l.variables.size()) {
    for (size_t v = 0; v < l.variables.size(); ++v) {
      for (size_t sh : l.shards_of[v]) {
        slices[v].push_back({l.shards[sh].begin, l.shards[sh].count});
        payloads[sh].resize(s.codec(0, v).payload_bytes(l.shards[sh].count));
        payload_bytes += static_cast<double>(payloads[sh].size());
      }
      for (size_t sh : l.shards_of[v]) outs[v].emplace_back(payloads[sh]);
      for (uint32_t round = 0; round < s.presum_rounds(v); ++round)
        payload_bytes += 4.0 * static_cast<double>(s.presum_floats(v, round));
    }
    views.assign(payloads.begin(), payloads.end());
  }
};

}  // namespace terngrad::train::detail
