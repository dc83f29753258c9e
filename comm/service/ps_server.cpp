// The parameter server (ps_server.h): the gRPC service over one lock-guarded
// state. Each call is parsed and checked here, completely, before anything
// changes; the step logic lives in units without gRPC: sync_steps.h (the sync
// steps, their sums and their buffers), async_updates.h (async values and
// updates) and scale_exchange.h (scale sharing). Long polls wait on one
// condition variable; a monitor thread enforces the startup and liveness
// timeouts. Every call enters through serve(): it authenticates the caller,
// turns exceptions into statuses and logs refusals; each handler then
// authorizes the caller for the replica it names (authorize_locked).
#include "terngrad/comm/ps_server.h"

#include <grpcpp/grpcpp.h>
#include <openssl/crypto.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "async_updates.h"
#include "checkpoint_tensors.h"
#include "chunks.h"
#include "init_intake.h"
#include "push_intake.h"
#include "parameter_server.grpc.pb.h"
#include "ps_in_process.h"
#include "refusal_log.h"
#include "replica_table.h"
#include "presum_exchange.h"
#include "scale_exchange.h"
#include "server_state.h"
#include "sync_steps.h"
#include "tls_credentials.h"
#include "terngrad/comm/errors.h"
#include "terngrad/comm/gradient_codec.h"
#include "terngrad/comm/step_times.h"

namespace terngrad::comm {

namespace {

using Clock = std::chrono::steady_clock;
using grpc::ServerContext;
using grpc::StatusCode;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

enum class Phase { kWaitingInit, kRunning, kFinished, kFailed };
const char* phase_name(Phase p) {
  switch (p) {
    case Phase::kWaitingInit: return "waiting_init";
    case Phase::kRunning: return "running";
    case Phase::kFinished: return "finished";
    case Phase::kFailed: return "failed";
  }
  return "?";
}

using Shard = detail::IntakeShard;

// Who is calling: the role its token proves (none without a cluster
// secret), the session id it sent and its address.
struct Caller {
  std::optional<Role> role;
  std::string session;
  std::string peer;
};

using detail::same_session;

// A metadata value, or "" when absent or too long to be ours.
std::string metadata(const ServerContext* ctx, const char* key) {
  const auto& md = ctx->client_metadata();
  const auto it = md.find(key);
  if (it == md.end() || it->second.size() > 256) return "";
  return std::string(it->second.data(), it->second.size());
}

}  // namespace

struct ParameterServer::Impl final : public rpc::ParameterServer::Service {
  ServerOptions opt;
  UpdateHandler* handler;
  std::string address;
  int port = 0;
  std::unique_ptr<grpc::Server> server;

  std::mutex mu;
  std::condition_variable cv;
  Phase phase = Phase::kWaitingInit;
  std::string failure;
  const Clock::time_point started = Clock::now();
  // From the chief's Init.
  uint64_t fingerprint = 0;
  bool sync = true;
  int total = 0, needed = 0;  // replicas, replicas_to_aggregate
  std::vector<rpc::Variable> variables;
  std::vector<Shard> shards;
  detail::ReplicaTable replicas;
  // Set once by Init, and from then on only under mu (their headers say
  // which calls run without it).
  std::optional<detail::SyncSteps> steps;       // sync runs
  std::optional<detail::AsyncUpdates> updates;  // async runs
  std::optional<detail::ScaleExchange> scales;  // scale sharing (used on ps 0)
  std::optional<detail::PresumExchange> presums;  // multi-round codecs' pre-rounds (used on ps 0)
  uint64_t bytes_in = 0, bytes_out = 0;
  // Async: the values as of one global step, shared by every pull at that
  // step (a copy per pull cost the values once per concurrent puller:
  // 32 replicas pulling at once held ~40x the values).
  std::shared_ptr<const std::vector<std::vector<uint8_t>>> values_snapshot;
  int64_t values_snapshot_step = -1;

  std::thread monitor;
  std::atomic<bool> stopping{false};

  std::optional<CallAuthenticator> auth;  // with a cluster secret
  std::string chief_session;              // the session of the process that initialized this ps
  std::mutex log_mu;                      // guards refusals (logged outside mu)
  detail::RefusalLog refusals;

  Impl(const std::string& addr, ServerOptions o, UpdateHandler* h) : opt(std::move(o)), handler(h), address(addr) {
    if (opt.secret) auth.emplace(*opt.secret);
  }

  void log(const std::string& msg) {
    if (opt.verbose) std::fprintf(stderr, "ps %d: %s\n", opt.task_index, msg.c_str());
  }

  std::string replica_name(uint32_t r) const {
    if (r < opt.replica_names.size() && !opt.replica_names[r].empty()) return opt.replica_names[r];
    return "replica " + std::to_string(r);
  }

  // --- state helpers (mu held) ---
  void fail_locked(const std::string& why) {
    if (phase == Phase::kFailed || phase == Phase::kFinished) return;
    phase = Phase::kFailed;
    failure = why;
    log("run failed: " + why);
    cv.notify_all();
  }

  grpc::Status ended_status() const {
    if (phase == Phase::kFailed) return grpc::Status(StatusCode::ABORTED, "ps " + std::to_string(opt.task_index) + ": " + failure);
    return grpc::Status(StatusCode::OUT_OF_RANGE, "ps " + std::to_string(opt.task_index) + ": training finished");
  }
  bool ended() const { return phase == Phase::kFailed || phase == Phase::kFinished; }

  grpc::Status check_replica(uint32_t r) const {
    if (r >= static_cast<uint32_t>(total))
      return grpc::Status(StatusCode::INVALID_ARGUMENT, "replica " + std::to_string(r) + " is outside the run's " +
                                                      std::to_string(total) + " replicas");
    return grpc::Status::OK;
  }

