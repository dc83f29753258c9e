// What every ReplicaStep shares (replica_step.h), and where the device is chosen.
#include "replica_step.h"

namespace terngrad::train::detail {

void ReplicaStep::encode_into(int64_t step, size_t v, const std::vector<float>& shared, Wire& wire) {
  encode_variable(step, v, shared, wire.slices[v], wire.outs[v]);
  wire.encoded(v);
}

void ReplicaStep::encode_slices_within(int64_t step, size_t v, int64_t elements, const std::vector<float>& shared,
                                       Wire& wire, std::vector<bool>& sent,
                                       const std::function<void(size_t shard)>& send) {
  const std::vector<comm::ElementRange>& slices = wire.slices[v];
  for (size_t i = 0; i < slices.size(); ++i) {
    const size_t sh = wire.shard_of(v, i);
    if (sent[sh] || static_cast<int64_t>(slices[i].begin + slices[i].count) > elements) continue;
    encode_variable(step, v, shared, std::span(slices).subspan(i, 1), std::span(wire.outs[v]).subspan(i, 1));
    wire.encoded_slice(v, i);
    sent[sh] = true;
    send(sh);
  }
}

void ReplicaStep::encode(int64_t step, const std::vector<float>& shared, Wire& wire) {
  for (size_t v = 0; v < wire.slices.size(); ++v) encode_into(step, v, shared, wire);
}

void ReplicaStep::need_all(TrainingSession& s, const Model::ParamsNeeded& needed) {
  if (!needed) return;
  for (size_t v = 0; v < s.num_variables(); ++v) needed(v, s.model().params().value(v).size());
}

std::unique_ptr<ReplicaStep> make_replica_step(TrainingSession& s) {
  return s.cfg().device == "gpu" ? make_gpu_replica_step(s) : make_cpu_replica_step(s);
}

}  // namespace terngrad::train::detail
