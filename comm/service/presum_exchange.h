// Private: the pre-rounds of multi-round codecs on ps 0 (GradientCodec::
// presum_rounds(); PowerSGD's P = sum of the replicas' M Q). Each replica
// reports its float vectors of one round of some variables of a step; once
// replicas_to_aggregate replicas reported a (round, variable), its sum is
// final: the float32 sum of exactly those replicas' vectors in replica order
// (0 + r0 + r1 + ..., the in-process trainer's worker order), computed once,
// so every replica (a late one too) gets the same bits. Reports after that
// are acknowledged and not summed.
//
// The last keep_steps steps are kept, as ScaleExchange keeps them. No gRPC
// here: the service (ps_server.cpp) checks the request with select(), records
// it, and long-polls on complete().
//
// Not thread-safe: the service calls every member with its lock held.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace terngrad::comm::detail {

class PresumExchange {
 public:
  // floats[v][i]: the floats of round i of variable v (its codec's
  // presum_floats(i, size); as many entries as its pre-rounds, none for
  // single-round codecs). replicas, needed, keep_steps as ScaleExchange's.
  // Throws std::invalid_argument when needed is not in [1, replicas].
  PresumExchange(std::vector<std::vector<uint64_t>> floats, int replicas, int needed, size_t keep_steps);

  // Whether any variable has a pre-round.
  bool any() const;

  // Checks a report without changing anything. named: the variables it
  // covers, each once and each with a round `round`, or empty for every
  // variable that has one; values: their vectors one after another, each of
  // its round's size, every value finite. Fills *covered and returns "", or
  // returns what is wrong (a message starting "ExchangePresums: ").
  std::string select(uint32_t round, std::span<const uint32_t> named, std::span<const float> values,
                     std::vector<uint32_t>* covered) const;

  enum class Recorded { kNew, kRepeated, kTooOld };
  // Folds a report that select() accepted into step's round. replica must
  // be in [0, replicas) (std::invalid_argument otherwise). A (round,
  // variable) a replica reported before keeps its first vector.
  Recorded record(uint32_t replica, int64_t step, uint32_t round, std::span<const uint32_t> covered,
                  std::span<const float> values);

  bool kept(int64_t step) const;
  // Whether every covered variable's sum of step's round is final.
  bool complete(int64_t step, uint32_t round, std::span<const uint32_t> covered) const;
  // The covered variables' sums, one after another; step's round must be complete.
  std::vector<float> sums(int64_t step, uint32_t round, std::span<const uint32_t> covered) const;
  // Replicas that have not reported every covered variable of step's round.
  std::vector<uint32_t> missing(int64_t step, uint32_t round, std::span<const uint32_t> covered) const;

 private:
  struct Entry {
    std::vector<std::vector<float>> vectors;  // [replica], until the sum is final
    std::vector<bool> reported;               // [replica]
    int count = 0;
    bool final = false;
    std::vector<float> sum;
  };
  struct Step {
    int64_t step = -1;
    std::map<std::pair<uint32_t, uint32_t>, Entry> entries;  // (round, variable)
  };
  const Step* find(int64_t step) const;
  const Entry* entry(int64_t step, uint32_t round, uint32_t v) const;
  void check(uint32_t round, std::span<const uint32_t> covered) const;

  std::vector<std::vector<uint64_t>> floats_;
  int replicas_;
  int needed_;
  size_t keep_steps_;
  std::deque<Step> steps_;  // in the order first reported, as ScaleExchange's
};

}  // namespace terngrad::comm::detail
