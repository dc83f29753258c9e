// The in-process trainer: N virtual workers in one process, each variable
// aggregated by its codec exactly as a parameter server would (session.h).
// A sync cluster runs the same five steps with a process per worker and the
// ps for step 4 (sync_loop.cpp).
#include "terngrad/train/trainer.h"

#include <omp.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <vector>

#include "in_process_run.h"
#include "auto_codec.h"
#include "plan_recheck.h"
#include "session.h"
#include "terngrad/train/metrics.h"
#include "terngrad/train/safetensors.h"

namespace terngrad::train {

namespace {

// body(i) for i in [0, n) on the OpenMP team. An exception cannot leave an
// OpenMP region (the process would terminate, as a diverged run's NaN
// gradient once made it): the first one is kept and rethrown once the team is
// done, naming the step and the stage.
template <class Body>
void parallel_for(int64_t n, int64_t step, const char* stage, Body&& body) {
  std::exception_ptr first;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < n; ++i) {
    try {
      body(i);
    } catch (...) {
#pragma omp critical(tg_trainer_first_error)
      if (!first) first = std::current_exception();
    }
  }
  if (!first) return;
  try {
    std::rethrow_exception(first);
  } catch (const std::exception& e) {
    throw std::runtime_error("step " + std::to_string(step) + ", " + stage + ": " + e.what());
  }
}

}  // namespace

namespace detail {

void log_eval(JsonlWriter* log, int64_t step, const TrainResult& r, bool quiet) {
  if (log) {
    JsonObject o;
    o.add("event", "eval").add("step", step).add("top1", r.top1).add("top5", r.top5).add("examples", r.eval_examples);
    if (r.ema_top1 >= 0) o.add("ema_top1", r.ema_top1).add("ema_top5", r.ema_top5);
    if (r.input_images > 0 || r.skipped_examples > 0)
      o.add("input_images", r.input_images).add("input_images_per_sec", r.input_images_per_sec)
          .add("input_wait_seconds", r.input_wait_seconds).add("skipped_examples", r.skipped_examples);
    log->write(o);
  }
  // Skipped examples show even with --quiet: they are data the run did not see.
  if (r.skipped_examples > 0)
    std::fprintf(stderr, "step %lld: %lld corrupt examples skipped and replaced so far\n",
                 static_cast<long long>(step), static_cast<long long>(r.skipped_examples));
  if (quiet) return;
  char ema[48] = "";
  if (r.ema_top1 >= 0) std::snprintf(ema, sizeof ema, " (EMA top-1 %.2f%%)", 100 * r.ema_top1);
  std::fprintf(stderr, "step %lld: test top-1 %.2f%% top-5 %.2f%%%s\n", static_cast<long long>(step), 100 * r.top1,
               100 * r.top5, ema);
  if (r.input_images > 0)
    std::fprintf(stderr, "step %lld: input %lld images, loaders' capacity %.1f images/s, steps waited %.2f s for data\n",
                 static_cast<long long>(step), static_cast<long long>(r.input_images), r.input_images_per_sec,
                 r.input_wait_seconds);
}

void export_model(TrainingSession& s, int64_t step) {
  const TrainConfig& cfg = s.cfg();
  if (cfg.train_dir.empty()) return;
  std::vector<std::pair<std::string, const Tensor*>> out;
  for (const Param& p : s.params().params) out.emplace_back(p.name, &p.value);
  // Batch norm's moving statistics: what inference with the exported net needs.
  for (const StateVar& v : s.model().state().vars) out.emplace_back(v.name, &v.value);
  export_safetensors(cfg.train_dir + "/model.safetensors", out, {{"net", cfg.net}, {"steps", std::to_string(step)}});
}

}  // namespace detail

namespace {

// The buffers of one in-process step and its five stages, each a method:
// what the workers send, what the server sums and what every worker pulls,
// as a ps would (every variable travels whole: the in-process view of one ps).
class InProcessStep {
 public:
  InProcessStep(detail::TrainingSession& s, int workers) : s_(s), N_(workers), V_(s.num_variables()) {
    allocate_payloads();
    allocate_presums();
    sum_ = s.make_grads();
    losses_.assign(N_, 0.0f);
    shared_.assign(V_, 0.0f);
    aggregates_.resize(V_);
  }

  double fp32_bytes_per_worker_step() const { return fp32_per_step_; }

  // The server's state per variable (server_ef() residuals), held by the
  // session so that its checkpoints carry it; other codecs keep none.
  void attach_server_states(int64_t start_step) {
    server_states_.assign(V_, nullptr);
    no_state_.assign(V_, {});
    for (size_t v = 0; v < V_; ++v)
      if (s_.codec(0, v).aggregate_keeps_state()) {
        const uint64_t n = s_.params().params[v].value.size();
        server_states_[v] = &s_.server_state(v, 0, n);
        if (start_step > 0 && server_states_[v]->empty())
          std::fprintf(stderr, "warning: variable %zu (%s): the checkpoint holds no server state; its server residual "
                       "starts at zero\n", v, s_.params().params[v].name.c_str());
      }
  }

