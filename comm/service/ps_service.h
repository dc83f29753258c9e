// The parameter server's service (ps_server.h), private to comm/service:
// one lock-guarded state and the gRPC calls on it, defined by concern:
//   ps_server.cpp     serve() (every call's entry), authorization, Heartbeat,
//                     Status, Checkpoint, Shutdown, the timeouts, the public class
//   ps_join.cpp       Init and Register
//   ps_exchanges.cpp  ExchangeScales and ExchangePresums
//   ps_push.cpp       Push
//   ps_pull.cpp       Pull (a step's sums, whole or streamed; async values)
// Every call enters through serve(): it authenticates the caller, turns
// exceptions into statuses and logs refusals; each handler then authorizes
// the caller for the replica it names (authorize_locked) and checks the
// whole request before anything changes. The step logic lives in units
// without gRPC: sync_steps.h, async_updates.h, scale_exchange.h,
// presum_exchange.h, replica_table.h, init_intake.h, push_intake.h,
// checkpoint_tensors.h. Never here: a model or an optimizer (the update rule
// is the UpdateHandler the program plugs in). Long polls wait on one
// condition variable; a monitor thread (watch) enforces the startup and
// liveness timeouts.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "async_updates.h"
#include "init_intake.h"
#include "parameter_server.grpc.pb.h"
#include "presum_exchange.h"
#include "ps_methods.h"
#include "pull_stream.h"
#include "push_intake.h"
#include "push_skew.h"
#include "push_turns.h"
#include "refusal_log.h"
#include "replica_table.h"
#include "restarted_ps.h"
#include "scale_exchange.h"
#include "sync_steps.h"
#include "terngrad/comm/credentials.h"
#include "terngrad/comm/ps_server.h"

namespace terngrad::comm {

namespace detail {

enum class Phase { kWaitingInit, kRunning, kFinished, kFailed };
inline const char* phase_name(Phase p) {
  switch (p) {
    case Phase::kWaitingInit: return "waiting_init";
    case Phase::kRunning: return "running";
    case Phase::kFinished: return "finished";
    case Phase::kFailed: return "failed";
  }
  return "?";
}

// Who is calling: the role its token proves (none without a cluster
// secret), the session id it sent and its address.
struct Caller {
  std::optional<Role> role;
  std::string session;
  std::string peer;
};

// A metadata value, or "" when absent or too long to be ours.
inline std::string call_metadata(const grpc::ServerContext* ctx, const char* key) {
  const auto& md = ctx->client_metadata();
  const auto it = md.find(key);
  if (it == md.end() || it->second.size() > 256) return "";
  return std::string(it->second.data(), it->second.size());
}

inline double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace detail

struct ParameterServer::Impl final : public rpc::ParameterServer::Service {
  using Clock = std::chrono::steady_clock;
  using Phase = detail::Phase;
  using Caller = detail::Caller;
  using Shard = detail::IntakeShard;
  using StatusCode = grpc::StatusCode;
  using ServerContext = grpc::ServerContext;

  ServerOptions opt;
  UpdateHandler* handler;
  std::string address;
  int port = 0;
  std::unique_ptr<grpc::Server> server;

