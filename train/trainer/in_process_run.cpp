#include "in_process_run.h"

#include <cmath>
#include <stdexcept>
#include <string>

namespace terngrad::train::detail {

namespace {
double seconds_since(InProcessRun::Clock::time_point t) {
  return std::chrono::duration<double>(InProcessRun::Clock::now() - t).count();
}
}  // namespace

InProcessRun::InProcessRun(TrainingSession& s, int workers, Clock::time_point t_start)
    : s_(s),
      workers_(workers),
      t_start_(t_start),
      t_train_(Clock::now()),
      progress_(s.cfg().max_steps, s.cfg().batch_size * workers, s.cfg().quiet) {
  if (!s.cfg().train_dir.empty()) log_ = std::make_unique<JsonlWriter>(s.cfg().train_dir + "/metrics.jsonl", true);
}

void InProcessRun::record_codec_choice(const std::string& json_line) {
  result_.codec_choice = json_line;
  if (log_ && !json_line.empty()) log_->write(JsonObject().add("event", "codec_choice").add_json("choice", json_line));
}

void InProcessRun::record_codec_rechoice(const std::string& json_line) {
  result_.codec_changes.push_back(json_line);
  if (log_) log_->write(JsonObject().add("event", "codec_rechoice").add_json("choice", json_line));
}

void InProcessRun::after_step(int64_t step, double loss, const std::function<void(JsonObject&)>& extra,
                              const Hooks& hooks) {
  const TrainConfig& cfg = s_.cfg();
  if (!std::isfinite(loss))
    throw std::runtime_error("training diverged at step " + std::to_string(step) + ": loss is " +
                             std::to_string(loss) + " (lower --initial_learning_rate?)");
  result_.final_loss = loss;
  ++steps_run_;
  progress_.update(step + 1, loss);
  if (log_ && cfg.log_every_n_steps > 0 && ((step + 1) % cfg.log_every_n_steps == 0 || step + 1 == cfg.max_steps)) {
    const double secs = seconds_since(t_train_);
    JsonObject o;
    o.add("event", "train").add("step", step + 1).add("loss", loss).add("learning_rate", s_.lr(step))
        .add("examples_per_sec", secs > 0 ? steps_run_ * cfg.batch_size * workers_ / secs : 0.0)
        .add("bytes_sent_per_worker", result_.bytes_sent_per_worker_step);
    if (extra) extra(o);
    log_->write(o);
  }
  if (cfg.eval_interval_steps > 0 && (step + 1) % cfg.eval_interval_steps == 0 && step + 1 < cfg.max_steps) {
    hooks.evaluate(result_);
    log_eval(log_.get(), step + 1, result_, cfg.quiet);
  }
  if (cfg.save_interval_steps > 0 && (step + 1) % cfg.save_interval_steps == 0 && step + 1 < cfg.max_steps) {
    if (hooks.before_save) hooks.before_save();
    s_.save(step + 1);
  }
}

TrainResult InProcessRun::finish(const Hooks& hooks) {
  const TrainConfig& cfg = s_.cfg();
  const double train_secs = seconds_since(t_train_);
  progress_.finish();
  result_.steps = cfg.max_steps;
  result_.examples = steps_run_ * cfg.batch_size * workers_;
  result_.examples_per_sec = train_secs > 0 ? result_.examples / train_secs : 0;
  result_.train_seconds = train_secs;
  hooks.evaluate(result_);
  log_eval(log_.get(), cfg.max_steps, result_, cfg.quiet);
  if (hooks.before_save) hooks.before_save();
  s_.save(cfg.max_steps);
  export_model(s_, cfg.max_steps);
  result_.codec_summary = codec_summary(s_.plan());
  result_.wall_seconds = seconds_since(t_start_);
  return result_;
}

}  // namespace terngrad::train::detail
