// Private to ps_load_bench: the async phase's update rule on the ps, plain
// SGD (values -= lr * grad). The load test measures the ps's memory and
// liveness, not training, so the cheapest rule with no optimizer slots will
// do; tg-train plugs its real optimizers in the same way.
#pragma once

#include <span>
#include <string>
#include <utility>
#include <vector>

#include "terngrad/comm/ps_server.h"

namespace terngrad::bench {

class SgdHandler final : public comm::UpdateHandler {
 public:
  explicit SgdHandler(float learning_rate) : lr_(learning_rate) {}
  void init_shard(size_t, const comm::ShardView&) override {}
  void apply(size_t, int64_t, std::span<float> values, std::span<const float> grad) override {
    for (size_t i = 0; i < values.size(); ++i) values[i] -= lr_ * grad[i];
  }
  std::vector<std::pair<std::string, std::span<float>>> slots(size_t) override { return {}; }

 private:
  float lr_;
};

}  // namespace terngrad::bench