  // Every call: authenticates the caller (with a secret, a call that proves
  // no role is refused before anything else, and learns nothing about the
  // run), runs the handler, and logs what it refused with the caller's
  // address (rate-limited). An exception becomes a status, never a crash.
  template <class Handler>
  grpc::Status serve(ServerContext* ctx, const char* call, Handler handle) {
    Caller caller;
    caller.peer = ctx->peer();
    caller.session = metadata(ctx, kSessionMetadataKey);
    grpc::Status status;
    if (auth && !(caller.role = auth->verify(metadata(ctx, kAuthMetadataKey)))) {
      status = grpc::Status(StatusCode::UNAUTHENTICATED, "this parameter server needs the run's credentials (cluster secret)");
    } else {
      try {
        status = handle(caller);
      } catch (const std::bad_alloc&) {
        status = grpc::Status(StatusCode::RESOURCE_EXHAUSTED, std::string(call) + ": out of memory");
      } catch (const std::exception& e) {
        status = grpc::Status(StatusCode::INTERNAL, std::string(call) + ": " + e.what());
      }
    }
    switch (status.error_code()) {
      case StatusCode::OK:
      case StatusCode::ABORTED:         // the run failed: the reason, not a refusal
      case StatusCode::OUT_OF_RANGE:    // the run finished
      case StatusCode::CANCELLED:       // the caller went away
        break;
      default: {
        std::lock_guard<std::mutex> lock(log_mu);
        const std::string who = caller.peer + (caller.role ? " (" + caller.role->name() + ")" : "");
        const std::string line = refusals.refuse(who, call, status.error_message(), Clock::now());
        if (!line.empty()) std::fprintf(stderr, "ps %d: %s\n", opt.task_index, line.c_str());
      }
    }
    return status;
  }

  // May the caller act as replica r in this call (mu held, after Init)? With
  // a secret, only replica r's token can; and once r registered, only its
  // process's session (a replaced process, or another in r's name, is
  // refused). need_session: the call needs r to have registered.
  grpc::Status authorize_locked(const Caller& c, uint32_t r, const char* call, bool need_session) const {
    if (grpc::Status s = check_replica(r); !s.ok()) return s;
    if (auth && !c.role->is_replica(r))
      return grpc::Status(StatusCode::PERMISSION_DENIED, std::string(call) + ": " + c.role->name() +
                                                             " may not act as replica " + std::to_string(r));
    const std::string& session = replicas[r].session;
    if (session.empty()) {
      if (!need_session) return grpc::Status::OK;
      return grpc::Status(StatusCode::FAILED_PRECONDITION, std::string(call) + ": " + replica_name(r) +
                                                               " has not registered with this ps");
    }
    if (!same_session(c.session, session))
      return grpc::Status(StatusCode::PERMISSION_DENIED,
                          std::string(call) + ": not the session " + replica_name(r) +
                              " registered with (this process was replaced by a newer one, or is another in its name)");
    return grpc::Status::OK;
  }

  // Init, Checkpoint and Shutdown: the chief only.
  grpc::Status chief_only(const Caller& c, uint32_t claimed, const char* call) const {
    if (claimed != 0 || (auth && !c.role->is_replica(0)))
      return grpc::Status(StatusCode::PERMISSION_DENIED, std::string(call) + ": only the chief (replica 0)");
    return grpc::Status::OK;
  }

  void heard(uint32_t r) { replicas.heard(r, Clock::now()); }

  // The run's global step (0 before Init), a replica's last step pushed
  // (-1 for none), the pushes dropped: from the run's step unit (mu held).
  int64_t global_step_locked() const {
    if (steps) return steps->global_step();
    if (updates) return updates->global_step();
    return 0;
  }
  int64_t last_pushed_locked(uint32_t r) const {
    if (steps) return steps->last_pushed(r);
    if (updates) return updates->last_pushed(r);
    return -1;
  }
  uint64_t stale_locked() const { return steps ? steps->stale() : 0; }
  uint64_t duplicates_locked() const {
    if (steps) return steps->duplicates();
    if (updates) return updates->duplicates();
    return 0;
  }

  std::vector<uint32_t> unregistered() const { return replicas.unregistered(); }

  // Waits until pred() or the poll interval / the call's deadline / an end.
  template <class Pred>
  void long_poll(std::unique_lock<std::mutex>& lock, ServerContext* ctx, Pred pred) {
    auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(opt.poll_s));
    const auto deadline = ctx->deadline();
    const auto now_sys = std::chrono::system_clock::now();
    if (deadline > now_sys) {
      const auto left = std::chrono::duration_cast<Clock::duration>(deadline - now_sys) - std::chrono::milliseconds(200);
      until = std::min(until, Clock::now() + std::max(left, Clock::duration::zero()));
    }
    cv.wait_until(lock, until, [&] { return pred() || ended() || ctx->IsCancelled(); });
  }

  // --- the service ---
  grpc::Status Init(ServerContext* ctx, grpc::ServerReader<rpc::InitChunk>* reader, rpc::InitReply*) override {
    return serve(ctx, "Init", [&](const Caller& c) { return init(c, reader); });
  }

  // The whole request (header, layout, codecs, async tensors) is read and
  // checked before anything changes; a ps already running changes nothing.
  // Init: the chief's layout (and an async run's values, a resumed sync
  // run's server states), checked whole by the Init intake before the ps
  // changes anything.
  grpc::Status init(const Caller& caller, grpc::ServerReader<rpc::InitChunk>* reader) {
    rpc::InitChunk chunk;
    if (!reader->Read(&chunk) || !chunk.has_header())
      return grpc::Status(StatusCode::INVALID_ARGUMENT, "Init: the first message must be the header");
    detail::InitPlan plan;
    plan.header = chunk.header();
    if (grpc::Status s = chief_only(caller, plan.header.replica(), "Init"); !s.ok()) return s;
    if (caller.session.empty())
      return grpc::Status(StatusCode::INVALID_ARGUMENT, "Init: the call carries no session id (tg-session metadata)");
    const std::optional<detail::InitRefusal> refusal = detail::take_init(
        plan, [&](rpc::InitChunk& c) { return reader->Read(&c); }, {kMaxReplicas, handler != nullptr});
    if (refusal)
      return grpc::Status(refusal->code == detail::InitRefusal::Code::kFailedPrecondition ? StatusCode::FAILED_PRECONDITION
                                                                                          : StatusCode::INVALID_ARGUMENT,
                          refusal->message);
    std::lock_guard<std::mutex> lock(mu);
    if (phase != Phase::kWaitingInit) return init_again_locked(caller, plan.header);
    return start_run_locked(caller, plan);
  }