  std::mutex mu;
  // Most waits (held push replies, long polls, a rewind's wait for sums in
  // flight) share `cv`, notified whenever the ps's state moves. Two kinds of
  // waiters have their own, so that the several notifications of every push
  // (read, accepted, summed) do not wake them for nothing, each wake-up a task
  // switch and a turn at `mu` on a machine the replicas' compute shares:
  // streamed Pulls (`sums_cv`: a step's sums became ready) and run() and the
  // watchdog (`ended_cv`: the run ended or the ps stops), and async Pulls
  // waiting for a push turn (`turns_cv`: a push began, nearly ended or ended).
  // wake_all_locked() notifies all four where the run ends or rewinds.
  std::condition_variable cv;
  std::condition_variable sums_cv;
  std::condition_variable ended_cv;
  std::condition_variable turns_cv;
  void wake_all_locked() {
    cv.notify_all();
    sums_cv.notify_all();
    ended_cv.notify_all();
    turns_cv.notify_all();
  }
  Phase phase = Phase::kWaitingInit;
  std::string failure;
  const Clock::time_point started = Clock::now();
  // Where the startup rule (every replica registered within the startup
  // timeout) counts from: the ps's start, or its last rewind's (which
  // unregisters every replica).
  Clock::time_point registrations_open = started;
  // From the chief's Init.
  uint64_t fingerprint = 0;
  bool sync = true;
  int total = 0, needed = 0;  // replicas, replicas_to_aggregate
  std::vector<rpc::Variable> variables;
  // The shards of the current layout. A push reads them without the lock
  // (the intake's validation), so it holds the set it began with: a rewind
  // with a new plan (InitHeader.new_plan) puts a new set here, and the old
  // one lives on until the last such push lets go of it.
  std::shared_ptr<std::vector<Shard>> shard_set = std::make_shared<std::vector<Shard>>();
  std::vector<Shard>& shards() { return *shard_set; }
  detail::ReplicaTable replicas;
  // Set once by Init, and from then on only under mu (their headers say
  // which calls run without it).
  std::optional<detail::SyncSteps> steps;         // sync runs
  std::optional<detail::AsyncUpdates> updates;    // async runs
  std::optional<detail::PushSkew> skew;          // sync runs: how far a replica's pushes may lead
  // A held reply is sent after this at the latest (a bound, not the rule).
  static constexpr std::chrono::milliseconds kMaxReplyHold{1000};
  // Async runs: whose push crosses the link in next (push_turns.h). A pull
  // waiting for its replica's turn ends after kMaxTurnHold at the latest; a
  // turn not used lapses after kTurnReservation.
  std::optional<detail::PushTurns> turns;
  static constexpr std::chrono::milliseconds kMaxTurnHold{1000};
  static constexpr std::chrono::milliseconds kTurnReservation{20};
  std::optional<detail::ScaleExchange> scales;    // scale sharing (used on ps 0)
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
  // Sync rewinds (InitHeader.rewind_id): the id of the last one taken, and
  // the sums running without the lock (a rewind waits for them: they read
  // the SyncSteps it replaces).
  uint64_t run_epoch = 0;
  int sums_in_flight = 0;
  std::mutex log_mu;                      // guards refusals (logged outside mu)
  detail::RefusalLog refusals;

  Impl(const std::string& addr, ServerOptions o, UpdateHandler* h) : opt(std::move(o)), handler(h), address(addr) {
    if (opt.secret) auth.emplace(*opt.secret);
    // Pull writes its replies as ByteBuffers (pull_stream.h), through the
    // split-streaming form of the method: the request is read here, then
    // the replies written. The replicas see the same messages.
    MarkMethodStreamed(detail::parameter_server_method_index("Pull"),
                       new grpc::internal::SplitServerStreamingHandler<rpc::PullRequest, grpc::ByteBuffer>(
                           [this](ServerContext* ctx, detail::PullStreamer* streamer) {
                             rpc::PullRequest req;
                             if (!streamer->Read(&req))
                               return grpc::Status(StatusCode::INVALID_ARGUMENT, "Pull: no request");
                             detail::PullStream out(streamer);
                             return serve(ctx, "Pull", [&](const Caller& c) { return pull(c, ctx, &req, out); });
                           }));
  }

  void log(const std::string& msg) {
    if (opt.verbose) std::fprintf(stderr, "ps %d: %s\n", opt.task_index, msg.c_str());
  }
  std::string replica_name(uint32_t r) const;

  // --- state helpers (mu held) ---
  void fail_locked(const std::string& why);
  grpc::Status ended_status() const;
  bool ended() const { return phase == Phase::kFailed || phase == Phase::kFinished; }
  grpc::Status check_replica(uint32_t r) const;

