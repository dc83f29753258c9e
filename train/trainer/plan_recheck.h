// Private to the trainer: --codec=auto chooses again when the link moves
// (issue 37). A sync run re-checks at its checkpoints (--save_interval_steps),
// because that is a step every replica can go back to: the chief measures
// the link (a probe of every ps, or --auto_link_changes' rate for that step),
// and when either direction's rate moved by more than 2x since the plan was
// chosen, it chooses again. A probe stalls every replica's step for about a
// second, so one comes at most every 20 probes' time (at most 5% of the run). A new plan replaces the old one at that step
// everywhere: the chief writes the step's checkpoint with the new plan and no
// error-feedback residuals (flushed: the new codecs start from zero, as a run
// started at that step would), rewinds every ps to that step with the new
// layout (InitHeader.new_plan), and every replica restores the checkpoint
// and builds its codecs again (distributed.cpp). An in-process run with
// --auto_link_changes switches at the same steps the same way, so a cluster
// and an in-process run train the same bits.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "auto_codec.h"

namespace terngrad::train::detail {

class PlanRecheck {
 public:
  // Measures the link now and names how ("probe of 2 ps: ..."); empty for a
  // run that cannot (in-process).
  using Probe = std::function<comm::LinkModel(std::string* source)>;

  // decided_with: the link the current plan was chosen for; nullopt when the
  // plan was kept from a checkpoint or adopted from a running ps (then the
  // first re-check chooses afresh).
  PlanRecheck(const TrainConfig& cfg, int replicas, int num_ps, std::optional<comm::LinkModel> decided_with,
              Probe probe);

  // Whether a re-check is due after `done` steps (a checkpoint's step, not
  // the last).
  bool due(int64_t done) const;
  // The re-check after `done` steps: the new decision when the plan changes
  // (s is not changed), else nullopt. Logged unless --quiet.
  std::optional<AutoDecision> at(int64_t done, TrainingSession& s);

  // Whether the link moved by more than 2x either way in either direction
  // (a rate of 0 is no link: memory, faster than any).
  static bool moved(const comm::LinkModel& from, const comm::LinkModel& to);

 private:
  const TrainConfig& cfg_;
  const int replicas_, num_ps_;
  std::optional<comm::LinkModel> reference_;
  Probe probe_;
  std::vector<std::pair<int64_t, uint64_t>> changes_;  // --auto_link_changes
  // Probes are spaced kProbeSpacing times their own duration apart: the
  // first re-check's at least that long after the run's first probe
  // (assumed to take a second until one is timed).
  static constexpr double kProbeSpacing = 20;
  std::chrono::steady_clock::time_point last_probe_ = std::chrono::steady_clock::now();
  double probe_seconds_ = 1.0;
};

// The re-check a run makes, or nullopt when it makes none: not --codec=auto,
// async, no checkpoints (--save_interval_steps=0), a cluster without
// --train_dir (its replicas restore the switch's checkpoint), nothing to
// measure (--auto_link_rate fixes the link and no --auto_link_changes), or
// --auto_recheck_links=false without --auto_link_changes. probe: empty for
// an in-process run.
std::optional<PlanRecheck> plan_recheck(const TrainConfig& cfg, bool cluster, int replicas, int num_ps,
                                        std::optional<comm::LinkModel> decided_with, PlanRecheck::Probe probe);

// A new plan in effect after `done` steps, as one line of JSON for
// metrics.jsonl ({"event": "codec_rechoice", ...}) and result.json.
std::string rechoice_json(int64_t done, const AutoDecision& d, TrainingSession& s);

// What the chief (or an in-process run) does when a re-check after `done`
// steps chose a new plan: sets it (fresh codecs: every error-feedback
// residual flushed) and drops the server states (the ps's residuals).
void switch_plan(TrainingSession& s, const AutoDecision& d, int64_t done);

}  // namespace terngrad::train::detail
