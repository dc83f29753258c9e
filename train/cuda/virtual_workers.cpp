#include "terngrad/train/cuda/virtual_workers.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <stdexcept>

#include "terngrad/train/cuda/context.h"
#include "terngrad/train/cuda/errors.h"

namespace terngrad::train::cuda {

namespace tqc = terngrad::quantize::cuda;

// One GPU's share of the run: its copy of the weights (with optimizer and
// average), the aggregation stream, every worker's local scales, and copies
// of the payloads (and fp32 gradients) of the workers on other GPUs.
struct VirtualWorkers::Device {
  int ordinal = 0;
  std::unique_ptr<GpuContext> agg;
  std::unique_ptr<DeviceTrainState> state;
  std::unique_ptr<tqc::Workspace> agg_ws;
  DeviceGrads sums;
  DeviceBuffer counts;
  DeviceBuffer scales;  // [variable][worker]: scales[v * N + w]
  // [worker][variable], filled only for workers on other GPUs.
  std::vector<std::vector<DeviceBuffer>> remote_payloads;
  std::vector<DeviceGrads> remote_grads;
  cudaEvent_t params_ready = nullptr;  // this GPU's weights are updated

  ~Device() {
    if (params_ready) cudaEventDestroy(params_ready);
  }
};

struct VirtualWorkers::Worker {
  int device = 0;  // index into devices_
  GpuContext ctx;
  GpuModel::Workspace ws;
  DeviceGrads grads;
  std::vector<DeviceBuffer> payloads;  // per variable (ternary only)
  std::unique_ptr<tqc::Workspace> codec_ws;
  DeviceTensor x;
  DeviceBuffer labels, loss;
  cudaEvent_t scaled = nullptr;   // its local scales are on every GPU
  cudaEvent_t encoded = nullptr;  // its payloads are on every GPU

  ~Worker() {
    if (scaled) cudaEventDestroy(scaled);
    if (encoded) cudaEventDestroy(encoded);
  }
};

namespace {

// Lets each GPU read the others' memory directly where the hardware allows;
// cudaMemcpyPeerAsync works either way (staged by the driver otherwise).
void enable_peer_access(const std::vector<int>& ordinals) {
  for (int a : ordinals)
    for (int b : ordinals) {
      int can = 0;
      if (a == b || cudaDeviceCanAccessPeer(&can, a, b) != cudaSuccess || !can) continue;
      DeviceGuard guard(a);
      const cudaError_t e = cudaDeviceEnablePeerAccess(b, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) (void)cudaGetLastError();  // clear the sticky-free error
      else TG_CUDA_CHECK(e);
    }
}

}  // namespace

VirtualWorkers::VirtualWorkers(const Model& cpu_model, VirtualWorkersConfig cfg)
    : model_(cpu_model), cfg_(std::move(cfg)), gpu_(cpu_model) {
  const ParamSet& ps = model_.params();
  const int N = cfg_.num_workers;
  if (N < 1) throw std::invalid_argument("GPU virtual workers: num_workers must be >= 1");
  if (cfg_.plan.size() != ps.size())
    throw std::invalid_argument("GPU virtual workers: codec plan has " + std::to_string(cfg_.plan.size()) +
                                " entries for " + std::to_string(ps.size()) + " variables");
  if (cfg_.codec_seeds.size() != static_cast<size_t>(N))
    throw std::invalid_argument("GPU virtual workers: one codec seed per worker is needed");
  if (!cfg_.dropout_seed) throw std::invalid_argument("GPU virtual workers: the dropout seed function is not set");
  if (cfg_.devices.empty()) {
    int current = 0;
    TG_CUDA_CHECK(cudaGetDevice(&current));
    cfg_.devices = {current};
  }
  const int D = static_cast<int>(cfg_.devices.size());
  if (D > N)
    throw std::invalid_argument("GPU virtual workers: " + std::to_string(D) + " devices for " + std::to_string(N) +
                                " workers (every device needs at least one worker)");
  const int count = gpu_count();
  for (int d : cfg_.devices)
    if (d < 0 || d >= count)
      throw std::invalid_argument("GPU virtual workers: device " + std::to_string(d) + " does not exist (" +
                                  std::to_string(count) + " CUDA devices)");
  enable_peer_access(cfg_.devices);

  uint64_t max_n = 1;
  for (size_t v = 0; v < ps.size(); ++v) {
    codecs_.push_back(VariableCodec::parse(cfg_.plan[v]));
    max_n = std::max<uint64_t>(max_n, ps.params[v].value.size());
  }
  for (int d = 0; d < D; ++d) {
    auto dev = std::make_unique<Device>();
    dev->ordinal = cfg_.devices[d];
    DeviceGuard guard(dev->ordinal);
    dev->agg = std::make_unique<GpuContext>();
    dev->state = std::make_unique<DeviceTrainState>(ps, cfg_.optimizer, cfg_.moving_average, dev->agg->stream());
    dev->sums = gpu_.make_grads();
    dev->counts.reserve(max_n * sizeof(int16_t));
    dev->agg_ws = std::make_unique<tqc::Workspace>(max_n);
    dev->scales.reserve(std::max<size_t>(ps.size(), 1) * N * sizeof(float));
    dev->remote_payloads.resize(N);
    dev->remote_grads.resize(N);
    TG_CUDA_CHECK(cudaEventCreateWithFlags(&dev->params_ready, cudaEventDisableTiming));
    TG_CUDA_CHECK(cudaEventRecord(dev->params_ready, dev->agg->stream()));
    devices_.push_back(std::move(dev));
  }
  for (int w = 0; w < N; ++w) {
    const int d = static_cast<int>(static_cast<int64_t>(w) * D / N);
    DeviceGuard guard(cfg_.devices[d]);
    auto wk = std::make_unique<Worker>();
    wk->device = d;
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
  if (cfg_.host_threads && N > 1) team_ = std::make_unique<ThreadTeam>(N);
  // Receive buffers on every GPU for the workers of the other GPUs.
  for (int e = 0; e < D; ++e) {
    Device& dev = *devices_[e];
    DeviceGuard guard(dev.ordinal);
    for (int w = 0; w < N; ++w) {
      if (workers_[w]->device == e) continue;
      dev.remote_grads[w].resize(ps.size());
      for (size_t v = 0; v < ps.size(); ++v) {
        dev.remote_payloads[w].emplace_back(gpu_payload_bytes(codecs_[v], ps.params[v].value.size()));
        if (!codecs_[v].ternary) dev.remote_grads[w][v].resize(ps.params[v].value.shape);  // fp32 travels as is
      }
    }
  }
  for (auto& dev : devices_) {
    DeviceGuard guard(dev->ordinal);
    dev->agg->synchronize();
  }
  // Last: nothing after it throws (the destructor frees it).
  TG_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&host_losses_), static_cast<size_t>(N) * sizeof(float)));
}

