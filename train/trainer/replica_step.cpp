// What every ReplicaStep shares (replica_step.h), and where the device is chosen.
#include "replica_step.h"

namespace terngrad::train::detail {

void ReplicaStep::encode(int64_t step, const std::vector<float>& shared,
                         const std::vector<std::vector<comm::ElementRange>>& slices,
                         const std::vector<std::vector<std::span<uint8_t>>>& outs) {
  for (size_t v = 0; v < slices.size(); ++v) encode_variable(step, v, shared, slices[v], outs[v]);
}

std::unique_ptr<ReplicaStep> make_replica_step(TrainingSession& s) {
  return s.cfg().device == "gpu" ? make_gpu_replica_step(s) : make_cpu_replica_step(s);
}

}  // namespace terngrad::train::detail
