// Private to the trainer: one sync step of a cluster replica with its
// communication overlapped (--overlap_comm, where the ReplicaStep allows it):
// each variable's payloads are queued for the ps as soon as the backward pass
// has finished it (in buckets of about kBucketBytes), the ps sums each shard
// once every replica delivered it, and the sums are decoded as they arrive.
// Codecs that share scales exchange each layer's scales on a second thread,
// then encode and queue it there, so the backward pass does not wait.
// The arithmetic is that of the sync loop's plain step, encode() + push() +
// pull_sums() (the distributed bit-equality tests run both).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "replica_step.h"
#include "session.h"
#include "step_clock.h"
#include "terngrad/comm/placement.h"
#include "terngrad/comm/worker_client.h"
#include "wire.h"

namespace terngrad::train::detail {

class OverlappedStep {
 public:
  // wants_scales: some variable's codec shares scales between the replicas.
  OverlappedStep(TrainingSession& s, ReplicaStep& replica, comm::WorkerClient& client, const comm::Layout& layout,
                 Wire& wire, bool wants_scales);

  // Step `step`'s gradient out and its sums in, decoded into the replica's
  // update (not applied); returns the sums' header.
  comm::WorkerClient::Sums run(int64_t step, StepClock& clock);

  static constexpr size_t kBucketBytes = size_t{256} << 10;

 private:
  void queue_variable(float loss, size_t v);
  void flush(float loss);

  TrainingSession& s_;
  ReplicaStep& replica_;
  comm::WorkerClient& client_;
  const comm::Layout& layout_;
  Wire& wire_;
  const bool wants_scales_;
  std::vector<size_t> bucket_;
  std::vector<std::span<const uint8_t>> bucket_views_;
  size_t bucket_bytes_ = 0;
};

}  // namespace terngrad::train::detail
