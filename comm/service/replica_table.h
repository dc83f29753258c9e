// The ps's replica table: who is in the run, by which process, and whether
// the run can go on without the silent ones.
//
// Owns: each replica's record (registered, its process's session id and
// label, when it was last heard from, done, gone and why, its last step-time
// report); the rule of Register (a new process of a registered replica
// replaces the old one only when it proved who it is or the old one has
// gone silent); the liveness rules (a replica silent for the peer timeout is
// gone; the run cannot go on without the chief, or, in a sync run, with
// fewer replicas left than a step needs) and the startup rule (the chief's
// Init and every Register within the startup timeout). Never: a payload, a step's sums,
// the ps's lock (the caller holds it) or the clock: every call that judges
// time takes `now`, so its tests need no sleeps.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace terngrad::comm::detail {

using SteadyTime = std::chrono::steady_clock::time_point;

struct ReplicaRecord {
  bool registered = false;
  bool done = false;
  bool gone = false;
  std::string gone_reason;
  std::string label;
  std::string session;  // the session id its process registered with ("" before Register)
  SteadyTime last_heard{};
  std::vector<float> step_ms;  // its last step-time report (PushHeader.step_ms)
};

// Session ids compared in constant time (they are credentials).
bool same_session(const std::string& a, const std::string& b);

class ReplicaTable {
 public:
  // A fresh table of `total` unregistered replicas (at Init).
  void reset(size_t total) { records_.assign(total, ReplicaRecord{}); }
  size_t size() const { return records_.size(); }
  ReplicaRecord& operator[](uint32_t r) { return records_[r]; }
  const ReplicaRecord& operator[](uint32_t r) const { return records_[r]; }
  const std::vector<ReplicaRecord>& records() const { return records_; }

  void heard(uint32_t r, SteadyTime now) {
    if (r < records_.size()) records_[r].last_heard = now;
  }
  std::vector<uint32_t> unregistered() const;

  // Register of replica r by the process with `session`.
  enum class Join {
    kFirst,     // the replica's first process
    kSame,      // the same process again (a retried Register)
    kReplaced,  // a new process of it: the old one's calls are refused from now on
    kRefused,   // another process holds it, and nothing proves this one is the replica
  };
  // proven: the caller's token proves it is replica r (a cluster secret). A
  // refusal changes nothing; otherwise r is registered to this process,
  // heard from at `now` and no longer gone.
  Join join(uint32_t r, const std::string& session, const std::string& label, bool proven, SteadyTime now);

  // The liveness verdict at `now`: replicas silent for more than
  // peer_timeout_s are marked gone (once each, in `newly_gone`); `failure`
  // says why the run cannot go on, if it cannot. name(r) and last_pushed(r)
  // word the messages.
  struct Verdict {
    std::vector<std::string> newly_gone;
    std::optional<std::string> failure;
  };
  Verdict judge(SteadyTime now, double peer_timeout_s, bool sync, int needed,
                const std::function<std::string(uint32_t)>& name,
                const std::function<int64_t(uint32_t)>& last_pushed);

  // The startup rule at `now`: the chief initializes the ps (initialized)
  // and every replica registers within startup_timeout_s of `started`, the
  // ps's start. complete: all have, and judge() rules from now on; failure:
  // who did not, once the time is up.
  struct Startup {
    bool complete = false;
    std::optional<std::string> failure;
  };
  Startup judge_startup(bool initialized, SteadyTime started, SteadyTime now, double startup_timeout_s,
                        const std::function<std::string(uint32_t)>& name) const;

 private:
  std::vector<ReplicaRecord> records_;
};

}  // namespace terngrad::comm::detail
