// --codec=auto re-decides when the link moves (plan_recheck.h).
#include "plan_recheck.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <limits>

#include "terngrad/base/json.h"

namespace terngrad::train::detail {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double rate(double bytes_per_s) { return bytes_per_s > 0 ? bytes_per_s : std::numeric_limits<double>::infinity(); }

bool moved_by_2x(double a, double b) {
  const double x = rate(a), y = rate(b);
  if (std::isinf(x) || std::isinf(y)) return std::isinf(x) != std::isinf(y);
  return std::max(x, y) > 2 * std::min(x, y);
}

std::string mbit(double bytes_per_s) {
  if (bytes_per_s <= 0) return "no link";
  char b[48];
  std::snprintf(b, sizeof b, "%.1f Mbit/s", bytes_per_s * 8 / 1e6);
  return b;
}

}  // namespace

PlanRecheck::PlanRecheck(const TrainConfig& cfg, int replicas, int num_ps, std::optional<comm::LinkModel> decided_with,
                         Probe probe)
    : cfg_(cfg), replicas_(replicas), num_ps_(num_ps), reference_(decided_with), probe_(std::move(probe)) {
  if (!cfg.auto_link_changes.empty()) changes_ = parse_link_changes(cfg.auto_link_changes);
}

bool PlanRecheck::moved(const comm::LinkModel& from, const comm::LinkModel& to) {
  return moved_by_2x(from.up_bytes_per_s, to.up_bytes_per_s) || moved_by_2x(from.down_bytes_per_s, to.down_bytes_per_s);
}

bool PlanRecheck::due(int64_t done) const {
  return cfg_.save_interval_steps > 0 && done % cfg_.save_interval_steps == 0 && done < cfg_.max_steps;
}

std::optional<AutoDecision> PlanRecheck::at(int64_t done, TrainingSession& s) {
  std::optional<comm::LinkModel> link;
  std::string source;
  for (const auto& [from, bps] : changes_)
    if (from <= done) {
      link = comm::LinkModel{bps / 8.0, bps / 8.0, 0};
      source = "--auto_link_changes=" + cfg_.auto_link_changes + " at step " + std::to_string(done);
    }
  if (!link && probe_) {
    // A probe holds every replica's step (about 1 s): at most one per 20
    // probes' time, so re-checking costs at most 5% of the run (or one per
    // --auto_recheck_secs).
    const double spacing = cfg_.auto_recheck_secs > 0 ? cfg_.auto_recheck_secs : kProbeSpacing * probe_seconds_;
    if (seconds_since(last_probe_) < spacing) return std::nullopt;
    try {
      const Clock::time_point t0 = Clock::now();
      link = probe_(&source);
      probe_seconds_ = seconds_since(t0);
      last_probe_ = Clock::now();
    } catch (const std::exception& e) {
      // A ps that does not answer a probe fails the run's own calls soon
      // enough; the re-check alone keeps the plan.
      std::fprintf(stderr, "warning: --codec=auto: the re-check after step %lld could not probe the ps (%s); "
                   "the choice stands\n", static_cast<long long>(done), e.what());
      return std::nullopt;
    }
  }
  if (!link) return std::nullopt;
  if (reference_ && !moved(*reference_, *link)) return std::nullopt;
  const std::string was = reference_ ? mbit(reference_->up_bytes_per_s) + " up, " +
                                           mbit(reference_->down_bytes_per_s) + " down"
                                     : std::string("not known: a plan kept from a checkpoint or a running ps");
  reference_ = link;  // later moves count from here, whatever is chosen
  AutoDecision d = decide(cfg_, s, replicas_, num_ps_, *link, source);
  if (d.choice.plan == s.plan()) {
    if (!cfg_.quiet)
      std::fprintf(stderr, "--codec=auto: after step %lld the link is %s up, %s down (was %s); the choice stands\n",
                   static_cast<long long>(done), mbit(link->up_bytes_per_s).c_str(),
                   mbit(link->down_bytes_per_s).c_str(), was.c_str());
    return std::nullopt;
  }
  if (!cfg_.quiet)
    std::fprintf(stderr, "--codec=auto: after step %lld the link is %s up, %s down (was %s); choosing again\n%s",
                 static_cast<long long>(done), mbit(link->up_bytes_per_s).c_str(),
                 mbit(link->down_bytes_per_s).c_str(), was.c_str(), describe(d, s).c_str());
  return d;
}

std::optional<PlanRecheck> plan_recheck(const TrainConfig& cfg, bool cluster, int replicas, int num_ps,
                                        std::optional<comm::LinkModel> decided_with, PlanRecheck::Probe probe) {
  if (!comm::is_auto_codec(cfg.codec) || !cfg.sync_replicas || cfg.save_interval_steps <= 0) return std::nullopt;
  if (cluster && cfg.train_dir.empty()) return std::nullopt;
  const bool probes = cluster && cfg.auto_recheck_links && cfg.auto_link_rate.empty();
  if (!probes) probe = nullptr;
  if (!probes && cfg.auto_link_changes.empty()) return std::nullopt;
  return PlanRecheck(cfg, replicas, num_ps, decided_with, std::move(probe));
}

std::string rechoice_json(int64_t done, const AutoDecision& d, TrainingSession& s) {
  json::Json j = to_json(d, s);
  j["step"] = done;
  return json::dump_line(j);
}

void switch_plan(TrainingSession& s, const AutoDecision& d, int64_t done) {
  s.set_plan(d.choice.plan);
  s.server_states().clear();
  if (!s.cfg().quiet)
    std::fprintf(stderr, "--codec=auto: from step %lld on: %s (error-feedback residuals start again at zero)\n",
                 static_cast<long long>(done), codec_summary(s.plan()).c_str());
}

}  // namespace terngrad::train::detail
