// The replica side of the service (worker_client.h), private to
// comm/service: one WorkerClient's connections to its ps tasks and the state
// they share, defined by concern:
//   worker_client.cpp    every call's retry and cancellation (call, arm),
//                        failure, the exchanges through ps 0, the public class
//   worker_liveness.cpp  heartbeats (one thread per ps) and the watchdog
//   worker_join.cpp      the chief's Init of each ps, every replica's Register
//   worker_rewind.cpp    a sync run's rewind after a ps restarted
//   worker_step.cpp      one step's pushes and pulls, plain and pipelined
//   worker_reads.cpp     async values, checkpoints and server states
// Never here: a codec's arithmetic (payloads arrive encoded) or a model.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "parameter_server.grpc.pb.h"
#include "push_writer.h"
#include "terngrad/comm/credentials.h"
#include "terngrad/comm/errors.h"
#include "terngrad/comm/worker_client.h"

namespace terngrad::comm {

namespace detail {

inline bool retryable(grpc::StatusCode c) {
  return c == grpc::StatusCode::UNAVAILABLE || c == grpc::StatusCode::DEADLINE_EXCEEDED ||
         c == grpc::StatusCode::RESOURCE_EXHAUSTED;
}

// Runs f(p) for every ps p, in parallel when there are several; rethrows the
// first exception.
inline void for_each_ps(int num_ps, const std::function<void(int)>& f) {
  if (num_ps == 1) {
    f(0);
    return;
  }
  std::vector<std::future<void>> jobs;
  for (int p = 0; p < num_ps; ++p) jobs.push_back(std::async(std::launch::async, f, p));
  std::exception_ptr first;
  for (auto& j : jobs) {
    try {
      j.get();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace detail

struct WorkerClient::Impl {
  using Clock = std::chrono::steady_clock;
  using StatusCode = grpc::StatusCode;

  std::vector<std::string> addresses;
  Layout layout;
  int replica;
  bool sync;
  int total, needed;
  ClientOptions opt;
  uint64_t fingerprint;
  // Sent with every call: this process's session id (what the ps binds the
  // replica to at Register; the chief's Init tells a retry from a restart)
  // and, with a secret, the replica's token.
  std::string session = new_session_id();
  std::string auth_token;
  std::vector<std::shared_ptr<grpc::Channel>> channels;  // [ps]
  std::vector<std::unique_ptr<rpc::ParameterServer::Stub>> stubs;
  std::vector<int64_t> async_steps;  // per ps: the step the last pulled values belong to

  std::atomic<uint64_t> payload_sent{0}, payload_received{0}, message_sent{0}, message_received{0};

  // Set by the watchdog, a heartbeat or any call: why the run is over for us.
  std::mutex mu;
  std::condition_variable cv;
  std::string failure;
  bool ended = false;
  bool stop_beat = false;
  int64_t step_for_beat = 0;
  bool done = false;
  // Liveness of each ps as its heartbeats see it (mu guards): when it last
  // answered (epoch: never yet), the last error of an unanswered beat, and
  // whether the watchdog declared it unreachable.
  Clock::time_point started = Clock::now();
  std::vector<Clock::time_point> last_heard;
  std::vector<std::string> beat_error;
  std::vector<bool> declared_silent;
  std::vector<std::thread> beaters;  // one per ps, so a frozen ps delays nobody else's beats
  std::thread watchdog;
  // Contexts of the calls in flight (mu guards). A ps that died or froze
  // leaves calls waiting for it (wait_for_ready, long polls) until their
  // deadline; once the run is over for us they are cancelled instead, so the
  // process ends within the peer timeout, not the rpc timeout.
  std::set<grpc::ClientContext*> live_calls;
  bool cancel_calls = false;  // set with failure, or when closing

  // --- the pipelined step (begin_step .. end_step); pm guards it ---
  struct Bucket {
    int64_t step = 0;
    float loss = 0;
    std::vector<uint32_t> local;  // ps-local shard indices
    std::vector<std::span<const uint8_t>> payloads;
    std::vector<float> step_ms;
    size_t priority = 0;  // its first layout shard: earlier layers' shards leave first
  };
  std::vector<uint32_t> local_index;  // layout shard -> index on its ps
  std::mutex pm;
  std::condition_variable pcv;
  // Per ps: the buckets waiting to leave, the lowest priority first (equal
  // ones in order). The layout numbers shards in variable order, so the
  // first layers' gradients, finished last by the backward pass, overtake
  // the rest of a large later layer (P3, Jayarajan et al. 2019): their sums
  // come back first, and the next forward pass starts on them.
  std::vector<std::deque<Bucket>> queues;
  std::vector<std::thread> senders;        // started at the first pipelined step
  bool stop_senders = false;
  size_t pushes_pending = 0;
  int64_t pipe_step = -1;
  std::vector<std::vector<uint8_t>>* pipe_sums = nullptr;
  std::deque<size_t> arrived;  // shards whose sums are in, not yet handed out
  size_t delivered = 0;
  std::exception_ptr pipe_error;  // the first failure of a push or pull of the step
  std::vector<std::thread> pullers;
  std::vector<rpc::PullHeader> pipe_heads;
  std::vector<grpc::ClientContext*> live_pulls;  // cancelled when the step fails
  Clock::time_point pipe_start, pushed_at, first_sum_at;
  // The push rate: bytes over the time at least one push was in flight,
  // per step (push_rate() reads the last step's).
  int in_flight = 0;
  Clock::time_point busy_since;
  double busy_s = 0;
  uint64_t busy_bytes = 0;
  double push_rate = 0;
  std::vector<float> step_report;  // attached to the step's first bucket, then cleared

  struct Cancelled {};  // a pull stopped because the step already failed
  void fail_step_locked(std::exception_ptr e);

  std::string ps_name(int p) const { return "ps " + std::to_string(p) + " at " + addresses[p]; }
  // A ps's own verdict ("ps 0: <why>", an ABORTED answer or a heartbeat's
  // failure) named with its address, as every other failure of that ps is:
  // "ps 0 at <address>: <why>". Which of the two a woken replica reads first
  // (the verdict, or the ps gone) is a race; either way the log says where.
  std::string from_ps(int p, const std::string& verdict) const;
  void check_state();
  void set_failure(const std::string& why);

  // Who this call comes from: every context gets it, deadlines or not.
  void identify(grpc::ClientContext& ctx) const;

  // The run is over for this process: remember why and cancel every call in flight.
  void fail_locked(const std::string& why);
  void cancel_all_locked();

  // Keeps a context cancellable while its call runs; declared after the
  // context, so it lets go of it before the context is destroyed.
  class [[nodiscard]] Tracked {
   public:
    Tracked(Impl& m, grpc::ClientContext& ctx) : m_(m), ctx_(&ctx) {
      std::lock_guard<std::mutex> lock(m_.mu);
      m_.live_calls.insert(ctx_);
      if (m_.cancel_calls || m_.rewind == Rewind::kNeeded) ctx_->TryCancel();  // cancelled as soon as it starts
    }
    ~Tracked() {
      std::lock_guard<std::mutex> lock(m_.mu);
      m_.live_calls.erase(ctx_);
    }
    Tracked(const Tracked&) = delete;
    Tracked& operator=(const Tracked&) = delete;

   private:
    Impl& m_;
    grpc::ClientContext* ctx_;
  };

  // The one place a call's context is prepared: deadline, wait_for_ready,
  // and registered for cancellation while the returned guard lives.
  Tracked arm(grpc::ClientContext& ctx, bool wait_for_ready = true);

  // Calls attempt() until it returns OK; maps failures to exceptions. A
  // refusal ends the process's run. Whether a ps is unreachable is the
  // heartbeats' call (the watchdog): a call that ran out of time while the ps
  // still answers heartbeats met a slow ps, not a dead one, and is asked again.
  void call(int p, const char* what, const std::function<grpc::Status()>& attempt);

  void heard(int p) {
    std::lock_guard<std::mutex> lock(mu);
    last_heard[p] = Clock::now();
  }

  // Heartbeats to ps p: keep this replica alive in its eyes and note when it
  // last answered (the watchdog judges that).
  void beat_loop(size_t p);

  // Declares a ps unreachable once it has been silent for the peer timeout
  // (or, never heard from, for the startup timeout), ending the run with
  // every call in flight cancelled. It judges by the clock, not by a call's
  // outcome, so a frozen ps is noticed even while calls to it still wait.
  void watchdog_loop();
  void sender_loop(int p);
  void push_bucket_to(int p, const Bucket& b);

  // Receives ps p's sums of the pipelined step as the ps completes them.
  void pull_stream(int p);
  void join_pullers();

  // What the ps tasks' replies to one push say, together.
  static PushOutcome outcome_of(const std::vector<rpc::PushReply>& replies);
  // A Push call's first message: this replica, the step, the loss.
  rpc::PushChunk push_head(int64_t step, float loss) const;
  // One shard's payload chunks, written to a Push stream.
  bool write_payload(detail::PushWriter& w, uint32_t local, std::span<const uint8_t> buf, uint64_t& bytes);

  // ---- the streamed async push (begin_push .. end_push); sm guards it ----
  struct StreamedPush {
    float loss = 0;
    bool loss_set = false, ended = false;
    std::vector<std::vector<std::pair<uint32_t, std::span<const uint8_t>>>> queued;  // [ps]: (local shard, bytes)
    std::vector<rpc::PushReply> replies;
    std::vector<std::thread> writers;
    std::exception_ptr error;
    // [ps]: the count of turn-asking pulls that must have ended before this
    // push's first bytes leave (push_turns.h): those started before begin_push.
    std::vector<uint64_t> turns_needed;
  };
  std::mutex sm;
  std::condition_variable scv;
  StreamedPush streamed;
  // Writes ps p's part of the streamed push as its payloads are queued.
  void stream_push_to(int p);

  // ---- the streamed async pull (begin_pull .. end_pull); sm guards it ----
  struct StreamedPull {
    std::vector<std::span<float>> values;  // [variable], the destination
    std::vector<bool> landed;              // [layout shard]
    std::vector<bool> answered;            // [ps]: its header arrived
    std::vector<std::thread> readers;
    std::exception_ptr error;
  };
  StreamedPull pulled;
  // [ps]: pulls that asked for a push turn, started and ended (however they
  // ended: an error is end_pull's to report, and the push meets it too);
  // sized per ps by the constructor, sm guards them.
  std::vector<uint64_t> turn_pulls_started, turn_pulls_ended;
  // Reads ps p's values into pulled.values as they arrive; with
  // after_own_push, asks p to answer once this replica's push of that step
  // is applied; with push_turn, to end the call once the next push may go.
  void stream_pull_from(int p, std::optional<int64_t> after_own_push, bool push_turn);

  // ---- the exchanges through ps 0: scale sharing, multi-round pre-rounds ----

  // Reports req to ps 0 and long-polls it until its reply says the exchange
  // is complete: each poll sends req again with a fresh deadline (a long poll
  // ends at the ps's poll interval). rpc(ctx, req, reply) is the stub's call.
  template <class Reply, class Request, class Rpc>
  Reply report_until_ready(const char* what, const Request& req, Rpc rpc) {
    for (;;) {
      Reply reply;
      call(0, what, [&] {
        grpc::ClientContext ctx;
        const auto armed = arm(ctx);
        message_sent += req.ByteSizeLong();
        reply.Clear();
        return rpc(&ctx, req, &reply);
      });
      message_received += reply.ByteSizeLong();
      if (reply.ready()) return reply;
    }
  }

  // ---- join: the chief's Init of each ps, then every replica's Register ----

  // The Init header for ps p: the whole layout's variables, p's shards, the
  // run's settings.
  rpc::InitChunk init_header(int p, int64_t global_step, uint64_t rewind_id = 0) const;

  // One tensor of ps-local shard `local` (slot "" for values), in chunks.
  bool write_init_tensor(grpc::ClientWriter<rpc::InitChunk>& w, size_t local, const std::string& slot,
                         std::span<const uint8_t> bytes);

  // Async: every shard's values and the update rule's slots, cut from the
  // whole variables' tensors.
  bool write_async_tensors(grpc::ClientWriter<rpc::InitChunk>& w, int p, const InitTensors& init);

  // Sync, resuming: the server states of p's shards (codecs that keep one).
  bool write_server_states(grpc::ClientWriter<rpc::InitChunk>& w, int p, const InitTensors& init);

  // The chief's Init of ps p: the header, then the tensors its run needs.
  void init_ps(int p, int64_t global_step, const InitTensors* init, uint64_t rewind_id = 0);

  // Async (ClientOptions::ps_rejoin_window_s): a ps that restarted, found by
  // a call's refusal (restarted_ps.h). The chief refills it (refill), every
  // replica registers with it again; one rejoin at a time. joined: join()
  // has returned (before that a ps waiting for Init is only early).
  std::function<InitTensors()> refill;
  std::mutex rejoin_mu;
  // [ps] async rejoins so far (guarded by mu): a pull sent with this replica's push
  // (after_own_push) that meets its ps's restart stops waiting for that push,
  // which went to the ps before the restart (applied there and lost with it,
  // or never read) and would never arrive at the refilled one.
  std::vector<uint64_t> restarts_met;
  uint64_t restarts_met_of(int p) {
    std::lock_guard<std::mutex> lock(mu);
    return restarts_met[p];
  }
  bool joined = false;
  bool rejoins_restarted_ps();
  void rejoin_restarted_ps(int p, const std::string& refusal);
  // One Register call with ps p (its long poll included); without a cluster
  // secret, "already registered" is asked again until wait_until
  // (register_deadline(): a little past the peer timeout; see register_with).
  rpc::RegisterReply register_call(int p, Clock::time_point wait_until);
  Clock::time_point register_deadline() const;
  // One Register with ps p that binds this process's session (it waits for
  // the chief's Init, not for the other replicas); false while p waits for Init.
  bool register_once(int p);

  // Registers with ps p and waits until every replica has; returns the run's
  // global step as p says. Without a cluster secret, a restarted replica may
  // register only once the ps has counted its previous process as gone
  // (peer_timeout of silence): until a little after that, "already
  // registered" means wait.
  int64_t register_with(int p);
  rpc::RegisterReply register_until_ready(int p);

  // Sync (ClientOptions::ps_rejoin_window_s > 0, after join()): a ps that
  // does not know this replica (a call's refusal, restarted_ps.h, or a
  // heartbeat's unknown_replica) means a ps restarted or the chief rewound
  // the run. need_rewind_locked() marks it (rewind = kNeeded) and cancels
  // the calls in flight; from then on check_state() throws PsRestarted until
  // WorkerClient::rewind_run / rejoin_rewound_run (kRejoining) is done.
  // rejoins counts those done, so a heartbeat answered across one is not
  // taken for news. run_epoch: the rewind id every ps gave at the last
  // registration. mu guards all four.
  enum class Rewind { kNone, kNeeded, kRejoining };
  Rewind rewind = Rewind::kNone;
  uint64_t rejoins = 0;
  uint64_t run_epoch = 0;
  bool rewinds_sync_run_locked() const { return sync && opt.ps_rejoin_window_s > 0 && joined; }
  void need_rewind_locked();
  // The pipelined step a PsRestarted interrupted: its queued buckets
  // dropped, the pushes in flight and the pullers waited for.
  void abandon_pipelined_step();
  // Both rewind calls begin so: the step abandoned, rewind = kRejoining;
  // returns the rewind id this replica last registered under.
  uint64_t begin_rejoin();
  // Registers with every ps until each is ready at the same global step and
  // a rewind id above `after`; returns that step. Bounded by the window.
  int64_t register_after_rewind(uint64_t after, const std::string& who);

  // ---- push ----

  // Shard payload chunks of one ps, written to a Push stream.
  bool write_payloads(detail::PushWriter& w, int p, std::span<const std::span<const uint8_t>> payloads,
                      uint64_t& bytes);
};

}  // namespace terngrad::comm
