// Private to the trainer: the device half of a GPU replica in a ps/worker
// cluster (--device=gpu with --job_name or TF_CONFIG). run_replica
// (distributed.cpp) keeps the network, the logging and the chief's duties and
// calls these at the points where the CPU replica calls TrainingSession, so
// both replicas share one loop and exchange the same messages.
//
// Implemented on terngrad::train::cuda::DeviceReplica (gpu_replica.cpp) in
// CUDA builds; gpu_trainer_stub.cpp throws saying the build has no CUDA.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "session.h"
#include "terngrad/comm/placement.h"

namespace terngrad::train::detail {

class GpuReplicaStep {
 public:
  virtual ~GpuReplicaStep() = default;
  // The session's next batch (worker 0 of the session), gradient and local
  // scales on the device; returns the loss.
  virtual float compute_gradient(int64_t step) = 0;
  virtual const std::vector<float>& local_scales() const = 0;
  // TrainingSession::encode's contract: payload bytes of every slice.
  virtual void encode(int64_t step, const std::vector<float>& shared,
                      const std::vector<std::vector<comm::ElementRange>>& slices,
                      const std::vector<std::vector<std::span<uint8_t>>>& outs) = 0;
  // sums[shard]: the pulled aggregates; decodes them into the device sums,
  // averages over `replicas`, applies the optimizer at step's rate and
  // updates the moving average (as TrainingSession::apply).
  virtual void apply(int64_t step, const comm::Layout& layout, const std::vector<std::vector<uint8_t>>& sums,
                     int replicas) = 0;
  // The device state (weights, optimizer slots and steps, moving average)
  // into the session's host objects: evaluation, checkpoints, export.
  virtual void download_state() = 0;
  // The session's state onto the device (after TrainingSession::restore()).
  virtual void upload_state() = 0;
  // Only the session's weights onto the device: an asynchronous replica
  // computes its gradient at the values it pulled.
  virtual void upload_params() = 0;
};

// Throws std::runtime_error naming what is missing (CUDA build, device).
std::unique_ptr<GpuReplicaStep> make_gpu_replica_step(TrainingSession& s);

}  // namespace terngrad::train::detail
