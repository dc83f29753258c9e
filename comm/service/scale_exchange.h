// Private: scale sharing on ps 0. Codecs that share scales (terngrad) need,
// per step and variable, the max over the replicas of each replica's local
// scale. Each replica reports its scales for some variables of a step; once
// replicas_to_aggregate replicas reported a variable, its max is final.
//
// The last keep_steps steps are kept, so that a replica that retries a
// report, or asks again after a long poll, still finds its step. No gRPC
// here: the service (ps_server.cpp) checks the request with select(), records
// it, and long-polls on complete().
//
// Not thread-safe: the service calls every member with its lock held.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <vector>

namespace terngrad::comm::detail {

class ScaleExchange {
 public:
  // variables: the model's variable count. replicas: the run's replicas
  // (reports name one of [0, replicas)). needed: reports that make a
  // variable's max final (replicas_to_aggregate). keep_steps: steps kept
  // (0 keeps none: every report is too old).
  // Throws std::invalid_argument when needed is not in [1, replicas].
  ScaleExchange(size_t variables, int replicas, int needed, size_t keep_steps);

  // Checks a report without changing anything. named: the variables it
  // covers, each once, or empty for every variable; scales: one per covered
  // variable, each finite and non-negative. Fills *covered with the variable
  // indices (in the report's order) and returns "", or returns what is wrong
  // (a message starting "ExchangeScales: ").
  std::string select(std::span<const uint32_t> named, std::span<const float> scales,
                     std::vector<uint32_t>* covered) const;

  enum class Recorded {
    kNew,      // at least one variable's scale was new: waiters may be done
    kRepeated, // every variable was reported before (a retried report)
    kTooOld,   // the step is not kept (keep_steps newer steps displaced it)
  };
  // Folds a report that select() accepted into step's maxima. replica must
  // be in [0, replicas) and covered/scales as select() returned them
  // (std::invalid_argument otherwise). A variable a replica reported before
  // keeps its first scale.
  Recorded record(uint32_t replica, int64_t step, std::span<const uint32_t> covered, std::span<const float> scales);

  // Whether step is still kept.
  bool kept(int64_t step) const;
  // Whether every covered variable of step has its final max (false when the
  // step is not kept).
  bool complete(int64_t step, std::span<const uint32_t> covered) const;
  // The maxima of covered variables, in order; step must be complete.
  std::vector<float> maxima(int64_t step, std::span<const uint32_t> covered) const;
  // The replicas that have not reported every covered variable of step, in
  // replica order (empty when the step is not kept).
  std::vector<uint32_t> missing(int64_t step, std::span<const uint32_t> covered) const;

 private:
  struct Step {
    int64_t step = -1;
    std::vector<float> max;                   // [variable]
    std::vector<std::vector<bool>> reported;  // [replica][variable]
    std::vector<int> count;                   // [variable] replicas that reported it
  };
  const Step* find(int64_t step) const;
  Step* find(int64_t step);
  void check_covered(std::span<const uint32_t> covered) const;

  size_t variables_;
  int replicas_;
  int needed_;
  size_t keep_steps_;
  // In the order the steps were first reported (not by step number): a
  // report of a step not kept adds it and displaces the oldest added.
  std::deque<Step> steps_;
};

}  // namespace terngrad::comm::detail
