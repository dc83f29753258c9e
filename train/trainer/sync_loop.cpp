// The synchronous replica (--sync_replicas): the in-process trainer's step
// (trainer.cpp) with the replicas for its virtual workers and the ps for its
// sums. Every step each replica computes its gradient, the replicas share
// their scales, each encodes and pushes its payloads, the ps sums the first R
// to arrive, and every replica pulls and decodes the sums and applies the
// same average, so the replicas' weights stay identical.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "overlapped_step.h"
#include "replica_loop.h"
#include "server_states.h"
#include "terngrad/comm/errors.h"

namespace terngrad::train::detail {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

class SyncLoop final : public ReplicaLoop {
 public:
  explicit SyncLoop(const Replica& r) : r_(r), cfg_(r.s.cfg()), no_scales_(r.s.num_variables(), 0.0f) {
    for (size_t v = 0; v < r.s.num_variables(); ++v) wants_scales_ |= r.s.codec(0, v).wants_shared_scale();
    make_overlapped();
  }

  int64_t join(int64_t restored) override {
    if (restored > 0) r_.step.state_from_session();
    // The chief hands every ps the server states its checkpoint holds.
    comm::WorkerClient::InitTensors init;
    if (r_.chief && keeps_server_states(r_.s)) init.server_states = server_states_for_init(r_.s, r_.layout, restored);
    const int64_t global = r_.client.join(restored, r_.chief ? &init : nullptr);
    if (global == restored) {
      if (restored > 0)
        std::fprintf(stderr, "%s: the run is at this checkpoint's step %lld: nothing to catch up\n", r_.name.c_str(),
                     static_cast<long long>(restored));
      return global;
    }
    if (global > restored && global - restored <= cfg_.rejoin_window_steps && r_.s.max_presum_rounds() == 0) {
      catch_up(restored, global);
      return global;
    }
    throw comm::PeerError(
        r_.name + " restored step " + std::to_string(restored) + " from " +
        (cfg_.train_dir.empty() ? std::string("(no --train_dir)") : cfg_.train_dir) + " but the run is at step " +
        std::to_string(global) +
        ": every replica must see the chief's train_dir (same path, shared storage), and a replica that restarts "
        "cannot rejoin a sync run in progress (each keeps its own weights) unless the ps keeps the steps since that "
        "checkpoint (--rejoin_window_steps=" + std::to_string(cfg_.rejoin_window_steps) + ", " +
        std::to_string(global - restored) + " needed" +
        (r_.s.max_presum_rounds() > 0 ? "; not with a multi-round codec" : "") +
        "): restart every task, and they resume from the chief's latest checkpoint");
  }

  // A replica that restarted: it holds the chief's checkpoint of step
  // `from`, the run is at `to`. It runs those steps again: its gradient (the
  // same batch and randomness: both are functions of the step), the step's
  // shared scales and its encode (so its codecs' state, an error-feedback
  // residual, moves as it did; the payloads are not sent, the ps summed those
  // steps), then the step's kept sums pulled and applied. It then holds the
  // weights and state the live replicas hold at `to`, bit for bit.
  void catch_up(int64_t from, int64_t to) {
    const auto t0 = Clock::now();
    if (!cfg_.quiet)
      std::fprintf(stderr, "%s: catching up from step %lld to the run's step %lld\n", r_.name.c_str(),
                   static_cast<long long>(from), static_cast<long long>(to));
    for (int64_t step = from; step < to; ++step) {
      (void)r_.step.compute_gradient(step);
      const std::vector<float> shared =
          wants_scales_ ? r_.client.exchange_scales(step, r_.step.local_scales()) : no_scales_;
      r_.step.encode(step, shared, r_.wire);
      const comm::WorkerClient::Sums got = r_.client.pull_sums(step, r_.wire.sums);
      for (size_t sh = 0; sh < r_.layout.shards.size(); ++sh)
        r_.step.decode_sum(step, r_.layout.shards[sh], r_.wire.sums[sh]);
      r_.step.apply(step, static_cast<int>(got.contributions));
    }
    std::fprintf(stderr, "%s: caught up %lld steps in %.1f s; rejoining the run at step %lld\n", r_.name.c_str(),
                 static_cast<long long>(to - from), since(t0), static_cast<long long>(to));
  }

