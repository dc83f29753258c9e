// Private: the values of an async run on one ps and the pushes applied to
// them. Each push is decoded and handed to the update rule (UpdateHandler) at
// once, at the current global step, which then advances; a replica's push of
// a step it pushed before is a retry and is dropped.
//
// No gRPC here: the service (ps_server.cpp) checks a push completely (replica,
// payload sizes, codec validation) and hands it to apply().
//
// Not thread-safe: the service calls every member with its lock held (the
// UpdateHandler is promised that lock), except while it fills the values
// of a unit not yet shared (Init).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "shard_coding.h"
#include "terngrad/comm/ps_server.h"

namespace terngrad::comm::detail {

class AsyncUpdates {
 public:
  // shards: this ps's shards (their codecs outlive this); each starts as
  // zeros. replicas: the run's replicas. first_step: the global step the run
  // starts at. handler: the update rule, which outlives this. last_step:
  // no push is applied once the global step reaches it (0: no limit). Throws
  // std::invalid_argument on a bad count, a negative last_step or a null codec.
  AsyncUpdates(std::vector<ShardCoding> shards, int replicas, int64_t first_step, UpdateHandler& handler,
               int64_t last_step = 0);

  int64_t global_step() const { return global_step_; }
  // The run's last step is applied: further pushes are dropped.
  bool past_end() const { return last_step_ > 0 && global_step_ >= last_step_; }
  size_t shards() const { return values_.size(); }
  // A shard's values (shard in [0, shards()), std::out_of_range otherwise).
  std::span<float> values(size_t shard);
  std::span<const float> values(size_t shard) const;

  enum class Outcome {
    kApplied,    // every shard updated; the global step advanced
    kDuplicate,  // the replica pushed this step before: dropped
    kPastEnd,    // the global step is at the run's last step: dropped, nothing changes
  };
  // A replica's push of step: payloads[s] is shard s's, validated by the
  // caller. replica must be in [0, replicas) and there must be one payload
  // per shard (std::invalid_argument otherwise, before anything changes).
  // Throws what decoding or the update rule throws; then some shards may be
  // updated and the run cannot go on.
  Outcome apply(uint32_t replica, int64_t step, std::span<const std::string> payloads);

  // The last step a replica's push was applied for (-1 for none).
  int64_t last_pushed(uint32_t replica) const;
  uint64_t duplicates() const { return duplicates_; }

 private:
  std::vector<ShardCoding> shards_;
  std::vector<std::vector<float>> values_;  // [shard]
  UpdateHandler* handler_;
  int64_t global_step_;
  int64_t last_step_;  // 0: none
  std::vector<int64_t> last_pushed_;  // [replica]
  uint64_t duplicates_ = 0;
};

}  // namespace terngrad::comm::detail