// Streams and library handles are released with their own device current.
VirtualWorkers::~VirtualWorkers() {
  try {
    if (evaluator_) {
      DeviceGuard guard(devices_.front()->ordinal);
      evaluator_.reset();
    }
    for (auto& wk : workers_) {
      DeviceGuard guard(devices_[wk->device]->ordinal);
      wk.reset();
    }
    for (auto& dev : devices_) {
      DeviceGuard guard(dev->ordinal);
      dev.reset();
    }
  } catch (...) {  // a device that cannot be made current: the rest is freed as it can be
  }
  if (host_losses_) cudaFreeHost(host_losses_);  // after the streams that copied into it
}

void VirtualWorkers::check_batches(const std::vector<Tensor>& batches,
                                   const std::vector<std::vector<int32_t>>& labels) const {
  const int N = cfg_.num_workers;
  if (batches.size() != static_cast<size_t>(N) || labels.size() != static_cast<size_t>(N))
    throw std::invalid_argument("GPU step: one batch and one label vector per worker are needed");
  for (int w = 0; w < N; ++w) {
    if (static_cast<int64_t>(labels[w].size()) != batches[w].dim(0))
      throw std::invalid_argument("GPU step: worker " + std::to_string(w) + " has " + std::to_string(labels[w].size()) +
                                  " labels for a batch of " + std::to_string(batches[w].dim(0)));
    gpu_.check_labels(labels[w], "GPU step: worker " + std::to_string(w));
  }
}

// On the worker's stream, after its last step (which read x and labels).
void VirtualWorkers::upload_batch(int w, const Tensor& batch, const std::vector<int32_t>& labels) {
  Worker& wk = *workers_[w];
  cudaStream_t s = wk.ctx.stream();
  wk.x.upload(batch, s);
  wk.labels.reserve(labels.size() * sizeof(int32_t));
  TG_CUDA_CHECK(
      cudaMemcpyAsync(wk.labels.data(), labels.data(), labels.size() * sizeof(int32_t), cudaMemcpyHostToDevice, s));
}