  int64_t train(int64_t first, ReplicaRun& run) override {
    for (int64_t step = first; step < cfg_.max_steps; ++step) {
      try {
        one_step(step, run);
      } catch (const comm::PsRestarted& e) {
        step = rewind(e.what(), step) - 1;  // the loop's ++ makes it the step rewound to
        if (new_plan_at_) return *new_plan_at_;
      } catch (const NewPlan& p) {
        new_plan_at_ = p.step;
        return p.step;
      }
    }
    if (r_.chief) r_.step.state_into_session();  // for the final evaluation, checkpoint and export
    return cfg_.max_steps;
  }

  std::optional<int64_t> new_plan_at() const override { return new_plan_at_; }

 private:
  // The chief's re-check chose a new plan after `step` steps (thrown out of
  // the step to train()).
  struct NewPlan {
    int64_t step;
  };

  // Multi-round codecs sum their pre-rounds over the replicas between the
  // gradient and the encoding (a barrier of the whole step): such a run
  // takes the sequential step. The overlapped step applies each variable as
  // its sums arrive when it knows how many payloads a sum holds: every
  // replica's (no backups).
  void make_overlapped() {
    const int all = cfg_.num_nodes;
    const int summed = cfg_.replicas_to_aggregate < 0 ? all : cfg_.replicas_to_aggregate;
    if (r_.step.overlaps_communication() && r_.s.max_presum_rounds() == 0)
      overlapped_.emplace(r_.s, r_.step, r_.client, r_.layout, r_.wire, wants_scales_, summed == all ? all : 0);
  }

  // Steps 1-5 of one step and what follows its update.
  void one_step(int64_t step, ReplicaRun& run) {
    const auto t_step = Clock::now();
    StepClock one;
    one.steps = 1;
    if (overlapped_) {
      // 1.-4. overlapped: this step's gradient out, the last step's sums
      // in and applied as the forward pass needs them (overlapped_step.h).
      // Evaluations, checkpoints and the end read the weights: there the
      // step's update is finished at once.
      for (const OverlappedStep::Finished& done : overlapped_step(step, one, needs_weights_after(step + 1, run)))
        after_update(done.step, done.sums, run);
    } else {
      // 1.-4. This replica's gradient out, the replicas' sums in, decoded.
      const comm::WorkerClient::Sums got = sequential_step(step, one, run);
      // 5. The same averaged update on every replica.
      const auto t_apply = Clock::now();
      r_.step.apply(step, static_cast<int>(got.contributions));
      one.s[StepClock::kApply] += since(t_apply);
      after_update(step, got, run);
    }
    one.s[StepClock::kStep] = since(t_step);
    run.clock().add(one);
    r_.client.report_step_times(one.ms());  // travels with the next step's first push
  }