  // An Init while the run goes on: a retry of the chief's own, or a new
  // chief process, which ends the run (the other replicas hold weights of a
  // later step than its checkpoint, and no ps can rewind them).
  grpc::Status init_again_locked(const Caller& caller, const rpc::InitHeader& h) {
    if (phase != Phase::kRunning) return ended_status();
    if (h.fingerprint() != fingerprint)
      return grpc::Status(StatusCode::FAILED_PRECONDITION, "Init: already initialized with another layout");
    if (same_session(caller.session, chief_session)) return grpc::Status::OK;  // a retried Init
    fail_locked("the chief restarted (a new process initialized this ps while the run was at global step " +
                std::to_string(global_step_locked()) +
                "); the running replicas cannot be rewound to its checkpoint: stop every task and start the whole "
                "cluster again, and every replica resumes from the chief's latest checkpoint");
    return ended_status();
  }

  // The run begins with an accepted Init's layout.
  grpc::Status start_run_locked(const Caller& caller, detail::InitPlan& plan) {
    const rpc::InitHeader& h = plan.header;
    std::vector<detail::ShardCoding> coding;
    for (const Shard& sh : plan.shards) coding.push_back({sh.codec.get(), sh.view.count, sh.view.variable, sh.view.begin});
    std::optional<detail::AsyncUpdates> fresh_updates;
    if (!h.sync()) {
      // The update rule's shards are (re)initialized only now, while no run
      // uses them; a slot it does not know still refuses the Init, and the
      // ps keeps waiting for one.
      fresh_updates.emplace(coding, static_cast<int>(h.total_replicas()), h.global_step(), *handler);
      if (grpc::Status s = load_async_slots(plan, *fresh_updates); !s.ok()) return s;
    }
    fingerprint = h.fingerprint();
    sync = h.sync();
    total = static_cast<int>(h.total_replicas());
    needed = static_cast<int>(h.replicas_to_aggregate());
    chief_session = caller.session;
    variables.assign(h.variables().begin(), h.variables().end());
    shards = std::move(plan.shards);  // the codecs stay where `coding` points
    const size_t keep = static_cast<size_t>(opt.keep_steps);
    if (sync) {
      steps.emplace(std::move(coding), total, needed, keep, h.global_step(), std::move(plan.server_states));
    } else {
      updates = std::move(fresh_updates);
    }
    scales.emplace(variables.size(), total, needed, keep);
    presums.emplace(std::move(plan.presum_floats), total, needed, keep);
    replicas.reset(total);
    phase = Phase::kRunning;
    log("initialized: " + std::to_string(shards.size()) + " shards, " + (sync ? "sync" : "async") + ", " +
        std::to_string(needed) + " of " + std::to_string(total) + " replicas per step, global step " +
        std::to_string(global_step_locked()));
    cv.notify_all();
    return grpc::Status::OK;
  }

