// --device=gpu in a build without the CUDA backend (TG_CUDA=OFF, no nvcc, or
// no cuDNN found at configure time).
#include <stdexcept>

#include "replica_step.h"
#include "session.h"

namespace terngrad::train::detail {

TrainResult run_training_gpu(const TrainConfig&) {
  throw std::runtime_error(
      "--device=gpu: this build has no CUDA backend (configured without CUDA or without cuDNN; "
      "rebuild with nvcc and cuDNN available and -DTG_CUDA=ON)");
}

std::unique_ptr<ReplicaStep> make_gpu_replica_step(TrainingSession&) {
  throw std::runtime_error(
      "--device=gpu: this build has no CUDA backend, so a cluster replica cannot run on a GPU "
      "(rebuild with nvcc and cuDNN available and -DTG_CUDA=ON)");
}

}  // namespace terngrad::train::detail
