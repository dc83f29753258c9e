#include "terngrad/train/cuda/device_replica.h"

#include <algorithm>
#include <stdexcept>

#include "terngrad/quantize/format.h"
#include "terngrad/quantize/ternary_sum.h"
#include "terngrad/train/cuda/errors.h"

namespace terngrad::train::cuda {

namespace tqc = terngrad::quantize::cuda;

DeviceReplica::DeviceReplica(const Model& cpu_model, DeviceReplicaConfig cfg)
    : model_(cpu_model), cfg_(std::move(cfg)), gpu_(cpu_model) {
  const ParamSet& ps = model_.params();
  if (cfg_.plan.size() != ps.size())
    throw std::invalid_argument("GPU replica: codec plan has " + std::to_string(cfg_.plan.size()) + " entries for " +
                                std::to_string(ps.size()) + " variables");
  uint64_t max_n = 1;
  for (size_t v = 0; v < ps.size(); ++v) {
    codecs_.push_back(VariableCodec::parse(cfg_.plan[v]));
    max_n = std::max<uint64_t>(max_n, ps.params[v].value.size());
  }
  ws_ = gpu_.make_workspace();
  state_ = std::make_unique<DeviceTrainState>(ps, cfg_.optimizer, cfg_.moving_average, ctx_.stream());
  grads_ = gpu_.make_grads();
  sums_ = gpu_.make_grads();
  loss_.reserve(sizeof(float));
  // The payload buffer holds the largest whole variable's encoding (a shard
  // is never larger); staging starts at a 2-replica sum and grows.
  payload_.reserve(quantize::max_encoded_bytes(max_n));
  staging_.reserve(quantize::sum_payload_bytes(max_n, 2));
  codec_ws_ = std::make_unique<tqc::Workspace>(max_n);
  scales_.assign(ps.size(), 0.0f);
  device_scales_.reserve(std::max<size_t>(ps.size(), 1) * sizeof(float));
  ctx_.synchronize();
}

float DeviceReplica::compute_gradient(const Tensor& x, const std::vector<int32_t>& labels, uint64_t dropout_seed) {
  const ParamSet& ps = model_.params();
  cudaStream_t s = ctx_.stream();
  if (static_cast<int64_t>(labels.size()) != x.dim(0))
    throw std::invalid_argument("GPU replica: " + std::to_string(labels.size()) + " labels for a batch of " +
                                std::to_string(x.dim(0)));
  gpu_.check_labels(labels, "GPU replica");
  x_.upload(x, s);
  labels_.reserve(labels.size() * sizeof(int32_t));
  TG_CUDA_CHECK(cudaMemcpyAsync(labels_.data(), labels.data(), labels.size() * sizeof(int32_t),
                                cudaMemcpyHostToDevice, s));
  gpu_.forward_backward(ctx_, ws_, state_->params(), x_, labels_.as<int32_t>(), grads_, loss_.as<float>(),
                        ForwardContext{true, dropout_seed});
  // Local scales into device memory (0 where the codec shares none), then
  // the V scales and the loss come down in one synchronization.
  float* d_scales = device_scales_.as<float>();
  TG_CUDA_CHECK(cudaMemsetAsync(d_scales, 0, ps.size() * sizeof(float), s));
  for (size_t v = 0; v < ps.size(); ++v) {
    const uint64_t n = ps.params[v].value.size();
    add_weight_decay_async(grads_[v].ptr(), state_->params()[v].ptr(), n, ps.params[v].weight_decay, s);
    local_scale_variable_async(codecs_[v], grads_[v].ptr(), n, d_scales + v, *codec_ws_, s);
  }
  float loss = 0;
  if (!ps.params.empty())
    TG_CUDA_CHECK(cudaMemcpyAsync(scales_.data(), d_scales, ps.size() * sizeof(float), cudaMemcpyDeviceToHost, s));
  TG_CUDA_CHECK(cudaMemcpyAsync(&loss, loss_.data(), sizeof loss, cudaMemcpyDeviceToHost, s));
  codec_ws_->check(s);  // waits; NaN/Inf gradients surface here with the codec's message
  return loss;
}

void DeviceReplica::encode_slice(size_t v, int64_t step, float shared_scale, uint64_t begin, uint64_t count,
                                 std::span<uint8_t> out) {
  const VariableCodec& c = codecs_.at(v);
  const uint64_t n = model_.params().params[v].value.size();
  if (!c.ternary) throw std::invalid_argument("GPU replica: encode_slice of an fp32 variable");
  const size_t bytes = quantize::max_encoded_bytes(count);
  if (begin + count > n || out.size() < bytes)
    throw std::invalid_argument("GPU replica: slice [" + std::to_string(begin) + ", +" + std::to_string(count) +
                                ") of a " + std::to_string(n) + "-element variable into " +
                                std::to_string(out.size()) + " bytes (needs " + std::to_string(bytes) + ")");
  quantize::EncodeParams p;
  p.clip_factor = c.clip;
  p.seed = cfg_.codec_seed;
  p.step = static_cast<uint32_t>(step);
  p.tensor_id = static_cast<uint32_t>(v);
  p.element_offset = begin;
  p.rounding = c.rounding;
  // As the CPU codec: the shared scale (already max(shared, own)) only for
  // codecs that share one.
  if (c.share_scale) p.shared_scale = shared_scale;
  cudaStream_t s = ctx_.stream();
  tqc::encode_slice_async(grads_[v].ptr(), n, count, p, payload_.as<uint8_t>(), bytes, *codec_ws_, s);
  codec_ws_->check(s);  // NaN gradients etc. with the codec's message, before anything is pushed
  // The only device-to-host traffic of the push: the packed payload.
  TG_CUDA_CHECK(cudaMemcpyAsync(out.data(), payload_.data(), bytes, cudaMemcpyDeviceToHost, s));
  ctx_.synchronize();
}

void DeviceReplica::download_gradient(size_t v, std::span<float> out) {
  const uint64_t n = model_.params().params.at(v).value.size();
  if (out.size() != n)
    throw std::invalid_argument("GPU replica: gradient of " + std::to_string(n) + " elements into " +
                                std::to_string(out.size()));
  TG_CUDA_CHECK(cudaMemcpyAsync(out.data(), grads_[v].ptr(), n * sizeof(float), cudaMemcpyDeviceToHost,
                                ctx_.stream()));
  ctx_.synchronize();
}

bool DeviceReplica::upload_packed_sum(size_t v, uint64_t begin, uint64_t count, std::span<const uint8_t> aggregate) {
  const uint64_t n = model_.params().params.at(v).value.size();
  if (begin + count > n)
    throw std::invalid_argument("GPU replica: sum slice [" + std::to_string(begin) + ", +" + std::to_string(count) +
                                ") outside a " + std::to_string(n) + "-element variable");
  const bool sum = quantize::is_sum_payload(aggregate);
  const bool single = !sum && aggregate.size() >= 4 && quantize::load_le32(aggregate.data()) == quantize::kMagicLe32;
  if (!codecs_[v].ternary || (!sum && !single)) return false;
  quantize::SumHeader h;
  if (sum) {
    h = quantize::read_sum_header(aggregate);  // header and length; the fields are checked on the device
    if (h.count != count)
      throw quantize::CodecError(quantize::Errc::kInvalidArgument,
                                 "pulled sum holds " + std::to_string(h.count) + " elements, the shard has " +
                                     std::to_string(count));
  }
  // Sums of many replicas take up to 16 bits per element: grow on demand
  // (each use is waited for below, so nothing in it is still needed).
  staging_.reserve(aggregate.size());
  cudaStream_t s = ctx_.stream();
  // The host-to-device traffic of the pull: the packed bytes as they came.
  TG_CUDA_CHECK(cudaMemcpyAsync(staging_.data(), aggregate.data(), aggregate.size(), cudaMemcpyHostToDevice, s));
  float* out = sums_[v].ptr() + begin;
  if (sum)
    sum_decoder_.decode_async(staging_.as<uint8_t>(), h, out, s);
  else
    tqc::decode_async(staging_.as<uint8_t>(), aggregate.size(), out, count, *codec_ws_, s);
  // The staging buffer is reused by the next shard: the copy from pageable
  // memory returns once the bytes are staged, but the decode must be done
  // before they are overwritten, and errors must name this shard.
  sum_decoder_.check(s);
  codec_ws_->check(s);
  return true;
}

void DeviceReplica::upload_sum_floats(size_t v, uint64_t begin, std::span<const float> sum) {
  const uint64_t n = model_.params().params.at(v).value.size();
  if (begin + sum.size() > n)
    throw std::invalid_argument("GPU replica: sum slice outside a " + std::to_string(n) + "-element variable");
  TG_CUDA_CHECK(cudaMemcpyAsync(sums_[v].ptr() + begin, sum.data(), sum.size() * sizeof(float),
                                cudaMemcpyHostToDevice, ctx_.stream()));
  ctx_.synchronize();  // `sum` is the caller's, possibly reused at once
}

void DeviceReplica::apply(float lr, int replicas) {
  const ParamSet& ps = model_.params();
  cudaStream_t s = ctx_.stream();
  for (size_t v = 0; v < ps.size(); ++v)
    scale_async(sums_[v].ptr(), ps.params[v].value.size(), 1.0f / static_cast<float>(replicas), s);
  state_->apply(sums_, lr, s);
  codec_ws_->check(s);
}

void DeviceReplica::update_average(float one_minus_decay) {
  if (!state_->has_average()) throw std::logic_error("GPU replica: update_average without config.moving_average");
  state_->update_average(one_minus_decay, ctx_.stream());
}

void DeviceReplica::download_params(ParamSet& params) { state_->download_params(params, ctx_.stream()); }

void DeviceReplica::upload_params(const ParamSet& params) { state_->upload_params(params, ctx_.stream()); }

void DeviceReplica::download_state(const HostTrainState& host) { state_->download(host, ctx_.stream()); }

void DeviceReplica::upload_state(const HostTrainState& host) { state_->upload(host, ctx_.stream()); }

}  // namespace terngrad::train::cuda
