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
// All three nets run, AlexNet's Dropout included: each worker gets the CPU
// run's dropout seed for the step, so both drop the same units.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numeric>
#include <stdexcept>

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

  std::unique_ptr<JsonlWriter> log;
  if (!cfg.train_dir.empty()) log = std::make_unique<JsonlWriter>(cfg.train_dir + "/metrics.jsonl", true);
  std::vector<Tensor> batches(N);
  std::vector<std::vector<int32_t>> labels(N);
  Progress progress(cfg.max_steps, cfg.batch_size * N, cfg.quiet);
  TrainResult result;
  result.bytes_sent_per_worker_step = workers.bytes_per_worker_step();
  for (const Param& p : s.params().params) result.fp32_bytes_per_worker_step += 4.0 * p.value.size();
  int64_t steps_run = 0;
  const auto t_train = Clock::now();
  for (int64_t step = start_step; step < cfg.max_steps; ++step) {
    for (int w = 0; w < N; ++w) s.next_batch(w, step, batches[w], labels[w]);
    const float loss = workers.step(step, batches, labels, static_cast<float>(s.lr(step)));
    if (s.ema()) workers.update_average(static_cast<float>(1.0 - s.ema()->decay_at(step)));
    if (!std::isfinite(loss))
      throw std::runtime_error("training diverged at step " + std::to_string(step) + ": loss is " +
                               std::to_string(loss) + " (lower --initial_learning_rate?)");
    result.final_loss = loss;
    ++steps_run;
    progress.update(step + 1, loss);
    if (log && cfg.log_every_n_steps > 0 && ((step + 1) % cfg.log_every_n_steps == 0 || step + 1 == cfg.max_steps)) {
      const double secs = std::chrono::duration<double>(Clock::now() - t_train).count();
      JsonObject o;
      o.add("event", "train").add("step", step + 1).add("loss", static_cast<double>(loss))
          .add("learning_rate", s.lr(step)).add("device", "gpu")
          .add("examples_per_sec", secs > 0 ? steps_run * cfg.batch_size * N / secs : 0.0)
          .add("bytes_sent_per_worker", result.bytes_sent_per_worker_step);
      log->write(o);
    }
    if (cfg.eval_interval_steps > 0 && (step + 1) % cfg.eval_interval_steps == 0 && step + 1 < cfg.max_steps) {
      s.evaluate_into(result, &on_device);
      log_eval(log.get(), step + 1, result, cfg.quiet);
    }
    if (cfg.save_interval_steps > 0 && (step + 1) % cfg.save_interval_steps == 0 && step + 1 < cfg.max_steps) {
      workers.download_state(host);
      s.save(step + 1);
    }
  }
  const double train_secs = std::chrono::duration<double>(Clock::now() - t_train).count();
  progress.finish();
  result.steps = cfg.max_steps;
  result.examples = steps_run * cfg.batch_size * N;
  result.examples_per_sec = train_secs > 0 ? result.examples / train_secs : 0;
  s.evaluate_into(result, &on_device);
  log_eval(log.get(), cfg.max_steps, result, cfg.quiet);
  workers.download_state(host);  // for the checkpoint and the exported weights
  s.save(cfg.max_steps);
  export_model(s, cfg.max_steps);
  result.codec_summary = codec_summary(s.plan());
  result.wall_seconds = std::chrono::duration<double>(Clock::now() - t_start).count();
  return result;
}

}  // namespace terngrad::train::detail
