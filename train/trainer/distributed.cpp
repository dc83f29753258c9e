// The roles of a distributed run (distributed.h) on top of the step pieces
// of session.h and the service of comm/.
#include "terngrad/train/distributed.h"

#include <omp.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <thread>

#include "gpu_replica.h"
#include "optimizer_handler.h"
#include "replica_step.h"
#include "session.h"
#include "terngrad/comm/errors.h"
#include "terngrad/comm/ps_server.h"
#include "terngrad/comm/ps_status.h"
#include "terngrad/comm/step_times.h"
#include "terngrad/comm/worker_client.h"
#include "terngrad/train/checkpoint.h"
#include "terngrad/train/metrics.h"

namespace terngrad::train {

namespace {

using Clock = std::chrono::steady_clock;
using detail::OverlappedStep;
using detail::StepClock;
using detail::TrainingSession;
using detail::Wire;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string replica_name(const comm::ClusterSpec& c, int r) {
  const bool has_chief = !c.chief.empty();
  const std::string role = has_chief && r == 0 ? "chief" : "worker " + std::to_string(has_chief ? r - 1 : r);
  return role + " at " + c.replica_address(r).str();
}

int replicas_to_aggregate(const TrainConfig& cfg, int n) {
  if (cfg.replicas_to_aggregate == -1) return n;
  if (cfg.replicas_to_aggregate > n)
    throw std::invalid_argument("--replicas_to_aggregate=" + std::to_string(cfg.replicas_to_aggregate) +
                                " exceeds the cluster's " + std::to_string(n) + " replicas");
  return cfg.replicas_to_aggregate;
}

comm::Layout make_layout(TrainingSession& s, const TrainConfig& cfg, int num_ps) {
  std::vector<comm::VariableSpec> vars;
  for (const auto& v : s.variables()) vars.push_back({v.name, v.size, v.codec});
  comm::PlacementOptions o;
  o.min_shard_bytes = static_cast<uint64_t>(cfg.min_shard_bytes);
  o.max_shard_bytes = static_cast<uint64_t>(cfg.max_shard_bytes);
  o.strategy = comm::parse_placement_strategy(cfg.placement);
  return comm::place_variables(std::move(vars), num_ps, o);
}

// What every task of one run agrees on, derived from the flags and the cluster.
TrainConfig task_config(const TrainConfig& in, const comm::ClusterSpec& c) {
  TrainConfig cfg = in;
  cfg.num_nodes = c.num_replicas();
  if (!cfg.sync_replicas && cfg.share_scale) {
    // No step boundary to share a scale at: each push uses its own.
    cfg.share_scale = false;
  }
  if (cfg.comm_only && !cfg.sync_replicas)
    throw std::invalid_argument("--comm_only measures the sync communication cycle: it needs --sync_replicas=true");
  if (cfg.comm_only && cfg.device == "gpu") throw std::invalid_argument("--comm_only runs on the CPU (drop --device=gpu)");
  validate(cfg);
  return cfg;
}

TrainResult run_ps(const TrainConfig& cfg, const comm::ClusterSpec& c) {
  comm::ServerOptions o;
  o.task_index = c.task_index;
  for (int r = 0; r < c.num_replicas(); ++r) o.replica_names.push_back(replica_name(c, r));
  o.peer_timeout_s = cfg.peer_timeout_secs;
  o.startup_timeout_s = cfg.startup_timeout_secs;
  std::unique_ptr<detail::OptimizerHandler> handler;
  if (!cfg.sync_replicas) handler = std::make_unique<detail::OptimizerHandler>(cfg);
  comm::ParameterServer server(c.own_address().str(), o, handler.get());
  server.run();
  return {};
}

struct ChiefLog {
  std::unique_ptr<JsonlWriter> log;
  Progress progress;
  ChiefLog(const TrainConfig& cfg, bool chief)
      : progress(cfg.max_steps, cfg.batch_size * cfg.num_nodes, cfg.quiet || !chief) {
    if (chief && !cfg.train_dir.empty()) log = std::make_unique<JsonlWriter>(cfg.train_dir + "/metrics.jsonl", true);
  }
};

TrainResult run_replica(const TrainConfig& cfg, const comm::ClusterSpec& c) {
  const int replica = c.replica();
  const bool chief = replica == 0;
  const int n = c.num_replicas();
  const int needed = replicas_to_aggregate(cfg, n);
  const auto t_start = Clock::now();
  const bool on_gpu = cfg.device == "gpu";
  TrainConfig session_cfg = cfg;
  if (!chief) session_cfg.moving_average_decay = 0;  // only the chief evaluates and checkpoints
  TrainingSession s(session_cfg, n, {replica});
  const comm::Layout layout = make_layout(s, cfg, static_cast<int>(c.ps.size()));
  comm::ClientOptions co;
  co.rpc_timeout_s = cfg.rpc_timeout_secs;
  co.peer_timeout_s = cfg.peer_timeout_secs;
  comm::WorkerClient client(c.ps_addresses(), layout, replica, cfg.sync_replicas, n, needed, co);
  const std::string me = replica_name(c, replica);
  if (!cfg.quiet) std::fprintf(stderr, "%s: %s", me.c_str(), comm::describe_layout(layout).c_str());

  try {
    // --device=gpu: the step runs on the device; the session keeps the data,
    // schedule and host copies of the weights for evaluation and export.
    // Checkpoints are the CPU's: restored into the session, then uploaded.
    const int64_t restored = s.restore();
    std::unique_ptr<detail::GpuReplicaStep> gpu;
    if (on_gpu) {
      gpu = detail::make_gpu_replica_step(s);
      // Async: the pulled values are uploaded every step and the ps holds the rest.
      if (restored > 0 && cfg.sync_replicas) gpu->upload_state();
    }
    // A sync GPU replica updates its state on the device; an async one
    // computes gradients at pulled values and the ps holds the state.
    auto sync_gpu_state = [&] {
      if (gpu && cfg.sync_replicas) gpu->download_state();
    };
    int64_t global = 0;
    if (cfg.sync_replicas) {
      global = client.join(restored);
      if (global != restored)
        throw comm::PeerError(me + " restored step " + std::to_string(restored) + " from " +
                              (cfg.train_dir.empty() ? std::string("(no --train_dir)") : cfg.train_dir) +
                              " but the chief started at step " + std::to_string(global) +
                              ": every replica must see the chief's train_dir (same path, shared storage)");
    } else {
      comm::WorkerClient::InitTensors init;
      for (const Param& p : s.params().params) init.values.push_back(p.value.data);
      // Slots are named "<variable>/<slot>" ("conv1/weights/Momentum").
      for (auto& [name, tensor] : s.optimizer().slots())
        init.slots[name.substr(name.rfind('/') + 1)].push_back(tensor->data);
      global = client.join(restored, chief ? &init : nullptr);
    }

    Wire wire(s, layout);
    ChiefLog out(cfg, chief);
    TrainResult result;
    const size_t V = s.num_variables();
    GradSet sum = s.make_grads();
    std::vector<float> zeros(V, 0.0f);
    double fp32_bytes = 0;
    for (const Param& p : s.params().params) fp32_bytes += 4.0 * p.value.size();
    int64_t steps_run = 0;
    double loss = 0;
    const auto t_train = Clock::now();
    const comm::Traffic t0 = client.traffic();
    std::vector<std::span<float>> values;
    for (Param& p : s.params().params) values.push_back(p.value.data);

    StepClock clock;     // this replica, since the last log line
    StepClock replicas;  // the mean over replicas (from the ps), since the last log line
    auto log_step = [&](int64_t done, double lr) {
      out.progress.update(done, loss);
      if (!out.log || cfg.log_every_n_steps <= 0 || (done % cfg.log_every_n_steps != 0 && done != cfg.max_steps)) return;
      const comm::Traffic t = client.traffic();
      const double secs = since(t_train);
      JsonObject o;
      o.add("event", "train").add("step", done).add("loss", loss).add("learning_rate", lr)
          .add("examples_per_sec", secs > 0 ? steps_run * cfg.batch_size * (cfg.sync_replicas ? needed : 1) / secs : 0.0)
          .add("bytes_sent_per_worker", wire.payload_bytes)
          .add("bytes_recv_per_worker", steps_run ? (t.payload_received - t0.payload_received) / double(steps_run) : 0.0)
          .add("wire_bytes_sent_per_worker", steps_run ? (t.message_sent - t0.message_sent) / double(steps_run) : 0.0)
          .add("wire_bytes_recv_per_worker", steps_run ? (t.message_received - t0.message_received) / double(steps_run) : 0.0);
      if (clock.steps > 0) clock.add_to(o, "");
      if (replicas.steps > 0) replicas.add_to(o, "replicas_");
      clock = StepClock{};
      replicas = StepClock{};
      out.log->write(o);
    };
    // Async: the ps holds the trained values and the optimizer's slots.
    auto take_ps_state = [&](int64_t step) {
      const auto state = client.fetch_state();
      for (Param& p : s.params().params) p.value.data = state.at(p.name);
      for (auto& [name, slot] : s.optimizer().slots()) slot->data = state.at(name);
      s.optimizer().set_steps(step);
    };
    auto chief_duties = [&](int64_t done) {
      if (!chief) return;
      if (cfg.eval_interval_steps > 0 && !cfg.comm_only && done % cfg.eval_interval_steps == 0 && done < cfg.max_steps) {
        sync_gpu_state();
        s.evaluate_into(result);
        detail::log_eval(out.log.get(), done, result, cfg.quiet);
      }
    };

    if (cfg.sync_replicas) {
      bool wants_scales = false;
      for (size_t v = 0; v < V; ++v) wants_scales |= s.codec(0, v).wants_shared_scale();
      const bool overlap = cfg.overlap_comm && !gpu;
      OverlappedStep overlapped(s, client, layout, wire);
      for (int64_t step = global; step < cfg.max_steps; ++step) {
        const auto t_step = Clock::now();
        StepClock one;
        one.steps = 1;
        float my_loss = 0;
        comm::WorkerClient::Sums got;
        if (overlap) {
          try {
            const OverlappedStep::Outcome o = overlapped.run(step, sum, one);
            my_loss = o.loss;
            got = o.sums;
          } catch (const std::runtime_error& e) {
            if (dynamic_cast<const comm::PeerError*>(&e) || dynamic_cast<const comm::RunEnded*>(&e)) throw;
            throw std::runtime_error(me + ": " + e.what());
          }
        } else {
          my_loss = gpu ? gpu->compute_gradient(step) : cfg.comm_only ? s.fixed_gradient(0) : s.compute_gradient(0, step);
          if (cfg.comm_only) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(cfg.compute_ms));
          if (!std::isfinite(my_loss))
            throw std::runtime_error(me + ": training diverged at step " + std::to_string(step) + " (loss " +
                                     std::to_string(my_loss) + ")");
          one.s[StepClock::kCompute] += since(t_step);
          auto t = Clock::now();
          const std::vector<float>& mine = gpu ? gpu->local_scales() : s.local_scales(0);
          const std::vector<float> shared = wants_scales ? client.exchange_scales(step, mine) : zeros;
          one.s[StepClock::kWait] += since(t);
          t = Clock::now();
          if (gpu)
            gpu->encode(step, shared, wire.slices, wire.outs);
          else
            s.encode(0, step, shared, wire.slices, wire.outs);
          one.s[StepClock::kEncode] += since(t);
          t = Clock::now();
          const auto pushed = client.push(step, my_loss, wire.views);
          result.stale_pushes += pushed.stale;
          one.s[StepClock::kPush] += since(t);
          t = Clock::now();
          got = client.pull_sums(step, wire.sums);
          const double pulled = since(t);
          one.s[StepClock::kWait] += std::min(got.ready_s, pulled);
          one.s[StepClock::kPull] += pulled - std::min(got.ready_s, pulled);
          t = Clock::now();
          for (size_t v = 0; v < V && !gpu; ++v)
            for (size_t k = 0; k < layout.shards_of[v].size(); ++k) {
              const comm::ShardSpec& sh = layout.shards[layout.shards_of[v][k]];
              s.codec(0, v).decode_aggregate(wire.sums[layout.shards_of[v][k]],
                                             std::span<float>(sum[v].data).subspan(sh.begin, sh.count));
            }
          one.s[StepClock::kDecode] += since(t);
        }
        const auto t_apply = Clock::now();
        if (gpu) gpu->apply(step, layout, wire.sums, static_cast<int>(got.contributions));
        else s.apply(step, sum, static_cast<int>(got.contributions));
        one.s[StepClock::kApply] += since(t_apply);
        one.s[StepClock::kStep] = since(t_step);
        clock.add(one);
        if (got.replicas_reporting > 0) replicas.add_ms(got.replicas_step_ms);
        client.report_step_times(one.ms());  // travels with the next step's first push
        loss = got.mean_loss;
        ++steps_run;
        log_step(step + 1, s.lr(step));
        chief_duties(step + 1);
        if (chief && cfg.save_interval_steps > 0 && (step + 1) % cfg.save_interval_steps == 0 &&
            step + 1 < cfg.max_steps) {
          sync_gpu_state();
          s.save(step + 1);
        }
      }
      global = cfg.max_steps;
    } else {
      int64_t last_saved = global;
      for (;;) {
        global = client.pull_values(values);
        if (chief && s.ema()) s.ema()->update(s.params(), global);
        if (global >= cfg.max_steps) break;
        if (gpu) gpu->upload_params();
        const float my_loss = gpu ? gpu->compute_gradient(global) : s.compute_gradient(0, global);
        if (!std::isfinite(my_loss))
          throw std::runtime_error(me + ": training diverged at global step " + std::to_string(global));
        if (gpu)
          gpu->encode(global, zeros, wire.slices, wire.outs);
        else
          s.encode(0, global, zeros, wire.slices, wire.outs);
        client.push(global, my_loss, wire.views);
        loss = my_loss;
        ++steps_run;
        log_step(global + 1, s.lr(global));
        chief_duties(global + 1);
        if (chief && cfg.save_interval_steps > 0 && global + 1 - last_saved >= cfg.save_interval_steps &&
            global + 1 < cfg.max_steps) {
          last_saved = global + 1;
          take_ps_state(global + 1);
          s.save(global + 1);
        }
      }
      if (chief) take_ps_state(global);
    }
    out.progress.finish();
    const double train_secs = since(t_train);
    const comm::Traffic t = client.traffic();
    result.steps = global;
    result.examples = steps_run * cfg.batch_size;
    result.examples_per_sec = train_secs > 0 ? result.examples * (cfg.sync_replicas ? needed : 1) / train_secs : 0;
    result.final_loss = loss;
    result.fp32_bytes_per_worker_step = fp32_bytes;
    result.bytes_sent_per_worker_step = wire.payload_bytes;
    if (steps_run > 0) {
      result.bytes_recv_per_worker_step = static_cast<double>(t.payload_received - t0.payload_received) / steps_run;
      result.wire_bytes_sent_per_worker_step = static_cast<double>(t.message_sent - t0.message_sent) / steps_run;
      result.wire_bytes_recv_per_worker_step = static_cast<double>(t.message_received - t0.message_received) / steps_run;
    }
    result.codec_summary = detail::codec_summary(s.plan());
    if (chief) {
      int64_t stale = 0;
      for (const auto& a : c.ps_addresses())
        if (auto st = comm::query_ps_status(a, 5)) stale += static_cast<int64_t>(st->stale_pushes);
      result.stale_pushes = stale;
      if (!cfg.comm_only) {  // a fixed gradient trains nothing worth evaluating or keeping
        sync_gpu_state();
        s.evaluate_into(result);
        detail::log_eval(out.log.get(), global, result, cfg.quiet);
        s.save(global);
        detail::export_model(s, global);
      }
    }
    client.finish(true);
    result.wall_seconds = since(t_start);
    if (!cfg.quiet) std::fprintf(stderr, "%s: done after %lld steps\n", me.c_str(), static_cast<long long>(steps_run));
    return result;
  } catch (const comm::RunEnded& e) {
    if (chief) throw comm::PeerError(me + ": the run ended without the chief: " + e.what());
    if (!cfg.quiet) std::fprintf(stderr, "%s: %s; exiting\n", me.c_str(), e.what());
    client.finish(true);
    return {};
  } catch (const std::exception& e) {
    if (chief) client.finish(false, e.what());  // stop the others at once rather than after a timeout
    throw;
  }
}

TrainResult run_evaluator(const TrainConfig& cfg, const comm::ClusterSpec& c) {
  if (cfg.train_dir.empty()) throw std::invalid_argument("the evaluator needs --train_dir (the chief's checkpoints)");
  TrainingSession s(cfg, c.num_replicas(), {}, /*need_train_data=*/false);
  JsonlWriter log(cfg.train_dir + "/eval.jsonl", true);
  const std::string ps0 = c.ps_addresses().at(0);
  int64_t last = -1;
  auto last_contact = Clock::now();
  TrainResult result;
  for (;;) {
    const auto st = comm::query_ps_status(ps0, 2);
    if (st) {
      last_contact = Clock::now();
      if (!st->failure.empty()) throw comm::PeerError("evaluator: the run failed: " + st->failure);
    }
    std::optional<Checkpoint> ck;
    try {
      ck = load_latest_checkpoint(cfg.train_dir);
    } catch (const std::exception& e) {  // a checkpoint being replaced: look again
      if (!cfg.quiet) std::fprintf(stderr, "evaluator: %s; retrying\n", e.what());
    }
    if (ck && ck->step > last) {
      s.load_weights(*ck);
      s.evaluate_into(result);
      last = ck->step;
      result.steps = last;
      JsonObject o;
      o.add("event", "eval").add("step", last).add("top1", result.top1).add("top5", result.top5)
          .add("examples", result.eval_examples);
      if (result.ema_top1 >= 0) o.add("ema_top1", result.ema_top1).add("ema_top5", result.ema_top5);
      log.write(o);
      if (!cfg.quiet)
        std::fprintf(stderr, "evaluator: checkpoint %lld: top-1 %.2f%% top-5 %.2f%%\n", static_cast<long long>(last),
                     100 * result.top1, 100 * result.top5);
    }
    if (last >= cfg.max_steps) return result;
    if (!st && since(last_contact) > cfg.peer_timeout_secs)
      throw comm::PeerError("evaluator: ps 0 at " + ps0 + " unreachable for " +
                            std::to_string(static_cast<int>(since(last_contact))) +
                            " s and the final checkpoint (step " + std::to_string(cfg.max_steps) + ") never appeared in " +
                            cfg.train_dir);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

}  // namespace

std::optional<comm::ClusterSpec> cluster_of(const TrainConfig& cfg) {
  if (!cfg.job_name.empty())
    return comm::cluster_from_flags(cfg.job_name, cfg.task_id, cfg.ps_hosts, cfg.worker_hosts, cfg.chief_host,
                                    cfg.evaluator_host);
  const char* tf = std::getenv("TF_CONFIG");
  if (tf != nullptr && *tf != '\0') return comm::parse_tf_config(tf);
  return std::nullopt;
}

TrainResult run_task(const TrainConfig& cfg_in, const comm::ClusterSpec& c) {
  const TrainConfig cfg = task_config(cfg_in, c);
  // --device=gpu applies to the replicas (chief and workers); ps tasks and
  // the evaluator aggregate packed bytes and evaluate checkpoints on the CPU.
  // Async replicas pull float32 values (the ps holds the weights), upload
  // them and compute and encode their gradient on the device.
  if (cfg.num_gpus != 1)
    throw std::invalid_argument("--num_gpus=" + std::to_string(cfg.num_gpus) +
                                ": a cluster replica is one worker on one GPU (choose it with CUDA_VISIBLE_DEVICES); "
                                "--num_gpus spreads the in-process trainer's virtual workers");
  if (cfg.threads > 0) omp_set_num_threads(cfg.threads);
  switch (c.task_type) {
    case comm::TaskType::kPs: return run_ps(cfg, c);
    case comm::TaskType::kEvaluator: return run_evaluator(cfg, c);
    default: return run_replica(cfg, c);
  }
}

}  // namespace terngrad::train