  // A ps restarted (comm::PsRestarted): its step's pushes and sums are gone,
  // and the replicas may stand on either side of that step. Every replica
  // goes back to the chief's latest checkpoint (the chief rewinds every ps
  // to its step) and computes the steps since again: each is a function of
  // its step (batch, randomness, the same sums), so the run ends with the
  // weights of an unfaulted run. Returns the step to go on from.
  int64_t rewind(const std::string& why, int64_t was_at) {
    const auto t0 = Clock::now();
    std::fprintf(stderr, "%s: %s; going back to the chief's latest checkpoint\n", r_.name.c_str(), why.c_str());
    overlapped_.reset();  // its pending step is abandoned (the client's, in the rewind calls)
    int64_t at = 0;
    if (r_.chief) {
      const int64_t saved = r_.s.restore_for_rewind();
      if (saved == 0)
        throw comm::PeerError(r_.name + ": " + why + ", before this chief's first checkpoint: there is no step to " +
                              "rewind the run to (--save_interval_steps); restart every task");
      comm::WorkerClient::InitTensors init;
      if (keeps_server_states(r_.s)) init.server_states = server_states_for_init(r_.s, r_.layout, saved);
      at = r_.client.rewind_run(saved, &init);
    } else {
      // A rewind that brings a new --codec=auto plan: this replica is built
      // again with it (distributed.cpp); its client cannot register with
      // the old layout.
      if (r_.rewound_to_new_plan)
        if (const std::optional<int64_t> planned = r_.rewound_to_new_plan()) {
          new_plan_at_ = planned;
          std::fprintf(stderr, "%s: the chief chose new codecs from step %lld on\n", r_.name.c_str(),
                       static_cast<long long>(*planned));
          return *planned;
        }
      at = r_.client.rejoin_rewound_run();
      r_.s.restore_at(at);
    }
    r_.step.state_from_session();
    make_overlapped();
    std::fprintf(stderr, "%s: rewound from step %lld to %lld in %.1f s; the steps since are computed again\n",
                 r_.name.c_str(), static_cast<long long>(was_at), static_cast<long long>(at), since(t0));
    return at;
  }

  // Whether anything reads the weights after `done` steps (so an overlapped
  // step's update cannot wait for the next forward pass).
  bool needs_weights_after(int64_t done, const ReplicaRun& run) const {
    return done >= cfg_.max_steps || (cfg_.save_interval_steps > 0 && done % cfg_.save_interval_steps == 0) ||
           run.evaluation_due(done);
  }

  // Step `step` is applied: progress, evaluation and checkpoints after it.
  void after_update(int64_t step, const comm::WorkerClient::Sums& got, ReplicaRun& run) {
    if (got.replicas_reporting > 0) run.replicas().add_ms(got.replicas_step_ms);
    const int64_t done = step + 1;
    run.after_step(done, got.mean_loss, r_.s.lr(step));
    // Evaluation and checkpoints read the session's state.
    if (run.evaluation_due(done)) {
      r_.step.state_into_session();
      run.evaluate(done);
    }
    if (cfg_.save_interval_steps > 0 && done % cfg_.save_interval_steps == 0 && done < cfg_.max_steps) {
      if (r_.chief) {
        r_.step.state_into_session();
        // --codec=auto, the link moved: the new plan's checkpoint (no
        // residuals) is where every replica goes on from (plan_recheck.h).
        if (r_.recheck && r_.recheck->due(done))
          if (const std::optional<AutoDecision> d = r_.recheck->at(done, r_.s)) {
            switch_plan(r_.s, *d, done);
            r_.s.save(done);
            run.record_codec_rechoice(rechoice_json(done, *d, r_.s));
            throw NewPlan{done};
          }
        if (keeps_server_states(r_.s)) fetch_server_states(r_.s, r_.client, step);
        r_.s.save(done);
      } else {
        r_.s.save_codec_states(done);  // what the chief's checkpoint at this step does not hold
      }
    }
  }