  // Every call: authenticates the caller (with a secret, a call that proves
  // no role is refused before anything else, and learns nothing about the
  // run), runs the handler, and logs what it refused with the caller's
  // address (rate-limited). An exception becomes a status, never a crash.
  template <class Handler>
  grpc::Status serve(ServerContext* ctx, const char* call, Handler handle) {
    Caller caller;
    caller.peer = ctx->peer();
    caller.session = detail::call_metadata(ctx, kSessionMetadataKey);
    grpc::Status status;
    if (auth && !(caller.role = auth->verify(detail::call_metadata(ctx, kAuthMetadataKey)))) {
      status = grpc::Status(StatusCode::UNAUTHENTICATED,
                            "this parameter server needs the run's credentials (cluster secret)");
    } else {
      try {
        status = handle(caller);
      } catch (const std::bad_alloc&) {
        status = grpc::Status(StatusCode::RESOURCE_EXHAUSTED, std::string(call) + ": out of memory");
      } catch (const std::exception& e) {
        status = grpc::Status(StatusCode::INTERNAL, std::string(call) + ": " + e.what());
      }
    }
    // What a caller that cancelled its call (a replica that failed mid-push)
    // left half-sent is not refused: it went away.
    if (!status.ok() && ctx->IsCancelled()) status = grpc::Status(StatusCode::CANCELLED, std::string(call) + ": the caller cancelled");
    switch (status.error_code()) {
      case StatusCode::OK:
      case StatusCode::ABORTED:       // the run failed: the reason, not a refusal
      case StatusCode::OUT_OF_RANGE:  // the run finished
      case StatusCode::CANCELLED:     // the caller went away
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
  grpc::Status authorize_locked(const Caller& c, uint32_t r, const char* call, bool need_session) const;

  // Init, Checkpoint and Shutdown: the chief only.
  grpc::Status chief_only(const Caller& c, uint32_t claimed, const char* call) const;

  void heard(uint32_t r) { replicas.heard(r, Clock::now()); }

  // The run's global step (0 before Init), a replica's last step pushed
  // (-1 for none), the pushes dropped: from the run's step unit (mu held).
  int64_t global_step_locked() const;
  int64_t last_pushed_locked(uint32_t r) const;
  uint64_t stale_locked() const { return steps ? steps->stale() : 0; }
  uint64_t duplicates_locked() const;

  std::vector<uint32_t> unregistered() const { return replicas.unregistered(); }

  // Waits until pred() or the poll interval / the call's deadline / an end /
  // a rewind. Returns whether the run was rewound meanwhile: what the caller
  // read before waiting (its step, its registration) is then gone, and it
  // answers with rewound().
  template <class Pred>
  [[nodiscard]] bool long_poll(std::unique_lock<std::mutex>& lock, ServerContext* ctx, Pred pred) {
    const uint64_t epoch = run_epoch;
    auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(opt.poll_s));
    const auto deadline = ctx->deadline();
    const auto now_sys = std::chrono::system_clock::now();
    if (deadline > now_sys) {
      const auto left =
          std::chrono::duration_cast<Clock::duration>(deadline - now_sys) - std::chrono::milliseconds(200);
      until = std::min(until, Clock::now() + std::max(left, Clock::duration::zero()));
    }
    cv.wait_until(lock, until, [&] { return pred() || ended() || ctx->IsCancelled() || run_epoch != epoch; });
    return run_epoch != epoch;
  }
  // The answer to a call of `replica` that a rewind overtook: as to a replica
  // that has not registered (restarted_ps.h), which is what it now is.
  grpc::Status rewound(const char* call, uint32_t replica) const {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, std::string(call) + ": " + replica_name(replica) +
                                                                   detail::kNotRegistered + " (the run was rewound)");
  }

  // --- the service ---
  grpc::Status Init(ServerContext* ctx, grpc::ServerReader<rpc::InitChunk>* reader, rpc::InitReply* reply) override {
    return serve(ctx, "Init", [&](const Caller& c) { return init(c, reader, reply); });
  }

  // The whole request (header, layout, codecs, async tensors) is read and
  // checked before anything changes; a ps already running changes nothing.
  // Init: the chief's layout (and an async run's values, a resumed sync
  // run's server states), checked whole by the Init intake before the ps
  // changes anything.
  grpc::Status init(const Caller& caller, grpc::ServerReader<rpc::InitChunk>* reader, rpc::InitReply* reply);

