// ReplicaStep on the CUDA backend (--device=gpu): DeviceReplica for the
// TernGrad variables (packed bytes both ways), the CPU fp32 codec for the
// fp32 ones (their payload is their float32 values, whichever side packs it).
#include <algorithm>
#include <stdexcept>

#include "replica_step.h"
#include "terngrad/comm/gradient_codec.h"
#include "terngrad/train/cuda/context.h"
#include "terngrad/train/cuda/device_replica.h"

namespace terngrad::train::detail {

namespace {

class GpuReplicaStep final : public ReplicaStep {
 public:
  GpuReplicaStep(TrainingSession& s, cuda::DeviceReplicaConfig rc)
      : s_(s), replica_(s.model(), std::move(rc)), host_{&s.params(), &s.optimizer(), s.ema()} {
    for (const std::string& spec : s.plan()) codecs_.push_back(comm::make_codec(spec));
  }

  // The device computes the whole gradient before any of it is ready.
  float compute_gradient(int64_t step, const TrainingSession::VariableReady& ready, const Model::ParamsNeeded& needed,
                         const TrainingSession::VariablePartReady& /*part_ready: whole variables here*/) override {
    need_all(s_, needed);
    s_.next_batch(0, step, x_, labels_);
    const float loss = replica_.compute_gradient(
        x_, labels_, stream_seed(s_.cfg().seed, step, s_.workers().at(0), Purpose::kDropout));
    replica_.fold_state(s_.model().state());  // this replica's batch into its own copy (session.h)
    for (size_t v = s_.num_variables(); ready && v-- > 0;) ready(loss, v);
    return loss;
  }

  const std::vector<float>& local_scales() const override { return replica_.local_scales(); }

  // The GPU codecs (fp32, terngrad) have no pre-rounds: a multi-round codec
  // is refused when the step is made (VariableCodec::from).
  void presum_variable(int64_t step, size_t v, uint32_t round, std::span<float> out) override {
    (void)step;
    (void)round;
    (void)out;
    throw std::logic_error("variable " + std::to_string(v) + ": the GPU replica step runs no codec pre-rounds");
  }

  void encode_variable(int64_t step, size_t v, const std::vector<float>& shared,
                       std::span<const comm::ElementRange> slices, std::span<const std::span<uint8_t>> outs) override {
    if (replica_.ternary(v)) {
      // As TrainingSession::encode_variable: a replica whose own scale
      // exceeds the shared one (a late backup) encodes with its own.
      const float scale = std::max(shared[v], replica_.local_scales()[v]);
      for (size_t i = 0; i < slices.size(); ++i)
        replica_.encode_slice(v, step, scale, slices[i].begin, slices[i].count, outs[i]);
      return;
    }
    grad_.resize(s_.params().params[v].value.size());
    replica_.download_gradient(v, grad_);
    comm::EncodeContext ec;
    ec.tensor_id = static_cast<uint32_t>(v);
    ec.step = static_cast<uint32_t>(step);
    ec.seed = stream_seed(s_.cfg().seed, 0, s_.workers().at(0), Purpose::kCodec);
    codecs_[v]->encode_slices(grad_, ec, slices, outs);
  }

  void decode_sum(int64_t /*step*/, const comm::ShardSpec& shard, std::span<const uint8_t> sum) override {
    const size_t v = shard.variable;
    if (replica_.upload_packed_sum(v, shard.begin, shard.count, sum)) return;
    // fp32 variables, and the float32 sum of payloads with different scales.
    sum_.resize(shard.count);
    codecs_[v]->decode_aggregate(sum, sum_);
    replica_.upload_sum_floats(v, shard.begin, sum_);
  }

  void apply(int64_t step, int replicas) override {
    replica_.apply(static_cast<float>(s_.lr(step)), replicas);
    if (s_.ema()) replica_.update_average(static_cast<float>(1.0 - s_.ema()->decay_at(step)));
  }

  // The device applies the whole update at once.
  void apply_range(int64_t /*step*/, size_t v, int64_t /*begin*/, int64_t /*count*/, int /*replicas*/) override {
    throw std::logic_error("variable " + std::to_string(v) + ": the GPU replica step applies whole steps only");
  }
  void finish_apply() override { throw std::logic_error("the GPU replica step applies whole steps only"); }

  // Its encoding stays on the thread that drives the device, after the
  // whole gradient: nothing to overlap.
  bool overlaps_communication() const override { return false; }

  void state_into_session() override { replica_.download_state(host_); }
  void state_from_session() override { replica_.upload_state(host_); }
  void weights_from_session() override { replica_.upload_params(s_.params()); }

 private:
  TrainingSession& s_;
  cuda::DeviceReplica replica_;
  cuda::HostTrainState host_;
  std::vector<std::unique_ptr<comm::GradientCodec>> codecs_;
  Tensor x_;
  std::vector<int32_t> labels_;
  std::vector<float> grad_, sum_;
};

}  // namespace

std::unique_ptr<ReplicaStep> make_gpu_replica_step(TrainingSession& s) {
  if (!cuda::gpu_available())
    throw std::runtime_error("--device=gpu: no CUDA device (" + cuda::gpu_unavailable_reason() + ")");
  const TrainConfig& cfg = s.cfg();
  cuda::DeviceReplicaConfig rc;
  rc.plan = s.plan();
  rc.optimizer.name = cfg.optimizer;
  rc.optimizer.momentum = static_cast<float>(cfg.momentum);
  rc.codec_seed = stream_seed(cfg.seed, 0, s.workers().at(0), Purpose::kCodec);
  rc.moving_average = s.ema() != nullptr && cfg.sync_replicas;  // async: the chief averages pulled values
  return std::make_unique<GpuReplicaStep>(s, std::move(rc));
}

}  // namespace terngrad::train::detail
