// Scale sharing on ps 0 (scale_exchange.h).
#include "scale_exchange.h"

#include <algorithm>
#include <stdexcept>

namespace terngrad::comm::detail {

ScaleExchange::ScaleExchange(size_t variables, int replicas, int needed, size_t keep_steps)
    : variables_(variables), replicas_(replicas), needed_(needed), keep_steps_(keep_steps) {
  if (replicas < 1 || needed < 1 || needed > replicas)
    throw std::invalid_argument("ScaleExchange: needed " + std::to_string(needed) + " must be in [1, replicas " +
                                std::to_string(replicas) + "]");
}

std::string ScaleExchange::select(std::span<const uint32_t> named, std::span<const float> scales,
                                  std::vector<uint32_t>* covered) const {
  const size_t V = variables_;
  std::vector<uint32_t> vars;
  if (named.empty()) {
    for (uint32_t v = 0; v < V; ++v) vars.push_back(v);
  } else {
    std::vector<bool> seen(V, false);
    for (uint32_t v : named) {
      if (v >= V || seen[v])
        return "ExchangeScales: variable " + std::to_string(v) + (v >= V ? " of " + std::to_string(V) : " named twice");
      seen[v] = true;
      vars.push_back(v);
    }
  }
  if (scales.size() != vars.size())
    return "ExchangeScales: " + std::to_string(scales.size()) + " scales for " + std::to_string(vars.size()) + " variables";
  // Also rejects NaN (every comparison false) and infinities.
  for (float x : scales)
    if (!(x >= 0 && x <= 3.4e38f))
      return "ExchangeScales: scale " + std::to_string(x) + " is not a finite non-negative number";
  *covered = std::move(vars);
  return "";
}

void ScaleExchange::check_covered(std::span<const uint32_t> covered) const {
  for (uint32_t v : covered)
    if (v >= variables_)
      throw std::invalid_argument("ScaleExchange: variable " + std::to_string(v) + " of " + std::to_string(variables_));
}

ScaleExchange::Recorded ScaleExchange::record(uint32_t replica, int64_t step, std::span<const uint32_t> covered,
                                              std::span<const float> scales) {
  if (replica >= static_cast<uint32_t>(replicas_))
    throw std::invalid_argument("ScaleExchange: replica " + std::to_string(replica) + " of " + std::to_string(replicas_));
  if (scales.size() != covered.size())
    throw std::invalid_argument("ScaleExchange: " + std::to_string(scales.size()) + " scales for " +
                                std::to_string(covered.size()) + " variables");
  check_covered(covered);
  if (find(step) == nullptr) {
    Step s;
    s.step = step;
    s.max.assign(variables_, 0.0f);
    s.reported.assign(replicas_, std::vector<bool>(variables_, false));
    s.count.assign(variables_, 0);
    steps_.push_back(std::move(s));
    while (steps_.size() > keep_steps_) steps_.pop_front();
    if (find(step) == nullptr) return Recorded::kTooOld;
  }
  Step& mine = *find(step);
  bool fresh = false;
  for (size_t i = 0; i < covered.size(); ++i) {
    const uint32_t v = covered[i];
    if (mine.reported[replica][v]) continue;  // a retried report
    mine.reported[replica][v] = true;
    ++mine.count[v];
    mine.max[v] = std::max(mine.max[v], scales[i]);
    fresh = true;
  }
  return fresh ? Recorded::kNew : Recorded::kRepeated;
}

bool ScaleExchange::kept(int64_t step) const { return find(step) != nullptr; }

bool ScaleExchange::complete(int64_t step, std::span<const uint32_t> covered) const {
  check_covered(covered);
  const Step* s = find(step);
  if (s == nullptr) return false;
  for (uint32_t v : covered)
    if (s->count[v] < needed_) return false;
  return true;
}

std::vector<float> ScaleExchange::maxima(int64_t step, std::span<const uint32_t> covered) const {
  if (!complete(step, covered))
    throw std::invalid_argument("ScaleExchange: step " + std::to_string(step) + " is not complete");
  const Step& s = *find(step);
  std::vector<float> out;
  for (uint32_t v : covered) out.push_back(s.max[v]);
  return out;
}

std::vector<uint32_t> ScaleExchange::missing(int64_t step, std::span<const uint32_t> covered) const {
  check_covered(covered);
  std::vector<uint32_t> out;
  const Step* s = find(step);
  if (s == nullptr) return out;
  for (int r = 0; r < replicas_; ++r)
    for (uint32_t v : covered)
      if (!s->reported[r][v]) {
        out.push_back(static_cast<uint32_t>(r));
        break;
      }
  return out;
}

const ScaleExchange::Step* ScaleExchange::find(int64_t step) const {
  for (const Step& s : steps_)
    if (s.step == step) return &s;
  return nullptr;
}

ScaleExchange::Step* ScaleExchange::find(int64_t step) {
  return const_cast<Step*>(static_cast<const ScaleExchange*>(this)->find(step));
}

}  // namespace terngrad::comm::detail