  // 1. Every worker: batch, gradient (+ weight decay), local scales.
  double compute_gradients(int64_t step) {
    parallel_for(N_, step, "gradient", [&](int64_t w) { losses_[w] = s_.compute_gradient(static_cast<size_t>(w), step); });
    for (int w = 0; w < N_; ++w) s_.save_gradients(static_cast<size_t>(w), step);  // --save_gradients: codec studies
    double loss = 0;
    for (float l : losses_) loss += l;
    return loss / N_;
  }

  // 2. Scale sharing: the max over workers (what an all-reduce(max) gives).
  void share_scales() {
    for (size_t v = 0; v < V_; ++v) {
      shared_[v] = 0.0f;
      for (int w = 0; w < N_; ++w) shared_[v] = std::max(shared_[v], s_.local_scales(w)[v]);
    }
  }

  // 2b. Pre-rounds (multi-round codecs): every worker's vectors, summed in
  // worker order (what the ps's ExchangePresums gives a cluster).
  void run_presums(int64_t step) {
    for (uint32_t round = 0; round < rounds_; ++round) {
      parallel_for(N_, step, "pre-round", [&](int64_t w) {
        for (size_t v = 0; v < V_; ++v)
          if (round < s_.presum_rounds(v)) s_.presum_variable(static_cast<size_t>(w), step, v, round, presums_[round][w][v]);
      });
      for (size_t v = 0; v < V_; ++v) {
        if (round >= s_.presum_rounds(v)) continue;
        std::vector<float>& sum = s_.presum_sums(v)[round];
        std::fill(sum.begin(), sum.end(), 0.0f);
        for (int w = 0; w < N_; ++w)
          for (size_t i = 0; i < sum.size(); ++i) sum[i] += presums_[round][w][v][i];
      }
    }
  }

  // 3. Every worker encodes what it would push; returns the bytes all sent.
  uint64_t encode_all(int64_t step) {
    parallel_for(N_, step, "encode", [&](int64_t w) {
      s_.encode(static_cast<size_t>(w), step, shared_, slices_, outs_[w]);
      for (size_t v = 0; v < V_; ++v) used_[w][v] = s_.codec(w, v).encoded_size(payloads_[w][v], slices_[v][0].count);
    });
    uint64_t sent = 0;
    for (int w = 0; w < N_; ++w)
      for (size_t v = 0; v < V_; ++v) sent += used_[w][v];
    return sent;
  }

  // 4. The server's sum per variable, in worker order, of what every worker
  // sent, and what every worker pulls; returns the bytes a worker receives.
  double sum_on_server(int64_t step) {
    parallel_for(static_cast<int64_t>(V_), step, "server sum", [&](int64_t vi) {
      const size_t v = static_cast<size_t>(vi);
      std::vector<std::span<const uint8_t>> views;
      for (int w = 0; w < N_; ++w) views.push_back(std::span<const uint8_t>(payloads_[w][v]).first(used_[w][v]));
      const comm::GradientCodec& c = s_.codec(0, v);
      const uint64_t n = sum_[v].data.size();
      const comm::AggregateContext ctx{static_cast<uint32_t>(v), static_cast<uint32_t>(step), 0};
      c.aggregate_step(views, n, ctx, server_states_[v] ? *server_states_[v] : no_state_[v], aggregates_[v]);
      s_.decode_sum(step, v, n, aggregates_[v], sum_[v].data);
    });
    double recv = presum_bytes_;
    for (size_t v = 0; v < V_; ++v) recv += static_cast<double>(aggregates_[v].size());
    return recv;
  }

  // 5. The same averaged update on every worker's (identical) copy.
  void apply(int64_t step) { s_.apply(step, sum_, N_); }

  // What a worker sends per step besides its payloads (the pre-rounds, float32).
  double presum_bytes() const { return presum_bytes_; }

 private:
  // The payload buffers hold the codecs' capacity; what a worker sends is
  // the used part (a variable-size codec's varies with the values).
  void allocate_payloads() {
    slices_.resize(V_);
    payloads_.assign(N_, std::vector<std::vector<uint8_t>>(V_));
    outs_.assign(N_, std::vector<std::vector<std::span<uint8_t>>>(V_));
    used_.assign(N_, std::vector<size_t>(V_));
    for (size_t v = 0; v < V_; ++v) {
      const uint64_t n = s_.params().params[v].value.size();
      slices_[v] = {{0, n}};
      for (int w = 0; w < N_; ++w) {
        payloads_[w][v].resize(s_.codec(w, v).payload_bytes(n));
        outs_[w][v] = {payloads_[w][v]};
      }
      fp32_per_step_ += 4.0 * static_cast<double>(n);
    }
  }