void VirtualWorkers::stage(const std::vector<Tensor>& batches, const std::vector<std::vector<int32_t>>& labels) {
  check_batches(batches, labels);
  require_usable("stage");
  staged_ = false;  // until every worker's copy is enqueued
  for (int w = 0; w < cfg_.num_workers; ++w) {
    DeviceGuard guard(devices_[workers_[w]->device]->ordinal);
    upload_batch(w, batches[w], labels[w]);
  }
  staged_ = true;
}

float VirtualWorkers::step(int64_t step, const std::vector<Tensor>& batches,
                           const std::vector<std::vector<int32_t>>& labels, float lr) {
  check_batches(batches, labels);
  require_usable("step");
  staged_ = false;
  // Each worker's upload is enqueued right before its forward pass, so the
  // (pageable, host-blocking) copy of worker w + 1's batch overlaps worker
  // w's kernels.
  return run_step(step, lr, &batches, &labels);
}

float VirtualWorkers::step_staged(int64_t step, float lr) {
  require_usable("step");
  if (!staged_) throw std::logic_error("GPU virtual workers: step_staged() without a batch staged by stage()");
  return run_step(step, lr, nullptr, nullptr);
}

float VirtualWorkers::run_step(int64_t step, float lr, const std::vector<Tensor>* batches,
                               const std::vector<std::vector<int32_t>>* labels) {
  const int N = cfg_.num_workers;
  // Until this step completes: a codec error (NaN gradients, ...) is found
  // only after the update was enqueued, so a step that throws leaves weights
  // that must not be used again (the CPU trainer throws before its update).
  failed_ = true;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    enqueue_step(step, lr, batches, labels);
  } catch (...) {
    (void)settle_all();  // no stream left running, no stale error record
    throw;
  }
  last_enqueue_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (batches) staged_ = true;  // the step's batches stay on the devices
  if (std::exception_ptr error = settle_all()) std::rethrow_exception(error);
  failed_ = false;
  warmed_up_ = true;
  double loss = 0;
  for (int w = 0; w < N; ++w) loss += host_losses_[w];
  return static_cast<float>(loss / N);
}

