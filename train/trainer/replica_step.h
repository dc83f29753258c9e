// Private to the trainer: a distributed replica's step pieces shared by its
// two sync loops (distributed.cpp): the payload buffers it sends and the
// sums it receives (Wire), where its step time goes (StepClock), and the
// overlapped step (OverlappedStep, --overlap_comm on the CPU).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "session.h"
#include "terngrad/comm/placement.h"
#include "terngrad/comm/step_times.h"
#include "terngrad/comm/worker_client.h"
#include "terngrad/train/metrics.h"

namespace terngrad::train::detail {

// Per-shard payload buffers of one replica, and the sums it pulls.
struct Wire {
  std::vector<std::vector<comm::ElementRange>> slices;       // [variable]
  std::vector<std::vector<uint8_t>> payloads;                // [shard]
  std::vector<std::vector<std::span<uint8_t>>> outs;         // [variable][slice]
  std::vector<std::span<const uint8_t>> views;               // [shard]
  std::vector<std::vector<uint8_t>> sums;                    // [shard]
  double payload_bytes = 0;

  Wire(TrainingSession& s, const comm::Layout& l) : slices(l.variables.size()), payloads(l.shards.size()),
                                                    outs(l.variables.size()) {
    for (size_t v = 0; v < l.variables.size(); ++v) {
      for (size_t sh : l.shards_of[v]) {
        slices[v].push_back({l.shards[sh].begin, l.shards[sh].count});
        payloads[sh].resize(s.codec(0, v).payload_bytes(l.shards[sh].count));
        payload_bytes += static_cast<double>(payloads[sh].size());
      }
      for (size_t sh : l.shards_of[v]) outs[v].emplace_back(payloads[sh]);
    }
    views.assign(payloads.begin(), payloads.end());
  }
};

// Where a replica's step time goes, summed over the steps since the last log
// line: the main thread's time, split so that the parts add up to the step.
// push / wait / pull are time blocked on the network: while this replica's
// payloads are still leaving (push), then until the first sum arrives
// (wait: the other replicas and the ps), then while sums arrive (pull).
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

// One sync step of a CPU replica with communication overlapped: each
// variable's payloads are queued for the ps as soon as the backward pass has
// finished it (in buckets of about kBucketBytes), the ps sums each shard once
// every replica delivered it, and the sums are decoded into `sum` as they
// arrive. Codecs that share scales exchange each layer's scales on a second
// thread, then encode and queue it there, so the backward pass does not wait.
// The arithmetic is that of encode() + push() + pull_sums() (the
// distributed bit-equality tests run both).
class OverlappedStep {
 public:
  OverlappedStep(TrainingSession& s, comm::WorkerClient& client, const comm::Layout& layout, Wire& wire);

  struct Outcome {
    float loss = 0;               // this replica's
    comm::WorkerClient::Sums sums;  // the step's sums' header
  };
  // compute_ms > 0 or comm_only: fixed_gradient() after that much sleep.
  Outcome run(int64_t step, GradSet& sum, StepClock& clock);

  static constexpr size_t kBucketBytes = size_t{256} << 10;

 private:
  void queue_variable(float loss, size_t v);
  void flush(float loss);

  TrainingSession& s_;
  comm::WorkerClient& client_;
  const comm::Layout& layout_;
  Wire& wire_;
  bool wants_scales_ = false;
  std::vector<size_t> bucket_;
  std::vector<std::span<const uint8_t>> bucket_views_;
  size_t bucket_bytes_ = 0;
};

}  // namespace terngrad::train::detail