  // An Init while the run goes on: a retry of the chief's own, or a new
  // chief process. In an async run (the ps holds the values) or a sync run
  // that keeps a rejoin window (keep_pulled_steps) the new chief changes
  // nothing and is told to register (and in sync, catch up:
  // reply->already_running); otherwise it ends the run (the other replicas
  // hold weights of a later step than its checkpoint, and no ps can rewind
  // them).
  grpc::Status init_again_locked(const Caller& caller, const rpc::InitHeader& h, rpc::InitReply* reply);

  // A sync run's rewind (InitHeader.rewind_id) on a running ps: its steps
  // start again at the header's global step with the Init's server states,
  // its exchanges are emptied, every replica must register again, and every
  // call waiting on the old steps is answered rewound(). Waits for the sums
  // in flight. A rewind id taken before (a retried Init) changes nothing.
  grpc::Status rewind_locked(std::unique_lock<std::mutex>& lock, const Caller& caller, detail::InitPlan& plan);

  // The run begins with an accepted Init's layout.
  grpc::Status start_run_locked(const Caller& caller, detail::InitPlan& plan);

  // A sync run's steps from the Init's header and server states (a start or a rewind).
  void start_sync_steps_locked(std::vector<detail::ShardCoding> coding, detail::InitPlan& plan);
  // The per-step exchanges (push skew, scales, presums) and the replica
  // table, empty for a run that starts or rewinds with `total` and `needed`.
  void reset_exchanges_locked(detail::InitPlan& plan);

  // An async run's values and the update rule's slots, from the Init's tensors.
  grpc::Status load_async_slots(detail::InitPlan& plan, detail::AsyncUpdates& fresh);

  grpc::Status Register(ServerContext* ctx, const rpc::RegisterRequest* req, rpc::RegisterReply* reply) override {
    return serve(ctx, "Register", [&](const Caller& c) { return register_replica(c, ctx, req, reply); });
  }

  // A replica joins with its process's session id, which every later call
  // of it must carry. Another session for a registered replica is a new
  // process of it (a restart): with a secret it proved to be that replica and
  // replaces the old one; without, it could be anyone, so it waits until
  // the old process has been silent for the peer timeout.
  grpc::Status register_replica(const Caller& caller, ServerContext* ctx, const rpc::RegisterRequest* req,
                                rpc::RegisterReply* reply);

  grpc::Status ExchangeScales(ServerContext* ctx, const rpc::ScalesRequest* req, rpc::ScalesReply* reply) override {
    return serve(ctx, "ExchangeScales", [&](const Caller& c) { return exchange_scales(c, ctx, req, reply); });
  }
  grpc::Status exchange_scales(const Caller& caller, ServerContext* ctx, const rpc::ScalesRequest* req,
                               rpc::ScalesReply* reply);

  grpc::Status ExchangePresums(ServerContext* ctx, const rpc::PresumRequest* req, rpc::PresumReply* reply) override {
    return serve(ctx, "ExchangePresums", [&](const Caller& c) { return exchange_presums(c, ctx, req, reply); });
  }

  // As exchange_scales: the whole request is checked (caller, replica,
  // variables, sizes, finite values) before anything is recorded.
  grpc::Status exchange_presums(const Caller& caller, ServerContext* ctx, const rpc::PresumRequest* req,
                                rpc::PresumReply* reply);

  grpc::Status Push(ServerContext* ctx, grpc::ServerReader<rpc::PushChunk>* reader, rpc::PushReply* reply) override {
    return serve(ctx, "Push", [&](const Caller& c) { return push(c, reader, reply); });
  }
  grpc::Status push(const Caller& caller, grpc::ServerReader<rpc::PushChunk>* reader, rpc::PushReply* reply);
  grpc::Status push_sync(const Caller& caller, const rpc::PushHeader& h, uint64_t epoch,
                         const std::vector<uint32_t>& ids,
                         std::vector<std::string>& payloads, uint64_t received, rpc::PushReply* reply);
  grpc::Status push_async(const Caller& caller, const rpc::PushHeader& h, const std::vector<std::string>& payloads,
                          uint64_t received, rpc::PushReply* reply);

