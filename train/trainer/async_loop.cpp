// The asynchronous replica (--sync_replicas=false): the ps holds the weights
// and the optimizer's slots and applies each replica's gradient as it
// arrives. A replica pulls the current values, computes its gradient at them
// and pushes it, tagged with the global step it pulled.
#include <cmath>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "replica_loop.h"
#include "terngrad/base/timeline.h"

namespace terngrad::train::detail {

namespace {

class AsyncLoop final : public ReplicaLoop {
 public:
  explicit AsyncLoop(const Replica& r) : r_(r), cfg_(r.s.cfg()) {}

  // The chief seeds the ps with the session's state (initial or restored),
  // and a ps that restarts later with the same: the values it last pulled
  // (the session's weights) and the slots of its last checkpoint.
  int64_t join(int64_t restored) override {
    if (!r_.chief) return r_.client.join(restored, nullptr);
    r_.client.set_ps_refill([this] { return session_state(); });
    const comm::WorkerClient::InitTensors init = session_state();
    return r_.client.join(restored, &init);
  }

  int64_t train(int64_t first, ReplicaRun& run) override {
    std::vector<std::span<float>> values;  // the pulled values land in the session's weights
    for (Param& p : r_.s.params().params) values.push_back(p.value.data);
    // No step boundary to share a scale at: each push uses its own.
    const std::vector<float> no_scales(r_.s.num_variables(), 0.0f);
    int64_t global = first;
    int64_t last_saved = first;
    auto saves = [&](int64_t done) {
      return r_.chief && cfg_.save_interval_steps > 0 && done - last_saved >= cfg_.save_interval_steps &&
             done < cfg_.max_steps;
    };
    bool pull_started = false;  // the next pull left with this step's push
    for (;;) {
      // The values land shard by shard; the forward pass waits for the ones it reads.
      {
        const timeline::Span span("begin pull");
        global = pull_started ? r_.client.pulled_step() : r_.client.begin_pull(values, push_turns());
        pull_started = false;
      }
      if (global >= cfg_.max_steps) {
        r_.client.end_pull();
        if (r_.chief && r_.s.ema()) r_.s.ema()->update(r_.s.params(), global);
        break;
      }
      const float loss = gradient_out(global, no_scales);
      if (r_.chief && r_.s.ema()) r_.s.ema()->update(r_.s.params(), global);  // the pulled values, all landed
      // The next pull leaves now and is answered once the ps has applied this
      // push, unless this step's evaluation or checkpoint still reads the
      // values it was computed at (the next pull lands in the same tensors).
      const int64_t done = global + 1;
      if (r_.step.overlaps_communication() && !run.evaluation_due(done) && !saves(done)) {
        r_.client.start_pull(values, /*after_own_push=*/true, push_turns());
        pull_started = true;
      }
      // Dropped past the run's last step (another replica's push took it):
      // the next pull ends the loop, and this step is not counted.
      comm::WorkerClient::PushOutcome pushed;
      {
        const timeline::Span span("end push");
        pushed = r_.client.end_push();
      }
      if (pushed.past_end > 0) continue;

      run.after_step(done, loss, r_.s.lr(global));
      // The pulled values are the session's weights: evaluated as they are.
      if (run.evaluation_due(done)) run.evaluate(done);
      if (saves(done)) {
        last_saved = done;
        take_ps_state(done);
        r_.s.save(done);
      }
    }
    if (r_.chief) take_ps_state(global);
    return global;
  }

 private:
  // Pushes cross the ps's link in turn (push_turns.h): only where the pull
  // ends after the values are read, as the overlapped step ends it.
  bool push_turns() const { return cfg_.push_turns && r_.step.overlaps_communication(); }

  // The gradient at the values being pulled (each layer waits for its own),
  // each variable's payloads leaving as soon as the backward pass has
  // finished it, and a shard of a codec that encodes slices separately
  // (fp32) as soon as its elements are (one streamed push per ps, read whole
  // and applied on arrival by the ps, as a plain push).
  float gradient_out(int64_t global, const std::vector<float>& no_scales) {
    auto diverged = [&] { return std::runtime_error(r_.name + ": training diverged at global step " + std::to_string(global)); };
    r_.client.begin_push();
    std::vector<bool> pushed(r_.layout.shards.size(), false);
    auto separately = [&](size_t v) { return r_.s.codec(0, v).encodes_slices_separately(); };
    auto push = [&](float loss, size_t v, int64_t elements) {  // v's shards in [0, elements) not pushed yet
      if (!std::isfinite(loss)) throw diverged();  // before any of this gradient leaves
      auto send = [&](size_t sh) {
        const size_t one[1] = {sh};
        const std::span<const uint8_t> view[1] = {r_.wire.views[sh]};
        r_.client.push_payloads(loss, one, view);
      };
      if (separately(v)) return r_.step.encode_slices_within(global, v, elements, no_scales, r_.wire, pushed, send);
      r_.step.encode_into(global, v, no_scales, r_.wire);
      for (size_t sh : r_.layout.shards_of[v]) send(sh);
    };
    auto ready = [&](float loss, size_t v) { push(loss, v, std::numeric_limits<int64_t>::max()); };
    auto part_ready = [&](float loss, size_t v, int64_t elements) {
      if (separately(v)) push(loss, v, elements);
    };
    float loss = 0;
    if (r_.step.overlaps_communication()) {
      loss = r_.step.compute_gradient(
          global, ready,
          [&](size_t v, int64_t elements) {
            const timeline::Span span("wait for values", static_cast<int64_t>(v));
            r_.client.wait_values(v, static_cast<uint64_t>(elements));
          },
          part_ready);
      const timeline::Span span("end pull");
      r_.client.end_pull();
    } else {  // a step that takes the weights whole (the GPU's, --overlap_comm=false)
      r_.client.end_pull();
      r_.step.weights_from_session();
      loss = r_.step.compute_gradient(global, ready, {}, {});
    }
    if (!std::isfinite(loss)) throw diverged();
    return loss;
  }

  comm::WorkerClient::InitTensors session_state() {
    comm::WorkerClient::InitTensors init;
    for (const Param& p : r_.s.params().params) init.values.push_back(p.value.data);
    // Slots are named "<variable>/<slot>" ("conv1/weights/Momentum").
    for (auto& [name, tensor] : r_.s.optimizer().slots())
      init.slots[name.substr(name.rfind('/') + 1)].push_back(tensor->data);
    return init;
  }

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
