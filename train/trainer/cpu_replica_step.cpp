// ReplicaStep on the CPU: the session's own step for its one worker (local
// index 0), with the update summed into a GradSet as the sums arrive.
#include <chrono>
#include <thread>

#include "replica_step.h"

namespace terngrad::train::detail {

namespace {

class CpuReplicaStep final : public ReplicaStep {
 public:
  explicit CpuReplicaStep(TrainingSession& s) : s_(s), sum_(s.make_grads()) {}

  float compute_gradient(int64_t step, const TrainingSession::VariableReady& ready, const Model::ParamsNeeded& needed,
                         const TrainingSession::VariablePartReady& part_ready) override {
    const TrainConfig& cfg = s_.cfg();
    if (!cfg.comm_only) return s_.compute_gradient(0, step, ready, needed, part_ready);
    // --comm_only: the emulated compute, then the whole fixed gradient at once.
    need_all(s_, needed);
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(cfg.compute_ms));
    return s_.fixed_gradient(0, ready);
  }

  const std::vector<float>& local_scales() const override { return s_.local_scales(0); }

  void presum_variable(int64_t step, size_t v, uint32_t round, std::span<float> out) override {
    s_.presum_variable(0, step, v, round, out);
  }

  void encode_variable(int64_t step, size_t v, const std::vector<float>& shared,
                       std::span<const comm::ElementRange> slices, std::span<const std::span<uint8_t>> outs) override {
    s_.encode_variable(0, step, v, shared, slices, outs);
  }

  void decode_sum(int64_t step, const comm::ShardSpec& shard, std::span<const uint8_t> sum) override {
    s_.decode_sum(step, shard.variable, shard.count, sum,
                  std::span<float>(sum_[shard.variable].data).subspan(shard.begin, shard.count));
  }

  void apply(int64_t step, int replicas) override { s_.apply(step, sum_, replicas); }
  void apply_range(int64_t step, size_t v, int64_t begin, int64_t count, int replicas) override {
    s_.apply_range(step, sum_, v, begin, count, replicas);
  }
  void finish_apply() override { s_.finish_apply(); }

  bool overlaps_communication() const override { return s_.cfg().overlap_comm; }

  // The session's objects are this step's state.
  void state_into_session() override {}
  void state_from_session() override {}
  void weights_from_session() override {}

 private:
  TrainingSession& s_;
  GradSet sum_;  // the decoded sums of the step's update
};

}  // namespace

std::unique_ptr<ReplicaStep> make_cpu_replica_step(TrainingSession& s) { return std::make_unique<CpuReplicaStep>(s); }

}  // namespace terngrad::train::detail
