// The roles of a distributed run (distributed.h) on top of the service of
// comm/: the ps, the evaluator and the replica, which trains in its loop
// (replica_loop.h) with its step on the device it runs on (replica_step.h).
#include "terngrad/train/distributed.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <set>
#include <stdexcept>
#include <thread>

#include "auto_codec.h"
#include "plan_recheck.h"
#include "optimizer_handler.h"
#include "replica_loop.h"
#include "session.h"
#include "terngrad/comm/comm_threads.h"
#include "terngrad/comm/credentials.h"
#include "terngrad/comm/errors.h"
#include "terngrad/comm/ps_server.h"
#include "terngrad/comm/ps_status.h"
#include "terngrad/comm/worker_client.h"
#include "terngrad/train/checkpoint.h"
#include "terngrad/train/metrics.h"

namespace terngrad::train {

namespace {

using Clock = std::chrono::steady_clock;
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
  for (const auto& v : s.variables())
    vars.push_back({v.name, v.size, v.codec, comm::make_codec(v.codec)->slices_whole_variable_only()});
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

// Who this task is to the ps tasks: the secret it was given (--secret_file,
// else TG_CLUSTER_SECRET; none: an unauthenticated run) and its TLS files.
std::optional<comm::SecretMaterial> secret_of(const TrainConfig& cfg) {
  return comm::secret_from_flag_or_environment(cfg.secret_file);
}
std::string secret_source(const TrainConfig& cfg) {
  return cfg.secret_file.empty() ? std::string("TG_CLUSTER_SECRET") : "secret file " + cfg.secret_file;
}
comm::TlsOptions tls_of(const TrainConfig& cfg) {
  comm::TlsOptions t;
  t.ca_file = cfg.tls_ca;
  t.cert_file = cfg.tls_cert;
  t.key_file = cfg.tls_key;
  t.verify_clients = cfg.tls_verify_clients;
  t.server_name = cfg.tls_server_name;
  return t;
}
// A replica's or the evaluator's credential (nullopt when the run has no secret).
std::optional<comm::Credential> credential_of(const TrainConfig& cfg, const comm::Role& role) {
  const std::optional<comm::SecretMaterial> secret = secret_of(cfg);
  if (!secret) return std::nullopt;
  return secret->credential_for(role, secret_source(cfg));
}

TrainResult run_ps(const TrainConfig& cfg, const comm::ClusterSpec& c) {
  comm::ServerOptions o;
  if (const std::optional<comm::SecretMaterial> secret = secret_of(cfg)) {
    if (!secret->cluster)
      throw std::invalid_argument(secret_source(cfg) + " holds " + secret->role_key->role.name() +
                                  "'s key; a ps needs the run's cluster secret");
    o.secret = secret->cluster;
  }
  o.tls = tls_of(cfg);
  o.task_index = c.task_index;
  for (int r = 0; r < c.num_replicas(); ++r) o.replica_names.push_back(replica_name(c, r));
  o.peer_timeout_s = cfg.peer_timeout_secs;
  o.startup_timeout_s = cfg.startup_timeout_secs;
  // A restarted replica catches up through the kept steps (sync_loop.cpp).
  o.keep_steps = static_cast<int>(std::max<int64_t>(o.keep_steps, cfg.rejoin_window_steps + 2));
  o.keep_pulled_steps = cfg.rejoin_window_steps > 0;
  o.push_lead_bytes = static_cast<uint64_t>(cfg.push_lead_bytes);
  std::unique_ptr<detail::OptimizerHandler> handler;
  if (!cfg.sync_replicas) handler = std::make_unique<detail::OptimizerHandler>(cfg);
  comm::ParameterServer server(c.own_address().str(), o, handler.get());
  server.run();
  return {};
}

// A replica other than the chief, its calls rewound: waits (within
// --ps_rejoin_window_secs) until every ps took a rewind past `epoch`, and
// returns the step it went back to when it brought a plan other than the
// session's (a new --codec=auto choice: plan_recheck.h).
std::optional<int64_t> rewound_to_new_plan(const TrainConfig& cfg, const TrainingSession& s,
                                           const std::vector<std::string>& ps, uint64_t epoch,
                                           const std::optional<comm::Credential>& credential,
                                           const comm::TlsOptions& tls) {
  const auto t0 = Clock::now();
  for (;;) {
    std::vector<std::optional<comm::PsStatus>> st(ps.size());
    for (size_t p = 0; p < ps.size(); ++p) st[p] = comm::query_ps_status(ps[p], 2, credential, tls);
    const bool all = std::all_of(st.begin(), st.end(), [&](const std::optional<comm::PsStatus>& x) {
      return x && x->phase == "running" && x->run_epoch > epoch && x->run_epoch == st[0]->run_epoch;
    });
    if (all) {
      const std::vector<std::string>& plan = s.plan();
      bool same = st[0]->variables.size() == plan.size();
      for (size_t v = 0; same && v < plan.size(); ++v) same = st[0]->variables[v].second == plan[v];
      if (same) return std::nullopt;
      return st[0]->global_step;
    }
    // Not all there yet, or a ps failed: the ordinary rejoin waits and
    // names what it found.
    if (since(t0) > cfg.ps_rejoin_window_secs ||
        std::any_of(st.begin(), st.end(), [](const auto& x) { return x && x->phase == "failed"; }))
      return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

TrainResult run_replica(const TrainConfig& cfg, const comm::ClusterSpec& c) {
  const int replica = c.replica();
  const bool chief = replica == 0;
  const int n = c.num_replicas();
  const int needed = replicas_to_aggregate(cfg, n);
  const auto t_start = Clock::now();
  TrainConfig session_cfg = cfg;
  if (!chief) session_cfg.moving_average_decay = 0;  // only the chief evaluates and checkpoints
  TrainingSession s(session_cfg, n, {replica});
  const std::optional<comm::Credential> credential =
      credential_of(cfg, comm::Role::replica_role(static_cast<uint32_t>(replica)));
  const comm::TlsOptions tls = tls_of(cfg);
  const std::vector<std::string> ps = c.ps_addresses();
  std::optional<comm::LinkModel> decided_with;
  const std::string codec_choice =  // --codec=auto: the chief decides, the others adopt its plan
      detail::apply_auto_codec_in_cluster(cfg, s, chief, n, ps, credential, tls, &decided_with);
  if (!cfg.sync_replicas && s.max_presum_rounds() > 0)
    throw std::invalid_argument("--codec=" + cfg.codec + " sums pre-rounds over the replicas of each step (a "
                                "multi-round codec), which only a sync run has: use --sync_replicas=true");
  // --codec=auto choosing again when the link moves (plan_recheck.h).
  std::optional<detail::PlanRecheck> recheck =
      detail::plan_recheck(cfg, true, n, static_cast<int>(ps.size()), decided_with, [&](std::string* source) {
        return detail::probe_ps_links(cfg, ps, credential, tls, source);
      });
  const bool follows_new_plans = !chief && recheck.has_value();
  if (!chief) recheck.reset();  // the chief re-checks; the others follow its rewinds
  comm::ClientOptions co;
  co.rpc_timeout_s = cfg.rpc_timeout_secs;
  co.peer_timeout_s = cfg.peer_timeout_secs;
  co.credential = credential;
  co.tls = tls;
  co.startup_timeout_s = cfg.startup_timeout_secs;  // a ps may come up after its replicas
  if (!cfg.sync_replicas) co.last_step = cfg.max_steps;  // async: the ps applies exactly max_steps
  // The steps the chief checkpoints after (sync_loop.cpp's after_update),
  // whose server states the ps keeps aside; sent in sync runs only
  // (worker_join.cpp). The flags refused a negative interval.
  co.checkpoint_interval_steps = cfg.save_interval_steps;
  // A ps that restarts: async, refilled from the chief's values; sync, the
  // run rewound to the chief's latest checkpoint (which it needs).
  if (!cfg.sync_replicas || (!cfg.train_dir.empty() && cfg.save_interval_steps > 0))
    co.ps_rejoin_window_s = cfg.ps_rejoin_window_secs;
  const std::string me = replica_name(c, replica);
  std::optional<detail::ReplicaRun> run;
  std::optional<int64_t> restored;  // the step the session holds
  // Communication threads are started by a thread that keeps this priority,
  // also those started after this thread's is lowered (below).
  comm::start_comm_thread_spawner();
  bool lowered = false;
  // The replica is built again, from the checkpoint of that step, each time
  // the run switches to a new --codec=auto plan (plan_recheck.h).
  for (;;) {
    const comm::Layout layout = make_layout(s, cfg, static_cast<int>(ps.size()));
    // Before the client: its threads read the payloads and write the sums in
    // the wire until it is destroyed, also when the step below throws.
    Wire wire(s, layout);
    comm::WorkerClient client(ps, layout, replica, cfg.sync_replicas, n, needed, co);
    if (!cfg.quiet) std::fprintf(stderr, "%s: %s", me.c_str(), comm::describe_layout(layout).c_str());
    try {
      // Checkpoints are the session's, whichever device the step runs on.
      if (!restored) restored = s.restore();
      // The device, chosen once: the loops below have no device branches.
      const std::unique_ptr<detail::ReplicaStep> step = detail::make_replica_step(s);
      detail::Replica r{s, *step, client, layout, wire, me, chief};
      r.recheck = recheck ? &*recheck : nullptr;
      if (follows_new_plans)
        r.rewound_to_new_plan = [&] { return rewound_to_new_plan(cfg, s, ps, client.run_epoch(), credential, tls); };
      const std::unique_ptr<detail::ReplicaLoop> loop =
          cfg.sync_replicas ? detail::make_sync_loop(r) : detail::make_async_loop(r);
      const int64_t first = loop->join(*restored);
      if (!run) {
        run.emplace(s, client, wire, chief, first);
        run->record_codec_choice(codec_choice);
      } else {
        run->switch_client(client, wire);
      }
      if (!lowered && cfg.device == "cpu") {  // once gRPC runs and the replica joined
        lowered = true;
        const std::string why = comm::lower_this_thread_priority(cfg.compute_nice);
        if (!why.empty() && !cfg.quiet)
          std::fprintf(stderr, "%s: --compute_nice=%d not applied (%s)\n", me.c_str(), cfg.compute_nice, why.c_str());
      }
      const int64_t last = loop->train(first, *run);
      if (const std::optional<int64_t> at = loop->new_plan_at()) {
        if (chief) {
          // The chief's next Init rewinds every ps to this step with the new layout.
          co.new_plan_rewind_id = client.run_epoch() + 1;
        } else {
          detail::adopt_chiefs_plan(cfg, s, ps.at(0), credential, tls);  // fresh codecs
          s.restore_at(*at, /*codec_states=*/false);
          s.save_codec_states(*at);  // in place of the old codecs' states of this step
        }
        restored = *at;
        continue;
      }
      TrainResult result = run->finish(last, ps, co);
      client.finish(true);
      result.wall_seconds = since(t_start);
      if (!cfg.quiet)
        std::fprintf(stderr, "%s: done after %lld steps\n", me.c_str(), static_cast<long long>(run->steps_run()));
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
}

TrainResult run_evaluator(const TrainConfig& cfg, const comm::ClusterSpec& c) {
  if (cfg.train_dir.empty()) throw std::invalid_argument("the evaluator needs --train_dir (the chief's checkpoints)");
  TrainingSession s(cfg, c.num_replicas(), {}, /*need_train_data=*/false);
  // The evaluator may start before the chief has made train_dir.
  std::filesystem::create_directories(cfg.train_dir);
  JsonlWriter log(cfg.train_dir + "/eval.jsonl", true);
  const std::string ps0 = c.ps_addresses().at(0);
  const std::optional<comm::Credential> credential = credential_of(cfg, comm::Role::observer());
  const comm::TlsOptions tls = tls_of(cfg);
  int64_t last = -1;
  auto last_contact = Clock::now();
  TrainResult result;
  std::set<std::string> warned;  // each corrupt checkpoint is named once, not every poll
  std::string final_skipped;     // why the final checkpoint was passed over, if it was
  const std::string final_path = checkpoint_path(cfg.train_dir, cfg.max_steps);
  for (;;) {
    const auto st = comm::query_ps_status(ps0, 2, credential, tls);
    if (st) {
      last_contact = Clock::now();
      if (!st->failure.empty()) throw comm::PeerError("evaluator: the run failed: " + st->failure);
    }
    std::optional<Checkpoint> ck;
    try {
      // A corrupt latest checkpoint: evaluate the newest intact one and say so.
      ck = load_newest_intact_checkpoint(cfg.train_dir, [&](const std::string& why) {
        if (why.find(final_path) != std::string::npos) final_skipped = why;
        if (warned.insert(why).second)
          std::fprintf(stderr, "evaluator: warning: %s; evaluating an earlier checkpoint\n", why.c_str());
      });
    } catch (const std::exception& e) {  // none intact (yet): look again
      if (warned.insert(e.what()).second) std::fprintf(stderr, "evaluator: %s; retrying\n", e.what());
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
                            " s and the final checkpoint (step " + std::to_string(cfg.max_steps) + ") never appeared " +
                            (final_skipped.empty() ? "in " + cfg.train_dir : "intact: " + final_skipped));
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

}  // namespace

std::optional<comm::ClusterSpec> cluster_of(const TrainConfig& cfg) {
  const char* tf = std::getenv("TF_CONFIG");
  if (!cfg.job_name.empty()) {
    // Both given (a pod with TF_CONFIG and flags of its own): the flags win,
    // which a user of TF_CONFIG would not guess; say so.
    if (tf != nullptr && *tf != '\0')
      std::fprintf(stderr, "warning: --job_name=%s is given, so TF_CONFIG in the environment is ignored\n",
                   cfg.job_name.c_str());
    return comm::cluster_from_flags(cfg.job_name, cfg.task_id, cfg.ps_hosts, cfg.worker_hosts, cfg.chief_host,
                                    cfg.evaluator_host);
  }
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
