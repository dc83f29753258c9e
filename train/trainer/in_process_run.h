// Private to the trainer: the bookkeeping both in-process trainers do around
// their step (trainer.cpp on the CPU, gpu_trainer.cpp on the GPU), so that
// they report, evaluate, checkpoint and export the same way and differ only
// in how a step is computed.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

#include "session.h"
#include "terngrad/train/metrics.h"
#include "terngrad/train/trainer.h"

namespace terngrad::train::detail {

class InProcessRun {
 public:
  using Clock = std::chrono::steady_clock;
  // What differs between the backends around evaluation and checkpoints.
  struct Hooks {
    std::function<void(TrainResult&)> evaluate;  // raw (and EMA) accuracy into the result
    std::function<void()> before_save;           // brings the session's state up to date; may be empty
  };

  // `workers` workers of s.cfg().batch_size examples each per step; t_start:
  // when the run began (for wall_seconds).
  InProcessRun(TrainingSession& s, int workers, Clock::time_point t_start);

  TrainResult& result() { return result_; }
  // --codec=auto: the decision (one line of JSON, "" for none) into the
  // result and, as {"event": "codec_choice", ...}, into metrics.jsonl.
  void record_codec_choice(const std::string& json_line);
  // A plan chosen again (plan_recheck.h): into the result's codec_changes
  // and, as {"event": "codec_rechoice", ...}, into metrics.jsonl.
  void record_codec_rechoice(const std::string& json_line);

  // After step `step` (0-based) with the workers' mean loss: divergence
  // check, console progress, the metrics.jsonl train line (common fields,
  // then `extra`'s), and the evaluation and checkpoint due at this step.
  void after_step(int64_t step, double loss, const std::function<void(JsonObject&)>& extra, const Hooks& hooks);

  // End of training: rates, final evaluation, checkpoint and export.
  TrainResult finish(const Hooks& hooks);

  int64_t steps_run() const { return steps_run_; }

 private:
  TrainingSession& s_;
  int workers_;
  Clock::time_point t_start_, t_train_;
  std::unique_ptr<JsonlWriter> log_;
  Progress progress_;
  TrainResult result_;
  int64_t steps_run_ = 0;
};

}  // namespace terngrad::train::detail
