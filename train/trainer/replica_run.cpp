#include "replica_run.h"

#include "server_states.h"
#include "terngrad/comm/ps_status.h"

namespace terngrad::train::detail {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

ReplicaRun::ReplicaRun(TrainingSession& s, comm::WorkerClient& client, const Wire& wire, bool chief,
                       int64_t first_step)
    : s_(s),
      client_(&client),
      wire_(&wire),
      chief_(chief),
      first_step_(first_step),
      examples_per_step_(examples_per_global_step(s.cfg())),
      log_(chief && !s.cfg().train_dir.empty()
               ? std::make_unique<JsonlWriter>(s.cfg().train_dir + "/metrics.jsonl", true)
               : nullptr),
      progress_(s.cfg().max_steps, examples_per_step_, s.cfg().quiet || !chief),
      t_train_(Clock::now()),
      t0_(client.traffic()) {}

void ReplicaRun::switch_client(comm::WorkerClient& client, const Wire& wire) {
  earlier_ = traffic();
  client_ = &client;
  wire_ = &wire;
  t0_ = client.traffic();
}

comm::Traffic ReplicaRun::traffic() const {
  const comm::Traffic now = client_->traffic();
  return {earlier_.payload_sent + now.payload_sent - t0_.payload_sent,
          earlier_.payload_received + now.payload_received - t0_.payload_received,
          earlier_.message_sent + now.message_sent - t0_.message_sent,
          earlier_.message_received + now.message_received - t0_.message_received};
}

void ReplicaRun::record_codec_rechoice(const std::string& json_line) {
  result_.codec_changes.push_back(json_line);
  if (log_) log_->write(JsonObject().add("event", "codec_rechoice").add_json("choice", json_line));
}

void ReplicaRun::record_codec_choice(const std::string& json_line) {
  result_.codec_choice = json_line;
  if (log_ && !json_line.empty()) log_->write(JsonObject().add("event", "codec_choice").add_json("choice", json_line));
}

void ReplicaRun::after_step(int64_t done, double loss, double lr) {
  const TrainConfig& cfg = s_.cfg();
  loss_ = loss;
  ++steps_run_;
  sent_bytes_ += wire_->step_bytes();  // what the step pushed: a variable-size codec's vary
  progress_.update(done, loss);
  if (!log_ || cfg.log_every_n_steps <= 0 || (done % cfg.log_every_n_steps != 0 && done != cfg.max_steps)) return;
  const comm::Traffic t = traffic();
  const double secs = since(t_train_);
  JsonObject o;
  o.add("event", "train").add("step", done).add("loss", loss).add("learning_rate", lr)
      .add("examples_per_sec", secs > 0 ? static_cast<double>((done - first_step_) * examples_per_step_) / secs : 0.0)
      .add("bytes_sent_per_worker", sent_per_step())
      .add("bytes_recv_per_worker", per_step(t.payload_received))
      .add("wire_bytes_sent_per_worker", per_step(t.message_sent))
      .add("wire_bytes_recv_per_worker", per_step(t.message_received));
  if (clock_.steps > 0) clock_.add_to(o, "");
  if (replicas_.steps > 0) replicas_.add_to(o, "replicas_");
  clock_ = StepClock{};
  replicas_ = StepClock{};
  log_->write(o);
}

double ReplicaRun::per_step(uint64_t total) const {
  return steps_run_ > 0 ? static_cast<double>(total) / static_cast<double>(steps_run_) : 0.0;
}

double ReplicaRun::sent_per_step() const {
  return steps_run_ > 0 ? sent_bytes_ / static_cast<double>(steps_run_) : 0.0;
}

bool ReplicaRun::evaluation_due(int64_t done) const {
  const TrainConfig& cfg = s_.cfg();
  return chief_ && cfg.eval_interval_steps > 0 && !cfg.comm_only && done % cfg.eval_interval_steps == 0 &&
         done < cfg.max_steps;
}

void ReplicaRun::evaluate(int64_t done) {
  s_.evaluate_into(result_);
  log_eval(log_.get(), done, result_, s_.cfg().quiet);
}

TrainResult ReplicaRun::finish(int64_t last, const std::vector<std::string>& ps_addresses,
                               const comm::ClientOptions& access) {
  const TrainConfig& cfg = s_.cfg();
  progress_.finish();
  const double train_secs = since(t_train_);
  const comm::Traffic t = traffic();
  result_.steps = last;
  result_.examples = (last - first_step_) * examples_per_step_;  // the whole cluster's
  result_.examples_per_sec = train_secs > 0 ? static_cast<double>(result_.examples) / train_secs : 0;
  result_.train_seconds = train_secs;
  result_.final_loss = loss_;
  for (const Param& p : s_.params().params) result_.fp32_bytes_per_worker_step += 4.0 * p.value.size();
  result_.bytes_sent_per_worker_step = sent_per_step();
  result_.bytes_recv_per_worker_step = per_step(t.payload_received);
  result_.wire_bytes_sent_per_worker_step = per_step(t.message_sent);
  result_.wire_bytes_recv_per_worker_step = per_step(t.message_received);
  result_.codec_summary = codec_summary(s_.plan());
  if (!chief_) {
    if (!cfg.comm_only) s_.save_codec_states(last);  // beside the chief's final checkpoint
    return result_;
  }
  int64_t stale = 0;
  for (const auto& a : ps_addresses)
    if (auto st = comm::query_ps_status(a, 5, access.credential, access.tls)) stale += static_cast<int64_t>(st->stale_pushes);
  result_.stale_pushes = stale;
  if (!cfg.comm_only) {  // a fixed gradient trains nothing worth evaluating or keeping
    evaluate(last);
    // The ps still holds the last step it summed here (a run resumed at its end summed none).
    if (steps_run_ > 0 && keeps_server_states(s_)) fetch_server_states(s_, *client_, last - 1);
    s_.save(last);
    export_model(s_, last);
  }
  return result_;
}

}  // namespace terngrad::train::detail
