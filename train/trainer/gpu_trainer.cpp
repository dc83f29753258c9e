// --device=gpu: the in-process run of trainer.cpp with the step on the GPU
// (terngrad/train/cuda/virtual_workers.h). Data, schedule, codec plan,
// seeds, the evaluation batches, the moving average's rule and the
// checkpoints come from the same TrainingSession as the CPU run, so the two
// differ only where the arithmetic runs (evaluation too runs on the GPU).
// Checkpoints are the CPU trainer's (the device state is copied into the
// session's optimizer and average before saving and back after restoring):
// a run can move between --device=cpu and --device=gpu.
//
// Not on the GPU (refused with a message): rmsprop and the fp16 codec.
// All five nets run, Dropout and batch norm included: each worker gets the CPU
// run's dropout seed for the step, so both drop the same units.
#include <chrono>
#include <numeric>
#include <stdexcept>

#include "auto_codec.h"
#include "in_process_run.h"
#include "session.h"
#include "terngrad/train/cuda/context.h"
#include "terngrad/train/cuda/virtual_workers.h"
#include "terngrad/train/metrics.h"

namespace terngrad::train::detail {


TrainResult run_training_gpu(const TrainConfig& cfg) {
  using Clock = std::chrono::steady_clock;
  if (!cuda::gpu_available())
    throw std::runtime_error("--device=gpu: no CUDA device (" + cuda::gpu_unavailable_reason() + ")");
  const auto t_start = Clock::now();
  const int N = cfg.num_nodes;
  std::vector<int> all(N);
  std::iota(all.begin(), all.end(), 0);
  TrainingSession s(cfg, N, all);
  if (!cfg.auto_link_changes.empty())
    throw std::invalid_argument("--auto_link_changes: the in-process GPU trainer keeps its --codec=auto choice (a "
                                "cluster of GPU replicas chooses again)");
  const std::string codec_choice = apply_auto_codec_in_process(cfg, s, N);  // --codec=auto
  const int64_t start_step = s.restore();  // into the session's host objects

  cuda::VirtualWorkersConfig wc;
  wc.num_workers = N;
  wc.plan = s.plan();
  wc.optimizer.name = cfg.optimizer;
  wc.optimizer.momentum = static_cast<float>(cfg.momentum);
  wc.moving_average = s.ema() != nullptr;
  for (int w = 0; w < N; ++w) wc.codec_seeds.push_back(stream_seed(cfg.seed, 0, w, Purpose::kCodec));
  wc.dropout_seed = [seed = cfg.seed](int64_t step, int w) { return stream_seed(seed, step, w, Purpose::kDropout); };
  const int available = cuda::gpu_count();
  if (cfg.num_gpus > available)
    throw std::invalid_argument("--num_gpus=" + std::to_string(cfg.num_gpus) + " but " + std::to_string(available) +
                                " CUDA device" + (available == 1 ? " is" : "s are") + " visible");
  for (int d = 0; d < cfg.num_gpus; ++d) wc.devices.push_back(d);
  cuda::VirtualWorkers workers(s.model(), wc);
  const cuda::HostTrainState host{&s.params(), &s.optimizer(), s.ema()};
  if (start_step > 0) workers.upload_state(host);
  // Evaluation runs on the first GPU, at the weights and at their average.
  TrainingSession::DeviceLogits on_device;
  on_device.raw = [&workers](const Tensor& x, Tensor& logits) { workers.predict(x, false, logits); };
  if (s.ema()) on_device.average = [&workers](const Tensor& x, Tensor& logits) { workers.predict(x, true, logits); };

  std::vector<Tensor> batches(N);
  std::vector<std::vector<int32_t>> labels(N);
  InProcessRun run(s, N, t_start);
  run.result().bytes_sent_per_worker_step = workers.bytes_per_worker_step();
  for (const Param& p : s.params().params) run.result().fp32_bytes_per_worker_step += 4.0 * p.value.size();
  run.record_codec_choice(codec_choice);
  const InProcessRun::Hooks hooks{[&](TrainResult& r) { s.evaluate_into(r, &on_device); },
                                  [&] { workers.download_state(host); }};
  for (int64_t step = start_step; step < cfg.max_steps; ++step) {
    for (int w = 0; w < N; ++w) s.next_batch(w, step, batches[w], labels[w]);
    const float loss = workers.step(step, batches, labels, static_cast<float>(s.lr(step)));
    workers.fold_state(s.model().state());  // batch norm: worker 0's batch, as on the CPU
    if (s.ema()) workers.update_average(static_cast<float>(1.0 - s.ema()->decay_at(step)));
    run.after_step(step, loss, [](JsonObject& o) { o.add("device", "gpu"); }, hooks);
  }
  return run.finish(hooks);  // the checkpoint's and export's state downloaded by before_save
}

}  // namespace terngrad::train::detail