void VirtualWorkers::enqueue_step(int64_t step, float lr, const std::vector<Tensor>* batches,
                                  const std::vector<std::vector<int32_t>>* labels) {
  const int N = cfg_.num_workers;
  const int D = static_cast<int>(devices_.size());
  const ParamSet& ps = model_.params();
  const size_t V = ps.size();

  // 1 + 2. Gradients and local scales; the scales stay on the devices:
  // scales[v * N + w] on every GPU. Each worker's work is enqueued on its
  // own stream (and, with host threads, from its own thread), so workers
  // overlap on the devices.
  auto gradients_and_scales = [&](int w) {
    Worker& wk = *workers_[w];
    Device& home = *devices_[wk.device];
    DeviceGuard guard(home.ordinal);
    cudaStream_t s = wk.ctx.stream();
    TG_CUDA_CHECK(cudaStreamWaitEvent(s, home.params_ready, 0));  // last step's update
    if (batches) upload_batch(w, (*batches)[w], (*labels)[w]);
    const DeviceParams& params = home.state->params();
    gpu_.forward_backward(wk.ctx, wk.ws, params, wk.x, wk.labels.as<int32_t>(), wk.grads, wk.loss.as<float>(),
                          ForwardContext{true, cfg_.dropout_seed(step, w)});
    float* scales = home.scales.as<float>();
    for (size_t v = 0; v < V; ++v) {
      const uint64_t n = ps.params[v].value.size();
      add_weight_decay_async(wk.grads[v].ptr(), params[v].ptr(), n, ps.params[v].weight_decay, s);
      local_scale_variable_async(codecs_[v], wk.grads[v].ptr(), n, scales + v * N + w, *wk.codec_ws, s);
      if (!codecs_[v].ternary || !codecs_[v].share_scale) continue;
      for (int e = 0; e < D; ++e)
        if (e != wk.device)
          TG_CUDA_CHECK(cudaMemcpyPeerAsync(devices_[e]->scales.as<float>() + v * N + w, devices_[e]->ordinal,
                                            scales + v * N + w, home.ordinal, sizeof(float), s));
    }
    TG_CUDA_CHECK(cudaEventRecord(wk.scaled, s));
  };

  // 3. Encode on each worker's stream once every worker's scales are in:
  // scale sharing's max is taken on the device (what an all-reduce(max)
  // gives); then the payloads go to the other GPUs (the all-gather). Only
  // after every worker's `scaled` is recorded: a wait on an event not yet
  // recorded would not wait.
  auto encode = [&](int w) {
    Worker& wk = *workers_[w];
    Device& home = *devices_[wk.device];
    DeviceGuard guard(home.ordinal);
    cudaStream_t s = wk.ctx.stream();
    for (int other = 0; other < N; ++other)
      if (other != w) TG_CUDA_CHECK(cudaStreamWaitEvent(s, workers_[other]->scaled, 0));
    for (size_t v = 0; v < V; ++v) {
      const uint64_t n = ps.params[v].value.size();
      encode_variable_async(codecs_[v], wk.grads[v].ptr(), n, cfg_.codec_seeds[w], static_cast<uint32_t>(step),
                            static_cast<uint32_t>(v), home.scales.as<float>() + v * N, static_cast<uint32_t>(N),
                            wk.payloads[v].as<uint8_t>(), *wk.codec_ws, s);
      for (int e = 0; e < D; ++e) {
        if (e == wk.device || n == 0) continue;
        Device& dst = *devices_[e];
        if (codecs_[v].ternary)
          TG_CUDA_CHECK(cudaMemcpyPeerAsync(dst.remote_payloads[w][v].data(), dst.ordinal, wk.payloads[v].data(),
                                            home.ordinal, gpu_payload_bytes(codecs_[v], n), s));
        else
          TG_CUDA_CHECK(cudaMemcpyPeerAsync(dst.remote_grads[w][v].ptr(), dst.ordinal, wk.grads[v].ptr(),
                                            home.ordinal, n * sizeof(float), s));
      }
    }
    TG_CUDA_CHECK(cudaEventRecord(wk.encoded, s));
  };

  // The first step is issued from this thread alone: it chooses the cuDNN
  // algorithms (TG_CUDNN_ALGO=find times them on an idle device) and makes
  // the workspaces' first allocations.
  if (team_ && warmed_up_) {
    team_->run(gradients_and_scales);
    team_->run(encode);
  } else {
    for (int w = 0; w < N; ++w) gradients_and_scales(w);
    for (int w = 0; w < N; ++w) encode(w);
  }

  // 4. On every GPU: aggregate all N workers in order, average, update.
  std::vector<const uint8_t*> payloads(N);
  std::vector<const float*> grads(N);
  for (int e = 0; e < D; ++e) {
    Device& dev = *devices_[e];
    DeviceGuard guard(dev.ordinal);
    cudaStream_t s = dev.agg->stream();
    for (int w = 0; w < N; ++w) TG_CUDA_CHECK(cudaStreamWaitEvent(s, workers_[w]->encoded, 0));
    for (size_t v = 0; v < V; ++v) {
      const uint64_t n = ps.params[v].value.size();
      for (int w = 0; w < N; ++w) {
        const bool local = workers_[w]->device == e;
        payloads[w] = local ? workers_[w]->payloads[v].as<uint8_t>() : dev.remote_payloads[w][v].as<uint8_t>();
        grads[w] = local ? workers_[w]->grads[v].ptr() : dev.remote_grads[w][v].ptr();
      }
      aggregate_variable_async(codecs_[v], payloads, grads, n, codecs_[v].share_scale, dev.sums[v].ptr(),
                               dev.counts.as<int16_t>(), *dev.agg_ws, s);
      scale_async(dev.sums[v].ptr(), n, 1.0f / static_cast<float>(N), s);
    }
    dev.state->apply(dev.sums, lr, s);
    TG_CUDA_CHECK(cudaEventRecord(dev.params_ready, s));
  }

  // The losses come down once the workers' streams get there (settle_all
  // waits), into pinned memory: a copy to pageable memory would hold this
  // thread until worker 0's stream had finished the step.
  for (int w = 0; w < N; ++w) {
    Worker& wk = *workers_[w];
    DeviceGuard guard(devices_[wk.device]->ordinal);
    TG_CUDA_CHECK(cudaMemcpyAsync(host_losses_ + w, wk.loss.data(), sizeof(float), cudaMemcpyDeviceToHost, wk.ctx.stream()));
  }
}

