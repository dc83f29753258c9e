// --device=gpu: the in-process run of trainer.cpp with the step on the GPU
// (terngrad/train/cuda/virtual_workers.h). Data, schedule, codec plan,
// seeds and evaluation come from the same TrainingSession as the CPU run,
// so the two differ only where the arithmetic runs.
//
// Not yet on the GPU (refused or reported, never silently different):
//   - the moving average of the weights (the run reports no EMA accuracy);
//   - checkpoints/resume (optimizer slots live on the device; the run exports
//     model.safetensors and metrics.jsonl only);
//   - rmsprop and the fp16 codec (refused with a message).
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
#include "terngrad/train/safetensors.h"

namespace terngrad::train::detail {

void log_eval(JsonlWriter* log, int64_t step, const TrainResult& r, bool quiet);  // trainer.cpp

TrainResult run_training_gpu(const TrainConfig& cfg) {
  using Clock = std::chrono::steady_clock;
  if (!cuda::gpu_available())
    throw std::runtime_error("--device=gpu: no CUDA device (" + cuda::gpu_unavailable_reason() + ")");
  const auto t_start = Clock::now();
  const int N = cfg.num_nodes;
  std::vector<int> all(N);
  std::iota(all.begin(), all.end(), 0);
  TrainingSession s(cfg, N, all);

  cuda::VirtualWorkersConfig wc;
  wc.num_workers = N;
  wc.plan = s.plan();
  wc.optimizer.name = cfg.optimizer;
  wc.optimizer.momentum = static_cast<float>(cfg.momentum);
  for (int w = 0; w < N; ++w) wc.codec_seeds.push_back(stream_seed(cfg.seed, 0, w, Purpose::kCodec));
  wc.dropout_seed = [seed = cfg.seed](int64_t step, int w) { return stream_seed(seed, step, w, Purpose::kDropout); };
  cuda::VirtualWorkers workers(s.model(), wc);
  if (cfg.moving_average_decay > 0 && !cfg.quiet)
    std::fprintf(stderr, "--device=gpu: the moving average of the weights is not computed on the GPU yet; "
                         "only the raw weights are evaluated\n");

  std::unique_ptr<JsonlWriter> log;
  if (!cfg.train_dir.empty()) log = std::make_unique<JsonlWriter>(cfg.train_dir + "/metrics.jsonl", true);
  std::vector<Tensor> batches(N);
  std::vector<std::vector<int32_t>> labels(N);
  TrainResult result;
  result.bytes_sent_per_worker_step = workers.bytes_per_worker_step();
  for (const Param& p : s.params().params) result.fp32_bytes_per_worker_step += 4.0 * p.value.size();
  const auto t_train = Clock::now();
  for (int64_t step = 0; step < cfg.max_steps; ++step) {
    for (int w = 0; w < N; ++w) s.next_batch(w, step, batches[w], labels[w]);
    const float loss = workers.step(step, batches, labels, static_cast<float>(s.lr(step)));
    if (!std::isfinite(loss))
      throw std::runtime_error("training diverged at step " + std::to_string(step) + ": loss is " +
                               std::to_string(loss) + " (lower --initial_learning_rate?)");
    result.final_loss = loss;
    if (log && cfg.log_every_n_steps > 0 && ((step + 1) % cfg.log_every_n_steps == 0 || step + 1 == cfg.max_steps)) {
      const double secs = std::chrono::duration<double>(Clock::now() - t_train).count();
      JsonObject o;
      o.add("event", "train").add("step", step + 1).add("loss", static_cast<double>(loss))
          .add("learning_rate", s.lr(step)).add("device", "gpu")
          .add("examples_per_sec", secs > 0 ? (step + 1) * cfg.batch_size * N / secs : 0.0);
      log->write(o);
    }
    if (cfg.eval_interval_steps > 0 && (step + 1) % cfg.eval_interval_steps == 0 && step + 1 < cfg.max_steps) {
      workers.download_params(s.params());
      const EvalResult e = evaluate(s.model(), s.data().test, s.data().eval_pre, cfg);
      result.top1 = e.top1, result.top5 = e.top5, result.eval_examples = e.examples;
      log_eval(log.get(), step + 1, result, cfg.quiet);
    }
  }
  const double train_secs = std::chrono::duration<double>(Clock::now() - t_train).count();
  result.steps = cfg.max_steps;
  result.examples = cfg.max_steps * cfg.batch_size * N;
  result.examples_per_sec = train_secs > 0 ? result.examples / train_secs : 0;
  workers.download_params(s.params());
  const EvalResult e = evaluate(s.model(), s.data().test, s.data().eval_pre, cfg);
  result.top1 = e.top1, result.top5 = e.top5, result.eval_examples = e.examples;
  log_eval(log.get(), cfg.max_steps, result, cfg.quiet);
  if (!cfg.train_dir.empty()) {
    std::vector<std::pair<std::string, const Tensor*>> out;
    for (const Param& p : s.params().params) out.emplace_back(p.name, &p.value);
    export_safetensors(cfg.train_dir + "/model.safetensors", out,
                       {{"net", cfg.net}, {"steps", std::to_string(cfg.max_steps)}, {"device", "gpu"}});
  }
  result.codec_summary = codec_summary(s.plan());
  result.wall_seconds = std::chrono::duration<double>(Clock::now() - t_start).count();
  return result;
}

}  // namespace terngrad::train::detail
