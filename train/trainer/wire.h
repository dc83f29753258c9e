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
  std::vector<std::vector<uint8_t>> payloads;                // [shard], each the codec's capacity
  std::vector<std::vector<std::span<uint8_t>>> outs;         // [variable][slice]
  std::vector<std::span<const uint8_t>> views;               // [shard], the bytes pushed (encoded())
  std::vector<std::vector<uint8_t>> sums;                    // [shard]
  double presum_bytes = 0;  // per step: the float32 vectors of multi-round codecs' pre-rounds

  Wire(TrainingSession& s, const comm::Layout& l) : slices(l.variables.size()), payloads(l.shards.size()),
                                                    outs(l.variables.size()), s_(s), l_(l) {
    for (size_t v = 0; v < l.variables.size(); ++v) {
      for (size_t sh : l.shards_of[v]) {
        slices[v].push_back({l.shards[sh].begin, l.shards[sh].count});
        payloads[sh].resize(s.codec(0, v).payload_bytes(l.shards[sh].count));
      }
      for (size_t sh : l.shards_of[v]) outs[v].emplace_back(payloads[sh]);
      for (uint32_t round = 0; round < s.presum_rounds(v); ++round)
        presum_bytes += 4.0 * static_cast<double>(s.presum_floats(v, round));
    }
    views.assign(payloads.begin(), payloads.end());
  }

  // Once variable v is encoded into outs[v]: the views of its shards cut to
  // the bytes each payload uses (a variable-size codec writes less than the
  // capacity; fixed-size ones fill it), so that only those are pushed.
  // Variables touch only their own shards: encoders on two threads may call
  // this for different variables at once.
  void encoded(size_t v) {
    const comm::GradientCodec& c = s_.codec(0, v);
    for (size_t sh : l_.shards_of[v]) views[sh] = std::span<const uint8_t>(payloads[sh]).first(
                                          c.encoded_size(payloads[sh], l_.shards[sh].count));
  }

  // The layout shard of variable v's slice i.
  size_t shard_of(size_t v, size_t i) const { return l_.shards_of[v].at(i); }

  // encoded() for slice i of variable v alone.
  void encoded_slice(size_t v, size_t i) {
    const size_t sh = shard_of(v, i);
    views[sh] = std::span<const uint8_t>(payloads[sh]).first(s_.codec(0, v).encoded_size(payloads[sh], l_.shards[sh].count));
  }

  // What this replica sent in its last step: the used bytes of every
  // payload and the pre-round vectors.
  double step_bytes() const {
    double b = presum_bytes;
    for (const auto& view : views) b += static_cast<double>(view.size());
    return b;
  }

 private:
  TrainingSession& s_;
  const comm::Layout& l_;  // the run's, outliving the wire
};

}  // namespace terngrad::train::detail