// Codec errors (NaN gradients, ...) surface here with the codec's message:
// every workspace is checked (which waits for its stream and clears its
// record) before one error is returned: the cause (a non-finite gradient)
// rather than its echo in other workers (a NaN shared scale refused by their
// encodes). Waiting for the aggregation streams also ends the step: the next
// step's peer copies must not land in buffers still being summed.
std::exception_ptr VirtualWorkers::settle_all() {
  std::exception_ptr first_error;
  bool cause_found = false;
  auto settle = [&](int ordinal, tqc::Workspace& ws, cudaStream_t s) {
    try {
      DeviceGuard guard(ordinal);
      ws.check(s);
    } catch (const quantize::CodecError& e) {
      const bool cause = e.code() == quantize::Errc::kNonFinite;
      if (!first_error || (cause && !cause_found)) first_error = std::current_exception();
      cause_found |= cause;
    } catch (...) {
      if (!first_error) first_error = std::current_exception();
    }
  };
  for (auto& wk : workers_) settle(devices_[wk->device]->ordinal, *wk->codec_ws, wk->ctx.stream());
  for (auto& dev : devices_) settle(dev->ordinal, *dev->agg_ws, dev->agg->stream());
  return first_error;
}

void VirtualWorkers::require_usable(const char* what) const {
  if (failed_)
    throw std::logic_error(std::string("GPU virtual workers: ") + what +
                           " after a failed step (its update may have been applied in part); restore a checkpoint "
                           "with upload_state() first");
}

void VirtualWorkers::update_average(float one_minus_decay) {
  require_usable("update_average");
  if (!cfg_.moving_average)
    throw std::logic_error("GPU virtual workers: update_average without config.moving_average");
  failed_ = true;  // until every GPU's average is updated
  for (auto& dev : devices_) {
    DeviceGuard guard(dev->ordinal);
    dev->state->update_average(one_minus_decay, dev->agg->stream());
  }
  failed_ = false;
}

const DeviceParams& VirtualWorkers::params() const { return devices_.front()->state->params(); }

void VirtualWorkers::download_params(ParamSet& params) {
  require_usable("download_params");
  Device& first = *devices_.front();
  DeviceGuard guard(first.ordinal);
  first.state->download_params(params, first.agg->stream());
}

void VirtualWorkers::download_state(const HostTrainState& host) {
  require_usable("download_state");
  Device& first = *devices_.front();
  DeviceGuard guard(first.ordinal);
  first.state->download(host, first.agg->stream());
}

void VirtualWorkers::upload_state(const HostTrainState& host) {
  failed_ = true;              // until every GPU holds the host state
  (void)settle_all();          // after a failed step: streams idle, error records cleared
  for (auto& dev : devices_) {
    DeviceGuard guard(dev->ordinal);
    dev->state->upload(host, dev->agg->stream());
    TG_CUDA_CHECK(cudaEventRecord(dev->params_ready, dev->agg->stream()));
  }
  failed_ = false;  // a complete state again
}

void VirtualWorkers::fold_state(StateSet& state) {
  require_usable("fold_state");
  if (state.empty()) return;
  Worker& w0 = *workers_.front();
  DeviceGuard guard(devices_[w0.device]->ordinal);
  gpu_.fold_state(w0.ctx, w0.ws, state);
}

void VirtualWorkers::predict(const Tensor& x, bool average, Tensor& logits) {
  require_usable("predict");
  if (average && !cfg_.moving_average)
    throw std::logic_error("GPU virtual workers: predict with the average without config.moving_average");
  Device& first = *devices_.front();
  DeviceGuard guard(first.ordinal);
  if (!evaluator_) {
    evaluator_ = std::make_unique<Worker>();
    evaluator_->ws = gpu_.make_workspace();
  }
  Worker& ev = *evaluator_;
  first.agg->synchronize();  // the last update and average are in
  ev.x.upload(x, ev.ctx.stream());
  const DeviceParams& weights = average ? first.state->average() : first.state->params();
  gpu_.predict(ev.ctx, ev.ws, weights, ev.x).download(logits, ev.ctx.stream());
  ev.ctx.synchronize();
}

std::vector<uint8_t> VirtualWorkers::payload_to_host(int w, size_t v) {
  const size_t bytes = gpu_payload_bytes(codecs_.at(v), model_.params().params.at(v).value.size());
  std::vector<uint8_t> out(bytes);
  Worker& wk = *workers_.at(w);
  DeviceGuard guard(devices_[wk.device]->ordinal);
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
