// Private to the trainer: the bookkeeping a cluster replica does around its
// steps (the loops of sync_loop.cpp and async_loop.cpp), as InProcessRun does
// for the in-process trainers: console progress, the chief's metrics.jsonl
// lines and evaluations, and the result with its rates and traffic.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "session.h"
#include "step_clock.h"
#include "terngrad/comm/worker_client.h"
#include "terngrad/train/metrics.h"
#include "terngrad/train/trainer.h"
#include "wire.h"

namespace terngrad::train::detail {

class ReplicaRun {
 public:
  // Training begins now, at global step first_step (rates and traffic count
  // from here). The cluster's examples are counted from the global step:
  // examples_per_global_step(cfg) per step (trainer.h).
  ReplicaRun(TrainingSession& s, comm::WorkerClient& client, const Wire& wire, bool chief, int64_t first_step);

  TrainResult& result() { return result_; }
  int64_t steps_run() const { return steps_run_; }
  // This replica's step times since the last train line, and the mean over
  // the replicas (from the ps) since then.
  StepClock& clock() { return clock_; }
  StepClock& replicas() { return replicas_; }

  // After `done` global steps (this replica's last push took the run to at
  // least `done`), the last with this loss: progress and, when due, the
  // chief's train line.
  void after_step(int64_t done, double loss, double lr);
  // --codec=auto: the decision (one line of JSON, "" for none) into the
  // result and, on the chief, as {"event": "codec_choice", ...} into
  // metrics.jsonl.
  void record_codec_choice(const std::string& json_line);
  // A new plan chosen again (plan_recheck.h): into the result's
  // codec_changes and, on the chief, as {"event": "codec_rechoice", ...}.
  void record_codec_rechoice(const std::string& json_line);
  // The replica was built again (a new plan): the run goes on with this
  // client and wire; the traffic counts on from the old client's.
  void switch_client(comm::WorkerClient& client, const Wire& wire);
  // Whether the chief evaluates after `done` steps (before the last).
  bool evaluation_due(int64_t done) const;
  // The session's weights evaluated: into the result, the log and the console.
  void evaluate(int64_t done);

  // End of training at global step `last`, the session holding the final
  // state on the chief: rates and traffic; on the chief the run's stale
  // pushes (from the ps tasks at ps_addresses, asked with the replica's
  // credential and TLS settings) and, unless --comm_only, the final
  // evaluation, checkpoint and export.
  TrainResult finish(int64_t last, const std::vector<std::string>& ps_addresses, const comm::ClientOptions& access);

 private:
  using Clock = std::chrono::steady_clock;
  // Bytes per step run of a traffic counter since training began.
  double per_step(uint64_t total) const;
  // The traffic since training began, over every client this run had.
  comm::Traffic traffic() const;
  // Payload and pre-round bytes this replica pushed, per step run: the mean
  // of what it measured after each step (Wire::step_bytes()).
  double sent_per_step() const;

  TrainingSession& s_;
  comm::WorkerClient* client_;
  const Wire* wire_;
  comm::Traffic earlier_;  // of the clients before this one (switch_client)
  const bool chief_;
  const int64_t first_step_;
  const int64_t examples_per_step_;  // the whole cluster's, per global step
  std::unique_ptr<JsonlWriter> log_;  // the chief's, with --train_dir
  Progress progress_;
  TrainResult result_;
  StepClock clock_, replicas_;
  int64_t steps_run_ = 0;
  double sent_bytes_ = 0;  // summed over the steps run
  double loss_ = 0;
  const Clock::time_point t_train_;
  comm::Traffic t0_;  // this client's when it began
};

}  // namespace terngrad::train::detail
