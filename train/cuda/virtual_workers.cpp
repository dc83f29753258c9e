#include "terngrad/train/cuda/virtual_workers.h"

#include <algorithm>
#include <stdexcept>

#include "terngrad/train/cuda/errors.h"

namespace terngrad::train::cuda {

namespace tqc = terngrad::quantize::cuda;

struct VirtualWorkers::Worker {
  GpuContext ctx;
  GpuModel::Workspace ws;
  DeviceGrads grads;
  std::vector<DeviceBuffer> payloads;  // per variable (ternary only)
  std::unique_ptr<tqc::Workspace> codec_ws;
  DeviceTensor x;
  DeviceBuffer labels, loss;
  cudaEvent_t scaled = nullptr;   // its local scales are in worker_scales_
  cudaEvent_t encoded = nullptr;  // its payloads are ready
};

VirtualWorkers::VirtualWorkers(const Model& cpu_model, VirtualWorkersConfig cfg)
    : model_(cpu_model), cfg_(std::move(cfg)), gpu_(cpu_model) {
  const ParamSet& ps = model_.params();
  if (cfg_.num_workers < 1) throw std::invalid_argument("GPU virtual workers: num_workers must be >= 1");
  if (cfg_.plan.size() != ps.size())
    throw std::invalid_argument("GPU virtual workers: codec plan has " + std::to_string(cfg_.plan.size()) +
                                " entries for " + std::to_string(ps.size()) + " variables");
  if (cfg_.codec_seeds.size() != static_cast<size_t>(cfg_.num_workers))
    throw std::invalid_argument("GPU virtual workers: one codec seed per worker is needed");
  if (!cfg_.dropout_seed) throw std::invalid_argument("GPU virtual workers: the dropout seed function is not set");
  uint64_t max_n = 1;
  for (size_t v = 0; v < ps.size(); ++v) {
    codecs_.push_back(VariableCodec::parse(cfg_.plan[v]));
    max_n = std::max<uint64_t>(max_n, ps.params[v].value.size());
  }
  agg_ = std::make_unique<GpuContext>();
  state_ = std::make_unique<DeviceTrainState>(ps, cfg_.optimizer, cfg_.moving_average, agg_->stream());
  sums_ = gpu_.make_grads();
  counts_.reserve(max_n * sizeof(int16_t));
  agg_ws_ = std::make_unique<tqc::Workspace>(max_n);
  worker_scales_.reserve(ps.size() * cfg_.num_workers * sizeof(float));
  TG_CUDA_CHECK(cudaEventCreateWithFlags(&params_ready_, cudaEventDisableTiming));
  TG_CUDA_CHECK(cudaEventRecord(params_ready_, agg_->stream()));
  for (int w = 0; w < cfg_.num_workers; ++w) {
    auto wk = std::make_unique<Worker>();
    wk->ws = gpu_.make_workspace();
    wk->grads = gpu_.make_grads();
    for (size_t v = 0; v < ps.size(); ++v)
      wk->payloads.emplace_back(gpu_payload_bytes(codecs_[v], ps.params[v].value.size()));
    wk->codec_ws = std::make_unique<tqc::Workspace>(max_n);
    wk->loss.reserve(sizeof(float));
    TG_CUDA_CHECK(cudaEventCreateWithFlags(&wk->scaled, cudaEventDisableTiming));
    TG_CUDA_CHECK(cudaEventCreateWithFlags(&wk->encoded, cudaEventDisableTiming));
    workers_.push_back(std::move(wk));
  }
}

VirtualWorkers::~VirtualWorkers() {
  for (auto& w : workers_) {
    if (w->scaled) cudaEventDestroy(w->scaled);
    if (w->encoded) cudaEventDestroy(w->encoded);
  }
  if (params_ready_) cudaEventDestroy(params_ready_);
}

float VirtualWorkers::step(int64_t step, const std::vector<Tensor>& batches,
                           const std::vector<std::vector<int32_t>>& labels, float lr) {
  const int N = cfg_.num_workers;
  const ParamSet& ps = model_.params();
  const size_t V = ps.size();
  if (batches.size() != static_cast<size_t>(N) || labels.size() != static_cast<size_t>(N))
    throw std::invalid_argument("GPU step: one batch and one label vector per worker are needed");

  // 1 + 2. Gradients and local scales. Workers are issued in turn; their
  // kernels overlap on the device through the separate streams. The scales
  // stay on the device: worker_scales_[v * N + w].
  float* scales = worker_scales_.as<float>();
  for (int w = 0; w < N; ++w) {
    Worker& wk = *workers_[w];
    cudaStream_t s = wk.ctx.stream();
    TG_CUDA_CHECK(cudaStreamWaitEvent(s, params_ready_, 0));  // last step's update
    wk.x.upload(batches[w], s);
    if (static_cast<int64_t>(labels[w].size()) != batches[w].dim(0))
      throw std::invalid_argument("GPU step: worker " + std::to_string(w) + " has " + std::to_string(labels[w].size()) +
                                  " labels for a batch of " + std::to_string(batches[w].dim(0)));
    wk.labels.reserve(labels[w].size() * sizeof(int32_t));
    TG_CUDA_CHECK(cudaMemcpyAsync(wk.labels.data(), labels[w].data(), labels[w].size() * sizeof(int32_t),
                                  cudaMemcpyHostToDevice, s));
    const DeviceParams& params = state_->params();
    gpu_.forward_backward(wk.ctx, wk.ws, params, wk.x, wk.labels.as<int32_t>(), wk.grads, wk.loss.as<float>(),
                          ForwardContext{true, cfg_.dropout_seed(step, w)});
    for (size_t v = 0; v < V; ++v) {
      const uint64_t n = ps.params[v].value.size();
      add_weight_decay_async(wk.grads[v].ptr(), params[v].ptr(), n, ps.params[v].weight_decay, s);
      local_scale_variable_async(codecs_[v], wk.grads[v].ptr(), n, scales + v * N + w, *wk.codec_ws, s);
    }
    TG_CUDA_CHECK(cudaEventRecord(wk.scaled, s));
  }

  // 3. Encode on each worker's stream once every worker's scales are in:
  // scale sharing's max is taken on the device (what an all-reduce(max) gives).
  for (int w = 0; w < N; ++w) {
    Worker& wk = *workers_[w];
    for (int other = 0; other < N; ++other)
      if (other != w) TG_CUDA_CHECK(cudaStreamWaitEvent(wk.ctx.stream(), workers_[other]->scaled, 0));
    for (size_t v = 0; v < V; ++v)
      encode_variable_async(codecs_[v], wk.grads[v].ptr(), ps.params[v].value.size(), cfg_.codec_seeds[w],
                            static_cast<uint32_t>(step), static_cast<uint32_t>(v), scales + v * N,
                            static_cast<uint32_t>(N), wk.payloads[v].as<uint8_t>(), *wk.codec_ws, wk.ctx.stream());
    TG_CUDA_CHECK(cudaEventRecord(wk.encoded, wk.ctx.stream()));
    TG_CUDA_CHECK(cudaStreamWaitEvent(agg_->stream(), wk.encoded, 0));
  }

  // 4. Aggregate, average, update on the aggregation stream.
  std::vector<const uint8_t*> payloads(N);
  std::vector<const float*> grads(N);
  for (size_t v = 0; v < V; ++v) {
    const uint64_t n = ps.params[v].value.size();
    for (int w = 0; w < N; ++w) {
      payloads[w] = workers_[w]->payloads[v].as<uint8_t>();
      grads[w] = workers_[w]->grads[v].ptr();
    }
    aggregate_variable_async(codecs_[v], payloads, grads, n, codecs_[v].share_scale, sums_[v].ptr(),
                             counts_.as<int16_t>(), *agg_ws_, agg_->stream());
    scale_async(sums_[v].ptr(), n, 1.0f / static_cast<float>(N), agg_->stream());
  }
  state_->apply(sums_, lr, agg_->stream());
  TG_CUDA_CHECK(cudaEventRecord(params_ready_, agg_->stream()));

  // Codec errors (NaN gradients, ...) surface here with the codec's message.
  double loss = 0;
  for (int w = 0; w < N; ++w) {
    Worker& wk = *workers_[w];
    wk.codec_ws->check(wk.ctx.stream());
    float l = 0;
    TG_CUDA_CHECK(cudaMemcpyAsync(&l, wk.loss.data(), sizeof(float), cudaMemcpyDeviceToHost, wk.ctx.stream()));
    wk.ctx.synchronize();
    loss += l;
  }
  agg_ws_->check(agg_->stream());
  return static_cast<float>(loss / N);
}

void VirtualWorkers::update_average(float one_minus_decay) {
  if (!state_->has_average())
    throw std::logic_error("GPU virtual workers: update_average without config.moving_average");
  state_->update_average(one_minus_decay, agg_->stream());
}

void VirtualWorkers::download_params(ParamSet& params) { state_->download_params(params, agg_->stream()); }

void VirtualWorkers::download_state(const HostTrainState& host) { state_->download(host, agg_->stream()); }

void VirtualWorkers::upload_state(const HostTrainState& host) {
  state_->upload(host, agg_->stream());
  TG_CUDA_CHECK(cudaEventRecord(params_ready_, agg_->stream()));
}

std::vector<uint8_t> VirtualWorkers::payload_to_host(int w, size_t v) {
  const size_t bytes = gpu_payload_bytes(codecs_.at(v), model_.params().params.at(v).value.size());
  std::vector<uint8_t> out(bytes);
  Worker& wk = *workers_.at(w);
  wk.ctx.synchronize();
  if (bytes > 0) TG_CUDA_CHECK(cudaMemcpy(out.data(), wk.payloads[v].data(), bytes, cudaMemcpyDeviceToHost));
  return out;
}

double VirtualWorkers::bytes_per_worker_step() const {
  double b = 0;
  const ParamSet& ps = model_.params();
  for (size_t v = 0; v < ps.size(); ++v) {
    const uint64_t n = ps.params[v].value.size();
    b += codecs_[v].ternary ? static_cast<double>(gpu_payload_bytes(codecs_[v], n)) : 4.0 * n;
  }
  return b;
}

}  // namespace terngrad::train::cuda
