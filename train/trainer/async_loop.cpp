// The asynchronous replica (--sync_replicas=false): the ps holds the weights
// and the optimizer's slots and applies each replica's gradient as it
// arrives. A replica pulls the current values, computes its gradient at them
// and pushes it, tagged with the global step it pulled.
#include <cmath>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "replica_loop.h"

namespace terngrad::train::detail {

namespace {

class AsyncLoop final : public ReplicaLoop {
 public:
  explicit AsyncLoop(const Replica& r) : r_(r), cfg_(r.s.cfg()) {}

  // The chief seeds the ps with the session's state (initial or restored).
  int64_t join(int64_t restored) override {
    comm::WorkerClient::InitTensors init;
    for (const Param& p : r_.s.params().params) init.values.push_back(p.value.data);
    // Slots are named "<variable>/<slot>" ("conv1/weights/Momentum").
    for (auto& [name, tensor] : r_.s.optimizer().slots())
      init.slots[name.substr(name.rfind('/') + 1)].push_back(tensor->data);
    return r_.client.join(restored, r_.chief ? &init : nullptr);
  }

  int64_t train(int64_t first, ReplicaRun& run) override {
    std::vector<std::span<float>> values;  // the pulled values land in the session's weights
    for (Param& p : r_.s.params().params) values.push_back(p.value.data);
    // No step boundary to share a scale at: each push uses its own.
    const std::vector<float> no_scales(r_.s.num_variables(), 0.0f);
    int64_t global = first;
    int64_t last_saved = first;
    for (;;) {
      global = r_.client.pull_values(values);
      if (r_.chief && r_.s.ema()) r_.s.ema()->update(r_.s.params(), global);
      if (global >= cfg_.max_steps) break;
      r_.step.weights_from_session();
      const float loss = r_.step.compute_gradient(global);
      if (!std::isfinite(loss))
        throw std::runtime_error(r_.name + ": training diverged at global step " + std::to_string(global));
      r_.step.encode(global, no_scales, r_.wire);
      // Dropped past the run's last step (another replica's push took it):
      // the next pull ends the loop, and this step is not counted.
      if (r_.client.push(global, loss, r_.wire.views).past_end > 0) continue;

      const int64_t done = global + 1;
      run.after_step(done, loss, r_.s.lr(global));
      // The pulled values are the session's weights: evaluated as they are.
      if (run.evaluation_due(done)) run.evaluate(done);
      if (r_.chief && cfg_.save_interval_steps > 0 && done - last_saved >= cfg_.save_interval_steps &&
          done < cfg_.max_steps) {
        last_saved = done;
        take_ps_state(done);
        r_.s.save(done);
      }
    }
    if (r_.chief) take_ps_state(global);
    return global;
  }

 private:
  // The trained values and the optimizer's slots from the ps, into the session.
  void take_ps_state(int64_t step) {
    const auto state = r_.client.fetch_state();
    for (Param& p : r_.s.params().params) p.value.data = state.at(p.name);
    for (auto& [name, slot] : r_.s.optimizer().slots()) slot->data = state.at(name);
    r_.s.optimizer().set_steps(step);
  }

  const Replica r_;
  const TrainConfig& cfg_;
};

}  // namespace

std::unique_ptr<ReplicaLoop> make_async_loop(const Replica& r) { return std::make_unique<AsyncLoop>(r); }

}  // namespace terngrad::train::detail