  // Multi-round codecs: each worker's pre-round vectors, [round][worker][variable]
  // (empty for variables with fewer rounds); they travel as float32 both ways.
  void allocate_presums() {
    rounds_ = s_.max_presum_rounds();
    presums_.assign(rounds_, std::vector<std::vector<std::vector<float>>>(N_, std::vector<std::vector<float>>(V_)));
    for (uint32_t round = 0; round < rounds_; ++round)
      for (size_t v = 0; v < V_; ++v) {
        if (round >= s_.presum_rounds(v)) continue;
        const uint64_t k = s_.presum_floats(v, round);
        for (int w = 0; w < N_; ++w) presums_[round][w][v].resize(k);
        s_.presum_sums(v)[round].resize(k);
        presum_bytes_ += 4.0 * static_cast<double>(k);
      }
  }

  detail::TrainingSession& s_;
  const int N_;
  const size_t V_;
  std::vector<std::vector<comm::ElementRange>> slices_;
  std::vector<std::vector<std::vector<uint8_t>>> payloads_;               // [worker][variable]: capacity
  std::vector<std::vector<std::vector<std::span<uint8_t>>>> outs_;       // [worker][variable]: one slice each
  std::vector<std::vector<size_t>> used_;                                // [worker][variable]: bytes sent this step
  double fp32_per_step_ = 0;
  uint32_t rounds_ = 0;
  std::vector<std::vector<std::vector<std::vector<float>>>> presums_;  // [round][worker][variable]
  double presum_bytes_ = 0;
  std::vector<std::vector<uint8_t>*> server_states_;
  std::vector<std::vector<uint8_t>> no_state_;
  std::vector<std::vector<uint8_t>> aggregates_;
  GradSet sum_;
  std::vector<float> losses_, shared_;
};

}  // namespace

int64_t examples_per_global_step(const TrainConfig& cfg) {
  return cfg.batch_size * (cfg.sync_replicas ? cfg.num_nodes : 1);
}

TrainResult run_training(const TrainConfig& cfg_in) {
  using Clock = std::chrono::steady_clock;
  TrainConfig cfg = cfg_in;
  validate(cfg);
  if (cfg.comm_only)
    throw std::invalid_argument("--comm_only measures a cluster's communication: run it as tasks of a cluster (tg-cluster)");
  if (cfg.device == "gpu") return detail::run_training_gpu(cfg);
  if (cfg.threads > 0) omp_set_num_threads(cfg.threads);
  const auto t_start = Clock::now();

  const int N = cfg.num_nodes;
  std::vector<int> all(N);
  std::iota(all.begin(), all.end(), 0);
  detail::TrainingSession s(cfg, N, all);
  std::optional<comm::LinkModel> decided_with;
  const std::string codec_choice = detail::apply_auto_codec_in_process(cfg, s, N, &decided_with);  // --codec=auto
  // --auto_link_changes: the plan chosen again at checkpoints, as a cluster's chief does (plan_recheck.h).
  std::optional<detail::PlanRecheck> recheck = detail::plan_recheck(cfg, false, N, 1, decided_with, nullptr);
  std::optional<InProcessStep> in(std::in_place, s, N);
  const int64_t start_step = s.restore();
  in->attach_server_states(start_step);
  double recv_total = 0;
  uint64_t payload_total = 0;  // bytes every worker sent over the steps run (exact: integers)
  int64_t steps_sent = 0;
  detail::InProcessRun run(s, N, t_start);
  run.result().fp32_bytes_per_worker_step = in->fp32_bytes_per_worker_step();
  run.record_codec_choice(codec_choice);
  const detail::InProcessRun::Hooks hooks{[&s](TrainResult& r) { s.evaluate_into(r); }, nullptr};

  for (int64_t step = start_step; step < cfg.max_steps; ++step) {
    const double loss = in->compute_gradients(step);  // 1.
    in->share_scales();                                // 2.
    in->run_presums(step);                             // 2b.
    payload_total += in->encode_all(step);             // 3.
    ++steps_sent;
    const double recv = in->sum_on_server(step);       // 4.
    recv_total += recv;
    in->apply(step);                                   // 5.
    // Measured, not the capacity: the mean over workers and steps run.
    run.result().bytes_sent_per_worker_step =
        static_cast<double>(payload_total) / (static_cast<double>(N) * static_cast<double>(steps_sent)) +
        in->presum_bytes();
    // A new plan takes effect before this step's checkpoint, which holds it.
    if (recheck && recheck->due(step + 1))
      if (const std::optional<detail::AutoDecision> d = recheck->at(step + 1, s)) {
        detail::switch_plan(s, *d, step + 1);
        in.emplace(s, N);
        in->attach_server_states(0);  // fresh
        run.record_codec_rechoice(detail::rechoice_json(step + 1, *d, s));
      }
    run.after_step(step, loss, [recv](JsonObject& o) { o.add("bytes_recv_per_worker", recv); }, hooks);
  }
  run.result().bytes_recv_per_worker_step = run.steps_run() > 0 ? recv_total / run.steps_run() : 0;
  return run.finish(hooks);
}

}  // namespace terngrad::train
