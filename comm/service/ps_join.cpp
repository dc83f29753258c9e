// The ps's Init (the chief's layout, checked whole by the Init intake) and
// Register (a replica's process joins with its session) (ps_service.h).
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "ps_service.h"

namespace terngrad::comm {

grpc::Status ParameterServer::Impl::init(const Caller& caller, grpc::ServerReader<rpc::InitChunk>* reader,
                                         rpc::InitReply* reply) {
  rpc::InitChunk chunk;
  if (!reader->Read(&chunk) || !chunk.has_header())
    return grpc::Status(StatusCode::INVALID_ARGUMENT, "Init: the first message must be the header");
  detail::InitPlan plan;
  plan.header = chunk.header();
  if (grpc::Status s = chief_only(caller, plan.header.replica(), "Init"); !s.ok()) return s;
  if (caller.session.empty())
    return grpc::Status(StatusCode::INVALID_ARGUMENT, "Init: the call carries no session id (tg-session metadata)");
  const std::optional<detail::InitRefusal> refusal =
      detail::take_init(plan, [&](rpc::InitChunk& c) { return reader->Read(&c); }, {kMaxReplicas, handler != nullptr});
  if (refusal)
    return grpc::Status(refusal->code == detail::InitRefusal::Code::kFailedPrecondition
                            ? StatusCode::FAILED_PRECONDITION
                            : StatusCode::INVALID_ARGUMENT,
                        refusal->message);
  std::unique_lock<std::mutex> lock(mu);
  if (phase == Phase::kRunning && plan.header.rewind_id() != 0) return rewind_locked(lock, caller, plan);
  if (phase != Phase::kWaitingInit) return init_again_locked(caller, plan.header, reply);
  return start_run_locked(caller, plan);
}

grpc::Status ParameterServer::Impl::rewind_locked(std::unique_lock<std::mutex>& lock, const Caller& caller,
                                                  detail::InitPlan& plan) {
  const rpc::InitHeader& h = plan.header;
  if (!sync)
    return grpc::Status(StatusCode::INVALID_ARGUMENT,
                        "Init: a rewind is for sync runs (an async run's restarted ps is refilled with the values)");
  if (h.rewind_id() <= run_epoch) return grpc::Status::OK;  // taken already: a retried Init
  // A new plan (--codec=auto chose again) brings its own layout; any other
  // rewind keeps the one the run has.
  if (h.fingerprint() != fingerprint && !h.new_plan())
    return grpc::Status(StatusCode::FAILED_PRECONDITION, "Init: already initialized with another layout");
  if (!h.sync() || static_cast<int>(h.total_replicas()) != total ||
      static_cast<int>(h.replicas_to_aggregate()) != needed)
    return grpc::Status(StatusCode::INVALID_ARGUMENT,
                        "Init: a rewind keeps the run's mode and replicas (sync, " + std::to_string(needed) + " of " +
                            std::to_string(total) + ")");
  const int64_t was = global_step_locked();
  cv.wait(lock, [&] { return sums_in_flight == 0; });
  if (h.new_plan()) {
    // Pushes being read hold the old set (ps_push.cpp); they are refused as
    // rewound when they reach the steps.
    shard_set = std::make_shared<std::vector<Shard>>(std::move(plan.shards));
    variables.assign(h.variables().begin(), h.variables().end());
    fingerprint = h.fingerprint();
  }
  std::vector<detail::ShardCoding> coding;
  for (const Shard& sh : shards()) coding.push_back({sh.codec.get(), sh.view.count, sh.view.variable, sh.view.begin});
  start_sync_steps_locked(std::move(coding), plan);
  reset_exchanges_locked(plan);
  registrations_open = Clock::now();
  chief_session = caller.session;
  run_epoch = h.rewind_id();
  log("rewound by the chief from global step " + std::to_string(was) + " to " + std::to_string(h.global_step()) +
      (h.new_plan() ? " with a new choice of codecs (" + std::to_string(shards().size()) + " shards; rewind " +
                          std::to_string(run_epoch) + "): every replica registers again with it"
                    : " (its latest checkpoint; rewind " + std::to_string(run_epoch) +
                          "): the steps in between are computed again, every replica registers again"));
  wake_all_locked();
  return grpc::Status::OK;
}

grpc::Status ParameterServer::Impl::init_again_locked(const Caller& caller, const rpc::InitHeader& h,
                                                      rpc::InitReply* reply) {
  if (phase != Phase::kRunning) return ended_status();
  if (h.fingerprint() != fingerprint)
    return grpc::Status(StatusCode::FAILED_PRECONDITION, "Init: already initialized with another layout");
  if (detail::same_session(caller.session, chief_session)) return grpc::Status::OK;  // a retried Init
  if (!sync || opt.keep_pulled_steps) {
    // A restarted chief: its Register replaces the old process's session. In
    // an async run it pulls the values this ps holds, as every replica does;
    // in a sync run it catches up through the kept steps.
    chief_session = caller.session;
    reply->set_already_running(true);
    reply->set_global_step(global_step_locked());
    log("a new chief process sent Init while the run is at global step " + std::to_string(global_step_locked()) +
        ": the run goes on" + (sync ? "; it catches up from its checkpoint" : ""));
    return grpc::Status::OK;
  }
  fail_locked("the chief restarted (a new process initialized this ps while the run was at global step " +
              std::to_string(global_step_locked()) +
              "); the running replicas cannot be rewound to its checkpoint: stop every task and start the whole "
              "cluster again, and every replica resumes from the chief's latest checkpoint");
  return ended_status();
}

void ParameterServer::Impl::start_sync_steps_locked(std::vector<detail::ShardCoding> coding, detail::InitPlan& plan) {
  steps.emplace(std::move(coding), total, needed, static_cast<size_t>(opt.keep_steps), plan.header.global_step(),
                std::move(plan.server_states));
  steps->keep_pulled(opt.keep_pulled_steps);
  steps->keep_states_every(plan.header.checkpoint_interval_steps());
}

void ParameterServer::Impl::reset_exchanges_locked(detail::InitPlan& plan) {
  const size_t keep = static_cast<size_t>(opt.keep_steps);
  skew.emplace(static_cast<size_t>(total), sync && needed == total ? opt.push_lead_bytes : 0);
  turns.emplace(static_cast<size_t>(total), opt.push_lead_bytes, kTurnReservation);
  scales.emplace(variables.size(), total, needed, keep);
  presums.emplace(std::move(plan.presum_floats), total, needed, keep);
  replicas.reset(total);
}

grpc::Status ParameterServer::Impl::start_run_locked(const Caller& caller, detail::InitPlan& plan) {
  const rpc::InitHeader& h = plan.header;
  std::vector<detail::ShardCoding> coding;
  for (const Shard& sh : plan.shards)
    coding.push_back({sh.codec.get(), sh.view.count, sh.view.variable, sh.view.begin});
  std::optional<detail::AsyncUpdates> fresh_updates;
  if (!h.sync()) {
    // The update rule's shards are (re)initialized only now, while no run
    // uses them; a slot it does not know still refuses the Init, and the
    // ps keeps waiting for one.
    fresh_updates.emplace(coding, static_cast<int>(h.total_replicas()), h.global_step(), *handler, h.last_step());
    if (grpc::Status s = load_async_slots(plan, *fresh_updates); !s.ok()) return s;
  }
  fingerprint = h.fingerprint();
  sync = h.sync();
  total = static_cast<int>(h.total_replicas());
  needed = static_cast<int>(h.replicas_to_aggregate());
  chief_session = caller.session;
  variables.assign(h.variables().begin(), h.variables().end());
  shard_set = std::make_shared<std::vector<Shard>>(std::move(plan.shards));  // the codecs stay where `coding` points
  if (sync)
    start_sync_steps_locked(std::move(coding), plan);
  else
    updates = std::move(fresh_updates);
  reset_exchanges_locked(plan);
  run_epoch = h.rewind_id();  // a restarted ps that a rewind initializes
  phase = Phase::kRunning;
  log("initialized: " + std::to_string(shards().size()) + " shards, " + (sync ? "sync" : "async") + ", " +
      std::to_string(needed) + " of " + std::to_string(total) + " replicas per step, global step " +
      std::to_string(global_step_locked()) +
      (run_epoch ? " (the chief's rewind " + std::to_string(run_epoch) + " of the run)" : ""));
  wake_all_locked();
  return grpc::Status::OK;
}

grpc::Status ParameterServer::Impl::load_async_slots(detail::InitPlan& plan, detail::AsyncUpdates& fresh) {
  for (size_t i = 0; i < plan.shards.size(); ++i) handler->init_shard(i, plan.shards[i].view);
  for (size_t s = 0; s < plan.shards.size(); ++s) {
    std::vector<std::pair<std::string, std::span<float>>> targets = handler->slots(s);
    targets.insert(targets.begin(), {"", fresh.values(s)});
    for (size_t k = 0; k < plan.slot_names[s].size(); ++k) {
      auto& bytes = plan.slot_bytes[s][k].bytes();
      auto it = std::find_if(targets.begin(), targets.end(), [&](auto& p) { return p.first == plan.slot_names[s][k]; });
      if (it == targets.end() || it->second.size_bytes() != bytes.size())
        return grpc::Status(StatusCode::INVALID_ARGUMENT, "Init: shard " + std::to_string(s) + " has no slot \"" +
                                                              plan.slot_names[s][k] + "\" of its size");
      std::memcpy(it->second.data(), bytes.data(), bytes.size());
    }
  }
  return grpc::Status::OK;
}

grpc::Status ParameterServer::Impl::register_replica(const Caller& caller, ServerContext* ctx,
                                                     const rpc::RegisterRequest* req, rpc::RegisterReply* reply) {
  if (caller.session.empty())
    return grpc::Status(StatusCode::INVALID_ARGUMENT, "Register: the call carries no session id (tg-session metadata)");
  std::unique_lock<std::mutex> lock(mu);
  (void)long_poll(lock, ctx, [&] { return phase != Phase::kWaitingInit; });
  if (ended()) return ended_status();
  if (phase == Phase::kWaitingInit) {  // the chief has not initialized this ps yet
    reply->set_ready(false);
    reply->set_waiting_init(true);
    reply->add_missing(0);
    return grpc::Status::OK;
  }
  if (grpc::Status s = check_replica(req->replica()); !s.ok()) return s;
  if (auth && !caller.role->is_replica(req->replica()))
    return grpc::Status(
        StatusCode::PERMISSION_DENIED,
        "Register: " + caller.role->name() + " may not register as replica " + std::to_string(req->replica()));
  if (req->fingerprint() != fingerprint)
    return grpc::Status(StatusCode::INVALID_ARGUMENT,
                        replica_name(req->replica()) +
                            " has a different model, codec, placement or sync setting than the chief "
                            "(layout fingerprint " +
                            std::to_string(req->fingerprint()) + " vs " + std::to_string(fingerprint) +
                            "): start every task with the same flags");
  const std::string label = req->label().substr(0, 200);
  const std::string holder = replicas[req->replica()].label;
  switch (replicas.join(req->replica(), caller.session, label, auth.has_value(), Clock::now())) {
    case detail::ReplicaTable::Join::kRefused:
      return grpc::Status(
          StatusCode::ALREADY_EXISTS,
          replica_name(req->replica()) + " is already registered (by " + holder +
              "); without a cluster secret the ps cannot tell a restarted replica from another process in "
              "its name, so a new one may register once the old one has been silent for " +
              std::to_string(static_cast<int>(opt.peer_timeout_s)) + " s");
    case detail::ReplicaTable::Join::kReplaced:
      log(replica_name(req->replica()) + " registered again from " + label +
          " (a new process): calls of the previous one are refused from now on");
      break;
    case detail::ReplicaTable::Join::kFirst: log(replica_name(req->replica()) + " (" + label + ") joined"); break;
    case detail::ReplicaTable::Join::kSame: break;
  }
  cv.notify_all();
  // A rewind meanwhile unregistered this replica too: the reply says it is
  // missing, and it registers again.
  (void)long_poll(lock, ctx, [&] { return unregistered().empty(); });
  if (ended()) return ended_status();
  const auto missing = unregistered();
  reply->set_ready(missing.empty());
  for (uint32_t m : missing) reply->add_missing(m);
  reply->set_global_step(global_step_locked());
  reply->set_run_epoch(run_epoch);
  return grpc::Status::OK;
}

}  // namespace terngrad::comm