  // An async run's values and the update rule's slots, from the Init's tensors.
  grpc::Status load_async_slots(detail::InitPlan& plan, detail::AsyncUpdates& fresh) {
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

  grpc::Status Register(ServerContext* ctx, const rpc::RegisterRequest* req, rpc::RegisterReply* reply) override {
    return serve(ctx, "Register", [&](const Caller& c) { return register_replica(c, ctx, req, reply); });
  }

  // A replica joins with its process's session id, which every later call
  // of it must carry. Another session for a registered replica is a new
  // process of it (a restart): with a secret it proved to be that replica and
  // replaces the old one; without, it could be anyone, so it waits until
  // the old process has been silent for the peer timeout.
  grpc::Status register_replica(const Caller& caller, ServerContext* ctx, const rpc::RegisterRequest* req,
                                rpc::RegisterReply* reply) {
    if (caller.session.empty())
      return grpc::Status(StatusCode::INVALID_ARGUMENT, "Register: the call carries no session id (tg-session metadata)");
    std::unique_lock<std::mutex> lock(mu);
    long_poll(lock, ctx, [&] { return phase != Phase::kWaitingInit; });
    if (ended()) return ended_status();
    if (phase == Phase::kWaitingInit) {  // the chief has not initialized this ps yet
      reply->set_ready(false);
      reply->add_missing(0);
      return grpc::Status::OK;
    }
    if (grpc::Status s = check_replica(req->replica()); !s.ok()) return s;
    if (auth && !caller.role->is_replica(req->replica()))
      return grpc::Status(StatusCode::PERMISSION_DENIED, "Register: " + caller.role->name() + " may not register as replica " +
                                                             std::to_string(req->replica()));
    if (req->fingerprint() != fingerprint)
      return grpc::Status(StatusCode::INVALID_ARGUMENT,
                    replica_name(req->replica()) + " has a different model, codec, placement or sync setting than the chief "
                    "(layout fingerprint " + std::to_string(req->fingerprint()) + " vs " + std::to_string(fingerprint) +
                    "): start every task with the same flags");
    const std::string label = req->label().substr(0, 200);
    const std::string holder = replicas[req->replica()].label;
    switch (replicas.join(req->replica(), caller.session, label, auth.has_value(), Clock::now())) {
      case detail::ReplicaTable::Join::kRefused:
        return grpc::Status(StatusCode::ALREADY_EXISTS,
                            replica_name(req->replica()) + " is already registered (by " + holder +
                                "); without a cluster secret the ps cannot tell a restarted replica from another process in "
                                "its name, so a new one may register once the old one has been silent for " +
                                std::to_string(static_cast<int>(opt.peer_timeout_s)) + " s");
      case detail::ReplicaTable::Join::kReplaced:
        log(replica_name(req->replica()) + " registered again from " + label +
            " (a new process): calls of the previous one are refused from now on");
        break;
      case detail::ReplicaTable::Join::kFirst:
        log(replica_name(req->replica()) + " (" + label + ") joined");
        break;
      case detail::ReplicaTable::Join::kSame:
        break;
    }
    cv.notify_all();
    long_poll(lock, ctx, [&] { return unregistered().empty(); });
    if (ended()) return ended_status();
    const auto missing = unregistered();
    reply->set_ready(missing.empty());
    for (uint32_t m : missing) reply->add_missing(m);
    reply->set_global_step(global_step_locked());
    return grpc::Status::OK;
  }

  grpc::Status ExchangeScales(ServerContext* ctx, const rpc::ScalesRequest* req, rpc::ScalesReply* reply) override {
    return serve(ctx, "ExchangeScales", [&](const Caller& c) { return exchange_scales(c, ctx, req, reply); });
  }

  grpc::Status exchange_scales(const Caller& caller, ServerContext* ctx, const rpc::ScalesRequest* req,
                               rpc::ScalesReply* reply) {
    std::unique_lock<std::mutex> lock(mu);
    if (ended()) return ended_status();
    if (phase != Phase::kRunning) return grpc::Status(StatusCode::FAILED_PRECONDITION, "ExchangeScales before Init");
    if (grpc::Status s = authorize_locked(caller, req->replica(), "ExchangeScales", true); !s.ok()) return s;
    // Which variables: every one, or a subset named once each.
    const std::span<const uint32_t> named(req->variables().data(), req->variables().size());
    const std::span<const float> reported(req->scales().data(), req->scales().size());
    std::vector<uint32_t> vars;
    if (std::string bad = scales->select(named, reported, &vars); !bad.empty())
      return grpc::Status(StatusCode::INVALID_ARGUMENT, bad);
    heard(req->replica());
    const int64_t step = req->step();
    auto too_old = [&] {
      return grpc::Status(StatusCode::FAILED_PRECONDITION, "ExchangeScales: step " + std::to_string(step) + " is too old");
    };
    switch (scales->record(req->replica(), step, vars, reported)) {
      case detail::ScaleExchange::Recorded::kTooOld: return too_old();
      case detail::ScaleExchange::Recorded::kNew: cv.notify_all(); break;
      case detail::ScaleExchange::Recorded::kRepeated: break;
    }
    long_poll(lock, ctx, [&] { return !scales->kept(step) || scales->complete(step, vars); });
    if (ended()) return ended_status();
    if (!scales->kept(step)) return too_old();
    reply->set_ready(scales->complete(step, vars));
    if (reply->ready()) {
      for (float x : scales->maxima(step, vars)) reply->add_max_scales(x);
    } else {
      for (uint32_t r : scales->missing(step, vars)) reply->add_missing(r);
    }
    return grpc::Status::OK;
  }

  grpc::Status ExchangePresums(ServerContext* ctx, const rpc::PresumRequest* req, rpc::PresumReply* reply) override {
    return serve(ctx, "ExchangePresums", [&](const Caller& c) { return exchange_presums(c, ctx, req, reply); });
  }

  // As exchange_scales: the whole request is checked (caller, replica,
  // variables, sizes, finite values) before anything is recorded.
  grpc::Status exchange_presums(const Caller& caller, ServerContext* ctx, const rpc::PresumRequest* req,
                                rpc::PresumReply* reply) {
    std::unique_lock<std::mutex> lock(mu);
    if (ended()) return ended_status();
    if (phase != Phase::kRunning) return grpc::Status(StatusCode::FAILED_PRECONDITION, "ExchangePresums before Init");
    if (grpc::Status s = authorize_locked(caller, req->replica(), "ExchangePresums", true); !s.ok()) return s;
    if (!sync) return grpc::Status(StatusCode::FAILED_PRECONDITION, "ExchangePresums: an async run has no pre-rounds");
    const uint32_t round = req->round();
    const std::span<const uint32_t> named(req->variables().data(), req->variables().size());
    const std::span<const float> values(req->values().data(), req->values().size());
    std::vector<uint32_t> vars;
    if (std::string bad = presums->select(round, named, values, &vars); !bad.empty())
      return grpc::Status(StatusCode::INVALID_ARGUMENT, bad);
    const int64_t step = req->step();
    // Only steps a replica may be at: the kept steps around the global step
    // (a late backup replica asks for one summed already). A step far ahead
    // would displace the kept ones.
    const int64_t global = global_step_locked();
    if (step < global - opt.keep_steps || step >= global + opt.keep_steps)
      return grpc::Status(StatusCode::FAILED_PRECONDITION, "ExchangePresums: step " + std::to_string(step) +
                                                               " is outside the run's window [" +
                                                               std::to_string(global - opt.keep_steps) + ", " +
                                                               std::to_string(global + opt.keep_steps) + ")");
    heard(req->replica());
    auto too_old = [&] {
      return grpc::Status(StatusCode::FAILED_PRECONDITION, "ExchangePresums: step " + std::to_string(step) + " is too old");
    };
    switch (presums->record(req->replica(), step, round, vars, values)) {
      case detail::PresumExchange::Recorded::kTooOld: return too_old();
      case detail::PresumExchange::Recorded::kNew: cv.notify_all(); break;
      case detail::PresumExchange::Recorded::kRepeated: break;
    }
    long_poll(lock, ctx, [&] { return !presums->kept(step) || presums->complete(step, round, vars); });
    if (ended()) return ended_status();
    if (!presums->kept(step)) return too_old();
    reply->set_ready(presums->complete(step, round, vars));
    if (reply->ready()) {
      for (float x : presums->sums(step, round, vars)) reply->add_sums(x);
    } else {
      for (uint32_t r : presums->missing(step, round, vars)) reply->add_missing(r);
    }
    return grpc::Status::OK;
  }

  grpc::Status Push(ServerContext* ctx, grpc::ServerReader<rpc::PushChunk>* reader, rpc::PushReply* reply) override {
    return serve(ctx, "Push", [&](const Caller& c) { return push(c, reader, reply); });
  }

  grpc::Status push(const Caller& caller, grpc::ServerReader<rpc::PushChunk>* reader, rpc::PushReply* reply) {
    rpc::PushChunk chunk;
    if (!reader->Read(&chunk) || !chunk.has_header())
      return grpc::Status(StatusCode::INVALID_ARGUMENT, "Push: the first message must be the header");
    const rpc::PushHeader h = chunk.header();
    {
      std::lock_guard<std::mutex> lock(mu);
      if (ended()) return ended_status();
      if (phase != Phase::kRunning) return grpc::Status(StatusCode::FAILED_PRECONDITION, "Push before Init");
      if (grpc::Status s = authorize_locked(caller, h.replica(), "Push", true); !s.ok()) return s;
      heard(h.replica());
    }
    // Shards, codecs and the mode are fixed once Init has run: the push
    // intake reads them without the lock.
    const std::string who = replica_name(h.replica()) + " step " + std::to_string(h.step());
    detail::PushIntake in;
    if (const auto refusal =
            detail::take_push(h, shards, sync, who, [&](rpc::PushChunk& c) { return reader->Read(&c); }, in))
      return grpc::Status(StatusCode::INVALID_ARGUMENT, *refusal);
    return sync ? push_sync(caller, h, in.ids, in.payloads, in.received, reply)
                : push_async(caller, h, in.payloads, in.received, reply);
  }

  grpc::Status push_sync(const Caller& caller, const rpc::PushHeader& h, const std::vector<uint32_t>& ids,
                         std::vector<std::string>& payloads, uint64_t received, rpc::PushReply* reply) {
    std::unique_lock<std::mutex> lock(mu);  // declared first: released after `job` below is gone
    if (ended()) return ended_status();
    // Again: the replica may have registered a new process while this push was read.
    if (grpc::Status s = authorize_locked(caller, h.replica(), "Push", true); !s.ok()) return s;
    const uint32_t r = h.replica();
    heard(r);
    reply->set_global_step(steps->global_step());
    const detail::SyncSteps::PushResult pushed = steps->push(r, h.step(), ids, payloads, h.loss());
    switch (pushed.outcome) {
      case detail::SyncSteps::PushOutcome::kDuplicate:
        reply->set_outcome(rpc::PushReply::DUPLICATE);
        return grpc::Status::OK;
      case detail::SyncSteps::PushOutcome::kStale:
        reply->set_outcome(rpc::PushReply::STALE);
        // Backups are stale every step by design: the first few and then every
        // 100th are logged; Status and the chief's result.json carry the count.
        if (pushed.counted_stale && (steps->stale() <= 5 || steps->stale() % 100 == 0))
          log(replica_name(r) + ": push of step " + std::to_string(h.step()) + " is stale (step " +
              std::to_string(steps->current_step()) + " already summed); dropped (" + std::to_string(steps->stale()) +
              " so far)");
        return grpc::Status::OK;
      case detail::SyncSteps::PushOutcome::kAhead:
        return grpc::Status(StatusCode::FAILED_PRECONDITION, replica_name(r) + " pushed step " + std::to_string(h.step()) +
                                                           " but the ps is at step " + std::to_string(steps->current_step()));
      case detail::SyncSteps::PushOutcome::kRepeatsShards:
        return grpc::Status(StatusCode::INVALID_ARGUMENT, replica_name(r) + " step " + std::to_string(h.step()) +
                                                        ": a bucket repeats shards an earlier push of the step delivered");
      case detail::SyncSteps::PushOutcome::kAccepted:
        break;
    }
    if (h.step_ms_size() > 0) replicas[r].step_ms.assign(h.step_ms().begin(), h.step_ms().end());
    bytes_in += received;
    reply->set_outcome(rpc::PushReply::APPLIED);
    cv.notify_all();  // pullers list who has not pushed
    // Summing is the slow part: outside the lock (sync_steps.h, SumJob).
    const detail::SyncSteps::SumJob job = steps->take_sums(ids);
    if (!job.empty()) {
      lock.unlock();
      const std::string error = steps->sum(job);
      lock.lock();
      if (!error.empty()) {
        fail_locked(error);
        return ended_status();
      }
    }
    if (steps->settle(job)) cv.notify_all();
    reply->set_global_step(steps->global_step());
    return grpc::Status::OK;
  }

  grpc::Status push_async(const Caller& caller, const rpc::PushHeader& h, const std::vector<std::string>& payloads,
                          uint64_t received, rpc::PushReply* reply) {
    std::lock_guard<std::mutex> lock(mu);
    if (ended()) return ended_status();
    if (grpc::Status s = authorize_locked(caller, h.replica(), "Push", true); !s.ok()) return s;
    heard(h.replica());
    detail::AsyncUpdates::Outcome outcome;
    try {
      outcome = updates->apply(h.replica(), h.step(), payloads);
    } catch (const std::exception& e) {
      fail_locked(std::string("applying ") + replica_name(h.replica()) + "'s push: " + e.what());
      return ended_status();
    }
    if (outcome == detail::AsyncUpdates::Outcome::kDuplicate) {
      reply->set_outcome(rpc::PushReply::DUPLICATE);
      reply->set_global_step(updates->global_step());
      return grpc::Status::OK;
    }
    bytes_in += received;
    reply->set_outcome(rpc::PushReply::APPLIED);
    reply->set_global_step(updates->global_step());
    cv.notify_all();
    return grpc::Status::OK;
  }

  // After the chief finishes a sync run normally, the sums of completed
  // steps are still served (until run() closes the port): a replica that is
  // one pull behind the chief finishes its last step instead of failing.
  bool serves_after_finish(int64_t step) const { return sync && phase == Phase::kFinished && step < global_step_locked(); }

  grpc::Status Pull(ServerContext* ctx, const rpc::PullRequest* req, grpc::ServerWriter<rpc::PullChunk>* writer) override {
    return serve(ctx, "Pull", [&](const Caller& c) { return pull(c, ctx, req, writer); });
  }

  // A read: it changes nothing another replica sees. A step's sums stay
  // until each replica (by its session, not by counting calls) has pulled
  // them or the ring of kept steps moves on.
  grpc::Status pull(const Caller& caller, ServerContext* ctx, const rpc::PullRequest* req,
                    grpc::ServerWriter<rpc::PullChunk>* writer) {
    std::unique_lock<std::mutex> lock(mu);
    if (ended() && !serves_after_finish(req->step())) return ended_status();
    if (phase == Phase::kWaitingInit) return grpc::Status(StatusCode::FAILED_PRECONDITION, "Pull before Init");
    if (grpc::Status s = authorize_locked(caller, req->replica(), "Pull", true); !s.ok()) return s;
    heard(req->replica());
    rpc::PullChunk out;
    if (!sync) {  // the current values of every shard
      out.mutable_header()->set_ready(true);
      out.mutable_header()->set_step(updates->global_step());
      if (!values_snapshot || values_snapshot_step != updates->global_step()) {
        auto copies = std::make_shared<std::vector<std::vector<uint8_t>>>();
        for (size_t s = 0; s < updates->shards(); ++s) {
          const std::span<const float> values = std::as_const(*updates).values(s);
          const auto* b = reinterpret_cast<const uint8_t*>(values.data());
          copies->emplace_back(b, b + 4 * values.size());
        }
        values_snapshot = std::move(copies);
        values_snapshot_step = updates->global_step();
      }
      const auto held = values_snapshot;  // kept while streaming, even if a newer step replaces it
      lock.unlock();
      if (!writer->Write(out)) return grpc::Status(StatusCode::CANCELLED, "Pull: client went away");
      for (size_t s = 0; s < held->size(); ++s)
        if (!write_shard(writer, s, (*held)[s], true)) return grpc::Status(StatusCode::CANCELLED, "Pull: client went away");
      return grpc::Status::OK;
    }
    if (req->stream()) return stream_sums(ctx, req, writer, lock);
    const int64_t step = req->step();
    long_poll(lock, ctx, [&] { return step < steps->global_step(); });
    if (ended() && !serves_after_finish(step)) return ended_status();
    if (step >= steps->global_step()) {
      out.mutable_header()->set_ready(false);
      out.mutable_header()->set_step(step);
      for (uint32_t r : steps->missing()) out.mutable_header()->add_missing(r);
      lock.unlock();
      writer->Write(out);
      return grpc::Status::OK;
    }
    const std::shared_ptr<detail::StepSums> held = steps->sums_of(step);  // kept alive while we stream, even if the ring drops it
    if (!held || !held->complete) return too_old(req->replica(), step);
    const detail::StepSums& agg = *held;
    uint64_t bytes = 0;
    for (const auto& s : agg.shards) bytes += s.size();
    bytes_out += bytes;
    lock.unlock();
    out.mutable_header()->set_ready(true);
    out.mutable_header()->set_step(step);
    out.mutable_header()->set_contributions(agg.contributions);
    out.mutable_header()->set_mean_loss(agg.mean_loss);
    {
      std::lock_guard<std::mutex> relock(mu);
      report_step_times_locked(out.mutable_header());
    }
    if (!writer->Write(out)) return grpc::Status(StatusCode::CANCELLED, "Pull: client went away");
    for (size_t s = 0; s < agg.shards.size(); ++s)
      if (!write_shard(writer, s, agg.shards[s], false)) return grpc::Status(StatusCode::CANCELLED, "Pull: client went away");
    std::lock_guard<std::mutex> relock(mu);
    steps->pulled(held, req->replica());
    return grpc::Status::OK;
  }

  // The mean of the replicas' last step-time reports (mu held).
  void report_step_times_locked(rpc::PullHeader* head) const {
    std::vector<double> sum(kStepTimeFields, 0.0);
    uint32_t n = 0;
    for (const detail::ReplicaRecord& rep : replicas.records()) {
      if (rep.step_ms.size() != kStepTimeFields) continue;
      for (size_t i = 0; i < kStepTimeFields; ++i) sum[i] += rep.step_ms[i];
      ++n;
    }
    if (n == 0) return;
    for (double x : sum) head->add_replicas_step_ms(static_cast<float>(x / n));
    head->set_replicas_reporting(n);
  }

  grpc::Status too_old(uint32_t replica, int64_t step) const {
    return grpc::Status(StatusCode::FAILED_PRECONDITION,
                        replica_name(replica) + " asked for step " + std::to_string(step) +
                            ", which is no longer kept (the ps keeps the last " + std::to_string(opt.keep_steps) +
                            " steps, now at " + std::to_string(global_step_locked()) + "): it fell too far behind");
  }

  // A streamed pull: each shard's sum as soon as it is ready, then the
  // header once the step is complete. Near the call's deadline it ends with
  // a "not ready" header, and the replica asks again naming what it has.
  grpc::Status stream_sums(ServerContext* ctx, const rpc::PullRequest* req, grpc::ServerWriter<rpc::PullChunk>* writer,
                           std::unique_lock<std::mutex>& lock) {
    const int64_t step = req->step();
    if (step > steps->current_step())
      return grpc::Status(StatusCode::FAILED_PRECONDITION, replica_name(req->replica()) + " pulls step " + std::to_string(step) +
                                                         " but the ps is at step " + std::to_string(steps->current_step()));
    const std::shared_ptr<detail::StepSums> held = steps->sums_of(step);
    if (!held) return too_old(req->replica(), step);
    const detail::StepSums& agg = *held;
    std::vector<bool> sent(shards.size(), false);
    size_t sent_count = 0;
    for (uint32_t s : req->have()) {
      if (s >= shards.size())
        return grpc::Status(StatusCode::INVALID_ARGUMENT, "Pull: have names shard " + std::to_string(s) + " of " +
                                                        std::to_string(shards.size()));
      if (!sent[s]) ++sent_count;
      sent[s] = true;
    }
    auto until = Clock::now() + std::chrono::seconds(30);
    const auto deadline = ctx->deadline();
    const auto now_sys = std::chrono::system_clock::now();
    if (deadline > now_sys)
      until = std::min(until, Clock::now() + std::chrono::duration_cast<Clock::duration>(deadline - now_sys) -
                                  std::chrono::milliseconds(200));
    for (;;) {
      std::vector<uint32_t> fresh;
      cv.wait_until(lock, until, [&] {
        if (ended() || ctx->IsCancelled() || (agg.complete && sent_count == shards.size())) return true;
        for (size_t s = 0; s < shards.size(); ++s)
          if (agg.ready[s] && !sent[s]) return true;
        return false;
      });
      if (ended() && !(agg.complete && serves_after_finish(step))) return ended_status();
      if (ctx->IsCancelled()) return grpc::Status(StatusCode::CANCELLED, "Pull: client went away");
      for (uint32_t s = 0; s < shards.size(); ++s)
        if (agg.ready[s] && !sent[s]) fresh.push_back(s);
      if (!fresh.empty()) {
        for (uint32_t s : fresh) {
          sent[s] = true;
          bytes_out += agg.shards[s].size();
        }
        sent_count += fresh.size();
        lock.unlock();  // ready shards do not change
        for (uint32_t s : fresh)
          if (!write_shard(writer, s, agg.shards[s], false)) return grpc::Status(StatusCode::CANCELLED, "Pull: client went away");
        lock.lock();
        continue;
      }
      rpc::PullChunk out;
      rpc::PullHeader* head = out.mutable_header();
      head->set_step(step);
      if (agg.complete && sent_count == shards.size()) {
        head->set_ready(true);
        head->set_contributions(agg.contributions);
        head->set_mean_loss(agg.mean_loss);
        report_step_times_locked(head);
        steps->pulled(held, req->replica());
      } else if (Clock::now() >= until) {
        head->set_ready(false);
        if (step == steps->current_step())
          for (uint32_t r : steps->missing()) head->add_missing(r);
      } else {
        continue;  // woken for nothing new
      }
      lock.unlock();
      writer->Write(out);
      return grpc::Status::OK;
    }
  }

  // Streams one shard's buffer: an aggregated payload, or (values) float32s.
  static bool write_shard(grpc::ServerWriter<rpc::PullChunk>* writer, size_t s, const std::vector<uint8_t>& buf,
                          bool values) {
    return detail::for_each_chunk(buf, [&](uint64_t off, std::span<const uint8_t> piece) {
      rpc::PullChunk c;
      if (values) {
        rpc::TensorChunk* t = c.mutable_values();
        t->set_shard(static_cast<uint32_t>(s));
        t->set_offset(off);
        t->set_total_bytes(buf.size());
        t->set_data(piece.data(), piece.size());
      } else {
        rpc::PayloadChunk* p = c.mutable_payload();
        p->set_shard(static_cast<uint32_t>(s));
        p->set_offset(off);
        p->set_total_bytes(buf.size());
        p->set_data(piece.data(), piece.size());
      }
      return writer->Write(c);
    });
  }

  grpc::Status Heartbeat(ServerContext* ctx, const rpc::HeartbeatRequest* req, rpc::HeartbeatReply* reply) override {
    return serve(ctx, "Heartbeat", [&](const Caller& c) { return heartbeat(c, req, reply); });
  }

  // Tells the replica how the run goes; a registered replica's beat also
  // keeps it alive, and says when it is done.
  grpc::Status heartbeat(const Caller& caller, const rpc::HeartbeatRequest* req, rpc::HeartbeatReply* reply) {
    std::lock_guard<std::mutex> lock(mu);
    reply->set_global_step(global_step_locked());
    reply->set_finished(phase == Phase::kFinished);
    if (phase == Phase::kFailed) reply->set_failure("ps " + std::to_string(opt.task_index) + ": " + failure);
    if (phase != Phase::kRunning) return grpc::Status::OK;
    if (grpc::Status s = authorize_locked(caller, req->replica(), "Heartbeat", false); !s.ok()) return s;
    if (replicas[req->replica()].session.empty()) return grpc::Status::OK;  // not registered yet
    heard(req->replica());
    if (req->done() && !replicas[req->replica()].done) {
      replicas[req->replica()].done = true;
      log(replica_name(req->replica()) + " finished");
    }
    return grpc::Status::OK;
  }

  // Any role may read it (with a secret, serve() has checked one).
  grpc::Status Status(ServerContext* ctx, const rpc::StatusRequest*, rpc::StatusReply* reply) override {
    return serve(ctx, "Status", [&](const Caller&) { return status(reply); });
  }

  grpc::Status status(rpc::StatusReply* reply) {
    std::lock_guard<std::mutex> lock(mu);
    reply->set_phase(phase_name(phase));
    reply->set_global_step(global_step_locked());
    reply->set_sync(sync);
    reply->set_total_replicas(total);
    reply->set_replicas_to_aggregate(needed);
    reply->set_stale_pushes(stale_locked());
    reply->set_duplicate_pushes(duplicates_locked());
    reply->set_bytes_received(bytes_in);
    reply->set_bytes_sent(bytes_out);
    reply->set_failure(failure);
    reply->set_shards(static_cast<uint32_t>(shards.size()));
    for (size_t r = 0; r < replicas.size(); ++r) {
      rpc::ReplicaStatus* s = reply->add_replicas();
      s->set_replica(static_cast<uint32_t>(r));
      s->set_label(replicas[r].label);
      s->set_registered(replicas[r].registered);
      s->set_done(replicas[r].done);
      s->set_seconds_since_heard(replicas[r].registered ? seconds_since(replicas[r].last_heard) : -1);
      s->set_last_step_pushed(last_pushed_locked(static_cast<uint32_t>(r)));
    }
    return grpc::Status::OK;
  }

  grpc::Status Checkpoint(ServerContext* ctx, const rpc::CheckpointRequest* req,
                          grpc::ServerWriter<rpc::TensorChunk>* writer) override {
    return serve(ctx, "Checkpoint", [&](const Caller& c) { return checkpoint(c, req, writer); });
  }

  // The chief's checkpoint of this ps's shards (checkpoint_tensors.h):
  // cut out under the lock, streamed without it.
  grpc::Status checkpoint(const Caller& caller, const rpc::CheckpointRequest* req,
                          grpc::ServerWriter<rpc::TensorChunk>* writer) {
    std::vector<detail::CheckpointTensor> tensors;
    {
      if (grpc::Status s = chief_only(caller, req->replica(), "Checkpoint"); !s.ok()) return s;
      std::lock_guard<std::mutex> lock(mu);
      if (ended()) return ended_status();
      if (phase != Phase::kRunning) return grpc::Status(StatusCode::FAILED_PRECONDITION, "Checkpoint before Init");
      if (grpc::Status s = authorize_locked(caller, 0, "Checkpoint", true); !s.ok()) return s;
      heard(0);
      if (sync) {
        // The server states as the sum of req->step left them.
        auto states = detail::sync_checkpoint(*steps, req->step(), shards.size());
        if (!states)
          return grpc::Status(StatusCode::FAILED_PRECONDITION,
                              "Checkpoint: this ps keeps no server states of step " + std::to_string(req->step()) +
                                  " (global step " + std::to_string(global_step_locked()) +
                                  "; it keeps those of the last summed steps, for codecs that have them)");
        tensors = std::move(*states);
      } else {
        tensors = detail::async_checkpoint(*updates, *handler, shards.size());
      }
    }
    const bool ok = detail::stream_checkpoint(
        tensors, [&](uint32_t shard, const std::string& slot, uint64_t off, uint64_t total, std::span<const uint8_t> piece) {
          rpc::TensorChunk t;
          t.set_shard(shard);
          t.set_slot(slot);
          t.set_offset(off);
          t.set_total_bytes(total);
          t.set_data(piece.data(), piece.size());
          return writer->Write(t);
        });
    return ok ? grpc::Status::OK : grpc::Status(StatusCode::CANCELLED, "Checkpoint: client went away");
  }

  grpc::Status Shutdown(ServerContext* ctx, const rpc::ShutdownRequest* req, rpc::ShutdownReply* reply) override {
    return serve(ctx, "Shutdown", [&](const Caller& c) { return shutdown(c, req, reply); });
  }

  // The chief's process only: once it registered, its session too (a chief
  // that failed before registering may still stop the run).
  grpc::Status shutdown(const Caller& caller, const rpc::ShutdownRequest* req, rpc::ShutdownReply*) {
    if (grpc::Status s = chief_only(caller, req->replica(), "Shutdown"); !s.ok()) return s;
    std::lock_guard<std::mutex> lock(mu);
    if (phase == Phase::kRunning)
      if (grpc::Status s = authorize_locked(caller, 0, "Shutdown", false); !s.ok()) return s;
    const std::string reason = req->reason().substr(0, 2000);
    if (req->ok()) {
      if (!ended()) {
        phase = Phase::kFinished;
        log("the chief finished the run at global step " + std::to_string(global_step_locked()));
      }
    } else {
      fail_locked(replica_name(0) + " stopped the run: " + reason);
    }
    cv.notify_all();
    return grpc::Status::OK;
  }

  // --- timeouts ---
  void watch() {
    std::unique_lock<std::mutex> lock(mu);
    while (!stopping) {
      cv.wait_for(lock, std::chrono::milliseconds(250));
      if (ended()) continue;
      const double age = seconds_since(started);
      if (phase == Phase::kWaitingInit) {
        if (age > opt.startup_timeout_s)
          fail_locked(replica_name(0) + " (the chief) did not initialize this ps within " +
                      std::to_string(static_cast<int>(opt.startup_timeout_s)) + " s");
        continue;
      }
      const auto missing = unregistered();
      if (!missing.empty()) {
        if (age > opt.startup_timeout_s) {
          std::string names;
          for (uint32_t m : missing) names += (names.empty() ? "" : ", ") + replica_name(m);
          fail_locked("never joined within " + std::to_string(static_cast<int>(opt.startup_timeout_s)) + " s: " + names);
        }
        continue;
      }
      const detail::ReplicaTable::Verdict v = replicas.judge(
          Clock::now(), opt.peer_timeout_s, sync, needed, [&](uint32_t r) { return replica_name(r); },
          [&](uint32_t r) { return last_pushed_locked(r); });
      for (const std::string& gone : v.newly_gone) log(gone + ": counted as gone");
      if (v.failure) fail_locked(*v.failure);
    }
  }
};

ParameterServer::ParameterServer(const std::string& address, ServerOptions options, UpdateHandler* handler)
    : impl_(std::make_unique<Impl>(address, std::move(options), handler)) {
  grpc::ServerBuilder b;
  if (!impl_->opt.secret && !address.empty() && !is_loopback_address(address))
    std::fprintf(stderr,
                 "ps %d: WARNING: listening on %s WITHOUT a cluster secret: anyone who can reach this address can join, "
                 "push gradients as any replica, read the run's state and stop it. Give every task the run's secret "
                 "(--secret_file or TG_CLUSTER_SECRET; tg-cluster makes one), and use TLS on networks you do not control.\n",
                 impl_->opt.task_index, address.c_str());
  if (!address.empty()) b.AddListeningPort(address, detail::server_credentials(impl_->opt.tls), &impl_->port);
  b.SetMaxReceiveMessageSize(detail::kMaxMessageBytes);
  b.SetMaxSendMessageSize(detail::kMaxMessageBytes);
  b.RegisterService(impl_.get());
  impl_->server = b.BuildAndStart();
  if (!impl_->server || (!address.empty() && impl_->port == 0))
    throw PeerError("ps " + std::to_string(impl_->opt.task_index) + ": cannot listen on " + address +
                    " (address in use or not local?)");
  impl_->monitor = std::thread([this] { impl_->watch(); });
  if (!address.empty())
    impl_->log("listening on " + address.substr(0, address.rfind(':')) + ":" + std::to_string(impl_->port));
}

std::shared_ptr<grpc::Channel> detail::in_process_channel(ParameterServer& ps) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(detail::kMaxMessageBytes);
  args.SetMaxSendMessageSize(detail::kMaxMessageBytes);
  return ps.impl_->server->InProcessChannel(args);
}

ParameterServer::~ParameterServer() {
  impl_->stopping = true;
  impl_->cv.notify_all();
  if (impl_->monitor.joinable()) impl_->monitor.join();
  impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  impl_->server->Wait();
}

int ParameterServer::port() const { return impl_->port; }

void ParameterServer::stop(bool ok, const std::string& reason) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (ok) {
    if (!impl_->ended()) impl_->phase = Phase::kFinished;
  } else {
    impl_->fail_locked(reason);
  }
  impl_->cv.notify_all();
}

void ParameterServer::run() {
  std::string failure;
  {
    std::unique_lock<std::mutex> lock(impl_->mu);
    impl_->cv.wait(lock, [&] { return impl_->ended(); });
    failure = impl_->phase == Phase::kFailed ? impl_->failure : "";
  }
  // Let pollers and heartbeats hear how the run ended before the port closes.
  std::this_thread::sleep_for(std::chrono::duration<double>(std::min(3.0, std::max(0.5, 1.5 * impl_->opt.poll_s))));
  impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  if (!failure.empty()) throw PeerError("ps " + std::to_string(impl_->opt.task_index) + ": " + failure);
}

}  // namespace terngrad::comm
