// Private to the trainer: one cluster replica's share of a step, on the
// device it runs on. The replica's loops (sync_loop.cpp, async_loop.cpp)
// keep the network, the logging and the chief's duties; a ReplicaStep keeps
// the gradient and the update, in TrainingSession's pieces (session.h) for
// the replica's one worker:
//   compute_gradient(step)      batch, forward/backward, weight decay, local scales
//   encode(step, shared scales) one payload per slice of each variable
//   ...the ps sums every replica's payloads per shard...
//   decode_sum(step, shard, sum) each pulled sum into the step's update
//   apply(step, R)              average over R replicas, optimizer, moving average
//                               (or apply_range() per shard, then finish_apply())
// so a cluster of replicas computes what the in-process trainer
// (trainer.cpp) computes with as many virtual workers.
//
// The device is chosen once, when the step is made: on the CPU the session
// itself computes (cpu_replica_step.cpp); with --device=gpu the CUDA backend
// does (gpu_replica_step.cpp; gpu_trainer_stub.cpp throws in builds without
// it) while the session keeps the data, the schedule and a host copy of the
// state for evaluation, checkpoints and export.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "session.h"
#include "terngrad/comm/placement.h"
#include "wire.h"

namespace terngrad::train::detail {

class ReplicaStep {
 public:
  virtual ~ReplicaStep() = default;

  // The session's next batch (its worker 0), the gradient at the current
  // weights and the local scales; returns the loss. ready, when given, is
  // called with each variable once its gradient is complete, last first
  // (TrainingSession::compute_gradient's contract). needed, when given, is
  // called with each layer's variables before they are read
  // (Model::forward_backward's params_needed).
  // part_ready, when given, is TrainingSession::compute_gradient's.
  virtual float compute_gradient(int64_t step, const TrainingSession::VariableReady& ready,
                                 const Model::ParamsNeeded& needed,
                                 const TrainingSession::VariablePartReady& part_ready) = 0;
  float compute_gradient(int64_t step) { return compute_gradient(step, {}, {}, {}); }
  // needed() of every variable, whole (a step that reads them all at once).
  static void need_all(TrainingSession& s, const Model::ParamsNeeded& needed);
  // Local scale of each variable (0 for codecs without scale sharing).
  virtual const std::vector<float>& local_scales() const = 0;
  // TrainingSession::presum_variable's contract (multi-round codecs), for
  // this replica's gradient; the round sums are the session's presum_sums().
  virtual void presum_variable(int64_t step, size_t v, uint32_t round, std::span<float> out) = 0;
  // TrainingSession::encode_variable's contract, for this replica's gradient.
  virtual void encode_variable(int64_t step, size_t v, const std::vector<float>& shared,
                               std::span<const comm::ElementRange> slices,
                               std::span<const std::span<uint8_t>> outs) = 0;
  // encode_variable() of variable v into the wire's payloads, whose views
  // then hold the bytes to push (Wire::encoded()).
  void encode_into(int64_t step, size_t v, const std::vector<float>& shared, Wire& wire);
  // For a codec that encodes_slices_separately(): each slice of v that lies
  // in [0, elements) and whose shard is not marked in `sent` is encoded
  // alone into the wire, marked, and its shard handed to `send`.
  void encode_slices_within(int64_t step, size_t v, int64_t elements, const std::vector<float>& shared, Wire& wire,
                            std::vector<bool>& sent, const std::function<void(size_t shard)>& send);
  // encode_into() of every variable (TrainingSession::encode's contract).
  void encode(int64_t step, const std::vector<float>& shared, Wire& wire);
  // The pulled sum of one shard of step `step`, decoded into the step's update.
  virtual void decode_sum(int64_t step, const comm::ShardSpec& shard, std::span<const uint8_t> sum) = 0;
  // Once every shard's sum is decoded: the update averaged over `replicas`,
  // the optimizer at step's rate, the moving average (TrainingSession::apply).
  virtual void apply(int64_t step, int replicas) = 0;
  // The same a piece at a time: elements [begin, begin + count) of variable
  // v once their sums are decoded; then finish_apply() once all are
  // (TrainingSession::apply_range).
  virtual void apply_range(int64_t step, size_t v, int64_t begin, int64_t count, int replicas) = 0;
  virtual void finish_apply() = 0;
  // Whether a sync step may overlap its communication with the backward
  // pass and the next step's forward pass (OverlappedStep, --overlap_comm):
  // encode and decode then run as the gradient completes and the sums
  // arrive, some on a second thread, and variables are applied one by one.
  virtual bool overlaps_communication() const = 0;

  // The step's state (weights, optimizer slots and steps, moving average)
  // into the session's host objects: evaluation, checkpoints, export.
  virtual void state_into_session() = 0;
  // The session's state into the step's (after TrainingSession::restore()).
  virtual void state_from_session() = 0;
  // Only the session's weights: an asynchronous replica computes its
  // gradient at the values it pulled into the session.
  virtual void weights_from_session() = 0;
};

// The step on cfg.device's device. Throws std::runtime_error naming what is
// missing for --device=gpu (a CUDA build, a device).
std::unique_ptr<ReplicaStep> make_replica_step(TrainingSession& s);
std::unique_ptr<ReplicaStep> make_cpu_replica_step(TrainingSession& s);
std::unique_ptr<ReplicaStep> make_gpu_replica_step(TrainingSession& s);

}  // namespace terngrad::train::detail
