// Private to the trainer: where a cluster replica's step time goes, summed
// over the steps since the last log line: the main thread's time, split so
// that the parts add up to the step. push / wait / pull are time blocked on
// the network: while this replica's payloads are still leaving (push), then
// until the first sum arrives (wait: the other replicas and the ps), then
// while sums arrive (pull).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "terngrad/comm/step_times.h"
#include "terngrad/train/metrics.h"

namespace terngrad::train::detail {

struct StepClock {
  enum Part { kStep, kCompute, kEncode, kPush, kWait, kPull, kDecode, kApply };  // comm::kStepTimeNames' order
  std::array<double, comm::kStepTimeFields> s{};  // seconds
  int64_t steps = 0;

  // Blocked time [a, b] (seconds since the step began) to push, wait or pull.
  void blocked(double a, double b, double pushed, double first_sum) {
    const auto part = [&](double lo, double hi) { return std::max(0.0, std::min(b, hi) - std::max(a, lo)); };
    s[kPush] += part(0, pushed);
    s[kWait] += part(pushed, std::max(pushed, first_sum));
    s[kPull] += part(std::max(pushed, first_sum), 1e300);
  }
  void add(const StepClock& o) {
    for (size_t i = 0; i < s.size(); ++i) s[i] += o.s[i];
    steps += o.steps;
  }
  void add_ms(const std::vector<float>& ms) {
    for (size_t i = 0; i < s.size() && i < ms.size(); ++i) s[i] += ms[i] / 1e3;
    ++steps;
  }
  std::vector<float> ms() const {
    std::vector<float> out;
    for (double x : s) out.push_back(static_cast<float>(1e3 * x / std::max<int64_t>(1, steps)));
    return out;
  }
  // Per-step means over the interval: "<prefix><part>_ms".
  void add_to(JsonObject& o, const std::string& prefix) const {
    const std::vector<float> m = ms();
    for (size_t i = 0; i < m.size(); ++i) o.add(prefix + comm::kStepTimeNames[i] + "_ms", static_cast<double>(m[i]));
  }
};

}  // namespace terngrad::train::detail
