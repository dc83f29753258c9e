// The pre-rounds of multi-round codecs on ps 0 (presum_exchange.h).
#include "presum_exchange.h"

#include <cmath>
#include <stdexcept>

namespace terngrad::comm::detail {

PresumExchange::PresumExchange(std::vector<std::vector<uint64_t>> floats, int replicas, int needed, size_t keep_steps)
    : floats_(std::move(floats)), replicas_(replicas), needed_(needed), keep_steps_(keep_steps) {
  if (replicas < 1 || needed < 1 || needed > replicas)
    throw std::invalid_argument("PresumExchange: needed " + std::to_string(needed) + " must be in [1, replicas " +
                                std::to_string(replicas) + "]");
}

bool PresumExchange::any() const {
  for (const auto& f : floats_)
    if (!f.empty()) return true;
  return false;
}

std::string PresumExchange::select(uint32_t round, std::span<const uint32_t> named, std::span<const float> values,
                                   std::vector<uint32_t>* covered) const {
  const size_t V = floats_.size();
  std::vector<uint32_t> vars;
  if (named.empty()) {
    for (uint32_t v = 0; v < V; ++v)
      if (round < floats_[v].size()) vars.push_back(v);
    if (vars.empty()) return "ExchangePresums: no variable has a round " + std::to_string(round);
  } else {
    std::vector<bool> seen(V, false);
    for (uint32_t v : named) {
      if (v >= V || seen[v])
        return "ExchangePresums: variable " + std::to_string(v) + (v >= V ? " of " + std::to_string(V) : " named twice");
      if (round >= floats_[v].size())
        return "ExchangePresums: variable " + std::to_string(v) + " has " + std::to_string(floats_[v].size()) +
               " pre-rounds, not a round " + std::to_string(round);
      seen[v] = true;
      vars.push_back(v);
    }
  }
  uint64_t expect = 0;
  for (uint32_t v : vars) expect += floats_[v][round];
  if (values.size() != expect)
    return "ExchangePresums: " + std::to_string(values.size()) + " values for round " + std::to_string(round) + " of " +
           std::to_string(vars.size()) + " variables, which take " + std::to_string(expect);
  for (size_t i = 0; i < values.size(); ++i)
    if (!std::isfinite(values[i])) return "ExchangePresums: value " + std::to_string(i) + " is NaN or Inf";
  *covered = std::move(vars);
  return "";
}

void PresumExchange::check(uint32_t round, std::span<const uint32_t> covered) const {
  for (uint32_t v : covered)
    if (v >= floats_.size() || round >= floats_[v].size())
      throw std::invalid_argument("PresumExchange: variable " + std::to_string(v) + " has no round " + std::to_string(round));
}

PresumExchange::Recorded PresumExchange::record(uint32_t replica, int64_t step, uint32_t round,
                                                std::span<const uint32_t> covered, std::span<const float> values) {
  if (replica >= static_cast<uint32_t>(replicas_))
    throw std::invalid_argument("PresumExchange: replica " + std::to_string(replica) + " of " + std::to_string(replicas_));
  check(round, covered);
  uint64_t expect = 0;
  for (uint32_t v : covered) expect += floats_[v][round];
  if (values.size() != expect)
    throw std::invalid_argument("PresumExchange: " + std::to_string(values.size()) + " values, expected " +
                                std::to_string(expect));
  if (find(step) == nullptr) {
    steps_.push_back(Step{step, {}});
    while (steps_.size() > keep_steps_) steps_.pop_front();
    if (find(step) == nullptr) return Recorded::kTooOld;
  }
  Step& mine = const_cast<Step&>(*find(step));
  bool fresh = false;
  size_t at = 0;
  for (uint32_t v : covered) {
    const size_t k = floats_[v][round];
    const std::span<const float> mine_values = values.subspan(at, k);
    at += k;
    Entry& e = mine.entries[{round, v}];
    if (e.reported.empty()) {
      e.reported.assign(replicas_, false);
      e.vectors.resize(replicas_);
    }
    if (e.reported[replica]) continue;  // a retried report
    e.reported[replica] = true;
    ++e.count;
    fresh = true;
    if (e.final) continue;  // a late replica: the sum is the first `needed` replicas'
    e.vectors[replica].assign(mine_values.begin(), mine_values.end());
    if (e.count < needed_) continue;
    e.sum.assign(k, 0.0f);
    for (const std::vector<float>& x : e.vectors)  // replica order
      for (size_t i = 0; i < x.size(); ++i) e.sum[i] += x[i];
    e.final = true;
    e.vectors.clear();
    e.vectors.shrink_to_fit();
  }
  return fresh ? Recorded::kNew : Recorded::kRepeated;
}

bool PresumExchange::kept(int64_t step) const { return find(step) != nullptr; }

const PresumExchange::Step* PresumExchange::find(int64_t step) const {
  for (const Step& s : steps_)
    if (s.step == step) return &s;
  return nullptr;
}

const PresumExchange::Entry* PresumExchange::entry(int64_t step, uint32_t round, uint32_t v) const {
  const Step* s = find(step);
  if (s == nullptr) return nullptr;
  const auto it = s->entries.find({round, v});
  return it == s->entries.end() ? nullptr : &it->second;
}

bool PresumExchange::complete(int64_t step, uint32_t round, std::span<const uint32_t> covered) const {
  check(round, covered);
  for (uint32_t v : covered) {
    const Entry* e = entry(step, round, v);
    if (e == nullptr || !e->final) return false;
  }
  return true;
}

std::vector<float> PresumExchange::sums(int64_t step, uint32_t round, std::span<const uint32_t> covered) const {
  if (!complete(step, round, covered))
    throw std::invalid_argument("PresumExchange: round " + std::to_string(round) + " of step " + std::to_string(step) +
                                " is not complete");
  std::vector<float> out;
  for (uint32_t v : covered) {
    const Entry* e = entry(step, round, v);
    out.insert(out.end(), e->sum.begin(), e->sum.end());
  }
  return out;
}

std::vector<uint32_t> PresumExchange::missing(int64_t step, uint32_t round, std::span<const uint32_t> covered) const {
  check(round, covered);
  std::vector<uint32_t> out;
  if (!kept(step)) return out;
  for (int r = 0; r < replicas_; ++r)
    for (uint32_t v : covered) {
      const Entry* e = entry(step, round, v);
      if (e == nullptr || !e->reported[r]) {
        out.push_back(static_cast<uint32_t>(r));
        break;
      }
    }
  return out;
}

}  // namespace terngrad::comm::detail
