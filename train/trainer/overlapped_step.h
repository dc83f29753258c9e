// Private to the trainer: the sync steps of a cluster replica with their
// communication overlapped (--overlap_comm, where the ReplicaStep allows it).
//
// Out: each variable's payloads are queued for the ps as soon as the
// backward pass has finished it (in buckets sized to the link; the
// client sends the earliest layer's first, P3-style, so their sums come
// back first), and a shard of a codec that encodes slices separately
// (fp32) as soon as its elements are (a fully connected layer's weight
// gradient is done a row block at a time). Codecs that share scales
// exchange each layer's scales on a second thread, then encode and queue it
// there, so the backward pass does not wait.
//
// In: the ps sums each shard once every replica delivered it. run() returns
// once the step's payloads are queued; its sums are taken by the next step's
// forward pass as it reads the variables (Model::forward_backward's
// params_needed: a layer's variables, or a Dense layer's weights a row block
// at a time): each sum is decoded as it arrives and its shard applied at
// once (optimizer and moving average, TrainingSession::apply_range), so the
// first layers, and the first rows of a large fully connected one, compute
// while the last sums still cross the link. finish() takes the rest of a step's sums (before an evaluation, a
// checkpoint or the end). With backup replicas (--replicas_to_aggregate
// below the replica count) the number of payloads summed is known only at
// the end, so the whole update waits for the last sum.
//
// The arithmetic is that of the sync loop's plain step, encode() + push() +
// pull_sums() + apply() (the distributed bit-equality tests run both).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
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
  // replicas: the payloads every sum holds when that is known before the
  // step ends (every replica aggregated), else 0 (backups: apply at the end).
  OverlappedStep(TrainingSession& s, ReplicaStep& replica, comm::WorkerClient& client, const comm::Layout& layout,
                 Wire& wire, bool wants_scales, int replicas);

  // A step whose sums are in and applied: its step and the sums' header.
  struct Finished {
    int64_t step = 0;
    comm::WorkerClient::Sums sums;
  };

  // Step `step` up to its pushes: the forward pass (finishing the pending
  // step's update as it goes), the backward pass with the payloads leaving.
  // The step is then pending. Returns the step that was pending before, now
  // finished. The clock gets this call's time, the pending step's waits included.
  std::optional<Finished> run(int64_t step, StepClock& clock);
  // The pending step's remaining sums, decoded and applied.
  Finished finish(StepClock& clock);
  bool pending() const { return pending_; }

  // A bucket holds about a millisecond of the last step's push rate
  // (WorkerClient::push_rate), within these bounds; the first step's hold
  // kBucketBytes. Small buckets on a slow link: a sum waits for every
  // replica's bytes of its shard, and a layer's gradient that overtakes
  // others waits behind the buckets in flight. Large ones on a fast link:
  // each push is a call, and the calls' CPU time is the limit there.
  static constexpr size_t kBucketBytes = size_t{256} << 10;
  static constexpr size_t kMinBucketBytes = size_t{64} << 10;
  static constexpr size_t kMaxBucketBytes = size_t{4} << 20;
  static constexpr double kBucketSeconds = 4e-3;

 private:
  using Clock = std::chrono::steady_clock;
  void queue_shard(float loss, size_t sh);
  // Encodes and queues v's slices that lie in [0, elements) and are not
  // queued yet (a codec that encodes_slices_separately()).
  void encode_slices_done(int64_t step, float loss, size_t v, int64_t elements, const std::vector<float>& no_scales);
  void flush(float loss);
  // Decodes the pending step's sums as they arrive until elements
  // [0, elements) of variable v are applied (replicas_ > 0).
  void take_sums_until(size_t v, int64_t elements, StepClock& clock);
  // Decodes the next sum (waiting for it); false when none is left.
  bool take_next_sum(StepClock& clock);

  TrainingSession& s_;
  ReplicaStep& replica_;
  comm::WorkerClient& client_;
  const comm::Layout& layout_;
  Wire& wire_;
  const bool wants_scales_;
  const int replicas_;
  std::vector<size_t> bucket_;
  std::vector<std::span<const uint8_t>> bucket_views_;
  size_t bucket_bytes_ = 0;
  size_t bucket_limit_ = kBucketBytes;  // this step's

  // The pending step: its sums arriving, its variables applied one by one.
  bool pending_ = false;
  int64_t pending_step_ = 0;
  Clock::time_point began_;                      // its begin_step()
  std::vector<size_t> next_shard_;               // [variable] its first shard (in element order) not applied
  std::vector<int64_t> applied_elements_;        // [variable] elements [0, this) applied
  std::vector<bool> shard_applied_;              // [shard]
  std::vector<bool> queued_;                     // [shard] this step's payload queued
  std::vector<std::pair<Clock::time_point, Clock::time_point>> blocked_;  // waits on the network
};

}  // namespace terngrad::train::detail