  // After the chief finishes a sync run normally, the sums of completed
  // steps are still served (until run() closes the port): a replica that is
  // one pull behind the chief finishes its last step instead of failing.
  bool serves_after_finish(int64_t step) const;

  // A read: it changes nothing another replica sees. A step's sums stay
  // until each replica (by its session, not by counting calls) has pulled
  // them or the ring of kept steps moves on.
  grpc::Status pull(const Caller& caller, ServerContext* ctx, const rpc::PullRequest* req, detail::PullStream& out);
  // Async, a pull with push_turn whose values are sent: returns once replica
  // r may push (push_turns.h), or the run ended, the call was cancelled or
  // kMaxTurnHold passed (the push then goes anyway).
  void wait_push_turn(ServerContext* ctx, uint32_t r);

  // The mean of the replicas' last step-time reports (mu held).
  void report_step_times_locked(rpc::PullHeader* head) const;
  grpc::Status too_old(uint32_t replica, int64_t step) const;

  // A streamed pull: each shard's sum as soon as it is ready, then the
  // header once the step is complete. Near the call's deadline it ends with
  // a "not ready" header, and the replica asks again naming what it has.
  grpc::Status stream_sums(ServerContext* ctx, const rpc::PullRequest* req, detail::PullStream& out,
                           std::unique_lock<std::mutex>& lock);

  grpc::Status Heartbeat(ServerContext* ctx, const rpc::HeartbeatRequest* req, rpc::HeartbeatReply* reply) override {
    return serve(ctx, "Heartbeat", [&](const Caller& c) { return heartbeat(c, req, reply); });
  }

  // Tells the replica how the run goes; a registered replica's beat also
  // keeps it alive, and says when it is done.
  grpc::Status heartbeat(const Caller& caller, const rpc::HeartbeatRequest* req, rpc::HeartbeatReply* reply);

  // Any role may read it (with a secret, serve() has checked one).
  grpc::Status Status(ServerContext* ctx, const rpc::StatusRequest*, rpc::StatusReply* reply) override {
    return serve(ctx, "Status", [&](const Caller&) { return status(reply); });
  }
  grpc::Status status(rpc::StatusReply* reply);

  grpc::Status Checkpoint(ServerContext* ctx, const rpc::CheckpointRequest* req,
                          grpc::ServerWriter<rpc::TensorChunk>* writer) override {
    return serve(ctx, "Checkpoint", [&](const Caller& c) { return checkpoint(c, req, writer); });
  }

  // The chief's checkpoint of this ps's shards (checkpoint_tensors.h):
  // cut out under the lock, streamed without it.
  grpc::Status checkpoint(const Caller& caller, const rpc::CheckpointRequest* req,
                          grpc::ServerWriter<rpc::TensorChunk>* writer);

  grpc::Status Shutdown(ServerContext* ctx, const rpc::ShutdownRequest* req, rpc::ShutdownReply* reply) override {
    return serve(ctx, "Shutdown", [&](const Caller& c) { return shutdown(c, req, reply); });
  }

  // The chief's link probe: filler back, nothing read or changed. Bounded
  // both ways, so no caller can make the ps allocate more than 4 MiB.
  grpc::Status Probe(ServerContext* ctx, const rpc::ProbeRequest* req, rpc::ProbeReply* reply) override {
    return serve(ctx, "Probe", [&](const Caller& c) { return probe(c, req, reply); });
  }
  grpc::Status probe(const Caller& caller, const rpc::ProbeRequest* req, rpc::ProbeReply* reply) const;

  // The chief's process only: once it registered, its session too (a chief
  // that failed before registering may still stop the run).
  grpc::Status shutdown(const Caller& caller, const rpc::ShutdownRequest* req, rpc::ShutdownReply*);

  // --- timeouts ---
  // The monitor thread: every 250 ms, the timeouts at the time.
  void watch();
  // The startup and liveness rules of the replica table at `now` (mu held):
  // a run that cannot go on fails with the reason.
  void check_timeouts_locked(Clock::time_point now);
};

}  // namespace terngrad::comm
