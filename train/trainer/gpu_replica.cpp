// GpuReplicaStep on the CUDA backend: DeviceReplica for the TernGrad
// variables (packed bytes both ways), the CPU fp32 codec for the fp32 ones
// (their payload is their float32 values, whichever side packs it).
#include "gpu_replica.h"

#include <stdexcept>

#include "terngrad/comm/gradient_codec.h"
#include "terngrad/train/cuda/context.h"
#include "terngrad/train/cuda/device_replica.h"

namespace terngrad::train::detail {

namespace {

class CudaReplicaStep final : public GpuReplicaStep {
 public:
  CudaReplicaStep(TrainingSession& s, cuda::DeviceReplicaConfig rc)
      : s_(s), replica_(s.model(), std::move(rc)), host_{&s.params(), &s.optimizer(), s.ema()} {
    for (const std::string& spec : s.plan()) codecs_.push_back(comm::make_codec(spec));
  }

  float compute_gradient(int64_t step) override {
    s_.next_batch(0, step, x_, labels_);
    return replica_.compute_gradient(x_, labels_,
                                     stream_seed(s_.cfg().seed, step, s_.workers().at(0), Purpose::kDropout));
  }

  const std::vector<float>& local_scales() const override { return replica_.local_scales(); }

  void encode(int64_t step, const std::vector<float>& shared,
              const std::vector<std::vector<comm::ElementRange>>& slices,
              const std::vector<std::vector<std::span<uint8_t>>>& outs) override {
    const ParamSet& ps = s_.params();
    for (size_t v = 0; v < ps.size(); ++v) {
      if (replica_.ternary(v)) {
        // As TrainingSession::encode: a replica whose own scale exceeds the
        // shared one (a late backup) encodes with its own.
        const float scale = std::max(shared[v], replica_.local_scales()[v]);
        for (size_t i = 0; i < slices[v].size(); ++i)
          replica_.encode_slice(v, step, scale, slices[v][i].begin, slices[v][i].count, outs[v][i]);
        continue;
      }
      grad_.resize(ps.params[v].value.size());
      replica_.download_gradient(v, grad_);
      comm::EncodeContext ec;
      ec.tensor_id = static_cast<uint32_t>(v);
      ec.step = static_cast<uint32_t>(step);
      ec.seed = stream_seed(s_.cfg().seed, 0, s_.workers().at(0), Purpose::kCodec);
      codecs_[v]->encode_slices(grad_, ec, slices[v], outs[v]);
    }
  }

  void apply(int64_t step, const comm::Layout& layout, const std::vector<std::vector<uint8_t>>& sums,
             int replicas) override {
    for (size_t v = 0; v < layout.shards_of.size(); ++v)
      for (size_t sh : layout.shards_of[v]) {
        const comm::ShardSpec& spec = layout.shards[sh];
        if (replica_.upload_packed_sum(v, spec.begin, spec.count, sums[sh])) continue;
        // fp32 variables, and the float32 sum of payloads with different scales.
        sum_.resize(spec.count);
        codecs_[v]->decode_aggregate(sums[sh], sum_);
        replica_.upload_sum_floats(v, spec.begin, sum_);
      }
    replica_.apply(static_cast<float>(s_.lr(step)), replicas);
    if (s_.ema()) replica_.update_average(static_cast<float>(1.0 - s_.ema()->decay_at(step)));
  }

  void download_state() override { replica_.download_state(host_); }
  void upload_state() override { replica_.upload_state(host_); }
  void upload_params() override { replica_.upload_params(s_.params()); }

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

std::unique_ptr<GpuReplicaStep> make_gpu_replica_step(TrainingSession& s) {
  if (!cuda::gpu_available())
    throw std::runtime_error("--device=gpu: no CUDA device (" + cuda::gpu_unavailable_reason() + ")");
  const TrainConfig& cfg = s.cfg();
  cuda::DeviceReplicaConfig rc;
  rc.plan = s.plan();
  rc.optimizer.name = cfg.optimizer;
  rc.optimizer.momentum = static_cast<float>(cfg.momentum);
  rc.codec_seed = stream_seed(cfg.seed, 0, s.workers().at(0), Purpose::kCodec);
  rc.moving_average = s.ema() != nullptr && cfg.sync_replicas;  // async: the chief averages pulled values
  return std::make_unique<CudaReplicaStep>(s, std::move(rc));
}

}  // namespace terngrad::train::detail