  // Steps 1-4 one after another (--overlap_comm=false, or a step that cannot
  // overlap), each timed as a whole.
  comm::WorkerClient::Sums sequential_step(int64_t step, StepClock& one, ReplicaRun& run) {
    const auto t_step = Clock::now();
    // 1. Batch, gradient (+ weight decay), local scales.
    const float loss = r_.step.compute_gradient(step);
    if (!std::isfinite(loss))
      throw std::runtime_error(r_.name + ": training diverged at step " + std::to_string(step) + " (loss " +
                               std::to_string(loss) + ")");
    one.s[StepClock::kCompute] += since(t_step);
    // 2. Scale sharing: the max over replicas.
    auto t = Clock::now();
    const std::vector<float> shared =
        wants_scales_ ? r_.client.exchange_scales(step, r_.step.local_scales()) : no_scales_;
    one.s[StepClock::kWait] += since(t);
    // 2b. Pre-rounds of multi-round codecs: this replica's vectors, summed
    // over the replicas on ps 0 (in replica order, as the in-process trainer
    // sums its workers), into the session for encode and decode.
    for (uint32_t round = 0; round < r_.s.max_presum_rounds(); ++round) {
      t = Clock::now();
      std::vector<uint32_t> vars;
      std::vector<float> values;
      for (size_t v = 0; v < r_.s.num_variables(); ++v) {
        if (round >= r_.s.presum_rounds(v)) continue;
        std::vector<float>& buf = r_.s.presum_sums(v)[round];
        buf.resize(r_.s.presum_floats(v, round));
        r_.step.presum_variable(step, v, round, buf);
        vars.push_back(static_cast<uint32_t>(v));
        values.insert(values.end(), buf.begin(), buf.end());
      }
      one.s[StepClock::kEncode] += since(t);
      t = Clock::now();
      const std::vector<float> sums = r_.client.exchange_presums(step, round, vars, values);
      one.s[StepClock::kWait] += since(t);
      size_t at = 0;
      for (uint32_t v : vars) {
        std::vector<float>& sum = r_.s.presum_sums(v)[round];
        std::copy(sums.begin() + static_cast<std::ptrdiff_t>(at), sums.begin() + static_cast<std::ptrdiff_t>(at + sum.size()),
                  sum.begin());
        at += sum.size();
      }
    }
    // 3. Encode what to push.
    t = Clock::now();
    r_.step.encode(step, shared, r_.wire);
    one.s[StepClock::kEncode] += since(t);
    // 4. Push; the ps sums each shard of the first R replicas; pull the sums.
    t = Clock::now();
    run.result().stale_pushes += r_.client.push(step, loss, r_.wire.views).stale;
    one.s[StepClock::kPush] += since(t);
    t = Clock::now();
    const comm::WorkerClient::Sums got = r_.client.pull_sums(step, r_.wire.sums);
    const double pulled = since(t);
    one.s[StepClock::kWait] += std::min(got.ready_s, pulled);
    one.s[StepClock::kPull] += pulled - std::min(got.ready_s, pulled);
    t = Clock::now();
    for (size_t sh = 0; sh < r_.layout.shards.size(); ++sh)
      r_.step.decode_sum(step, r_.layout.shards[sh], r_.wire.sums[sh]);
    one.s[StepClock::kDecode] += since(t);
    return got;
  }

  // Steps 1-4 overlapped with one another and the next step
  // (overlapped_step.h); returns the steps it applied, in order: the one
  // before (its update finished in this step's forward pass) and, with
  // finish_now, this one.
  std::vector<OverlappedStep::Finished> overlapped_step(int64_t step, StepClock& one, bool finish_now) {
    try {
      std::vector<OverlappedStep::Finished> applied;
      if (std::optional<OverlappedStep::Finished> before = overlapped_->run(step, one)) applied.push_back(*before);
      if (finish_now) applied.push_back(overlapped_->finish(one));
      return applied;
    } catch (const std::runtime_error& e) {
      // Errors of the step itself (from either of its threads) name the
      // replica; the run's end and a peer's failure pass as they are.
      if (dynamic_cast<const comm::PeerError*>(&e) || dynamic_cast<const comm::RunEnded*>(&e)) throw;
      throw std::runtime_error(r_.name + ": " + e.what());
    }
  }

  const Replica r_;
  const TrainConfig& cfg_;
  const std::vector<float> no_scales_;  // for codecs without scale sharing
  bool wants_scales_ = false;           // some variable's codec shares scales
  std::optional<OverlappedStep> overlapped_;
  std::optional<int64_t> new_plan_at_;
};

}  // namespace

std::unique_ptr<ReplicaLoop> make_sync_loop(const Replica& r) { return std::make_unique<SyncLoop>(r); }

}  // namespace terngrad::train::detail
