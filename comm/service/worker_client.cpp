// The replica side of the service (worker_client.h).
#include "terngrad/comm/worker_client.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <set>
#include <thread>

#include "chunks.h"
#include "server_state.h"
#include "parameter_server.grpc.pb.h"
#include "tls_credentials.h"
#include "terngrad/comm/errors.h"

namespace terngrad::comm {

namespace {

using Clock = std::chrono::steady_clock;
using grpc::StatusCode;

bool retryable(StatusCode c) {
  return c == StatusCode::UNAVAILABLE || c == StatusCode::DEADLINE_EXCEEDED || c == StatusCode::RESOURCE_EXHAUSTED;
}

// Runs f(p) for every ps p, in parallel when there are several; rethrows the
// first exception.
void for_each_ps(int num_ps, const std::function<void(int)>& f) {
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

}  // namespace

struct WorkerClient::Impl {
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
  };
  std::vector<uint32_t> local_index;  // layout shard -> index on its ps
  std::mutex pm;
  std::condition_variable pcv;
  std::vector<std::deque<Bucket>> queues;  // per ps: pushes leave in order, one at a time
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
  std::vector<float> step_report;  // attached to the step's first bucket, then cleared

  struct Cancelled {};  // a pull stopped because the step already failed

  void fail_step_locked(std::exception_ptr e) {
    if (!pipe_error) pipe_error = e;
    for (grpc::ClientContext* c : live_pulls)
      if (c) c->TryCancel();
    pcv.notify_all();
  }

  std::string ps_name(int p) const { return "ps " + std::to_string(p) + " at " + addresses[p]; }
  // A ps's own verdict ("ps 0: <why>", an ABORTED answer or a heartbeat's
  // failure) named with its address, as every other failure of that ps is:
  // "ps 0 at <address>: <why>". Which of the two a woken replica reads first
  // (the verdict, or the ps gone) is a race; either way the log says where.
  std::string from_ps(int p, const std::string& verdict) const {
    const std::string own = "ps " + std::to_string(p) + ": ";
    return ps_name(p) + ": " + (verdict.rfind(own, 0) == 0 ? verdict.substr(own.size()) : verdict);
  }

  void check_state() {
    std::lock_guard<std::mutex> lock(mu);
    if (!failure.empty()) throw PeerError(failure);
    if (ended) throw RunEnded("the run finished (the chief shut the parameter servers down)");
  }

  void set_failure(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu);
    fail_locked(why);
  }

  // Who this call comes from: every context gets it, deadlines or not.
  void identify(grpc::ClientContext& ctx) const {
    ctx.AddMetadata(kSessionMetadataKey, session);
    if (!auth_token.empty()) ctx.AddMetadata(kAuthMetadataKey, auth_token);
  }

  // The run is over for this process: remember why and cancel every call in flight.
  void fail_locked(const std::string& why) {
    if (failure.empty()) failure = why;
    cancel_all_locked();
  }

  void cancel_all_locked() {
    cancel_calls = true;
    for (grpc::ClientContext* c : live_calls) c->TryCancel();
  }

  // Keeps a context cancellable while its call runs; declared after the
  // context, so it lets go of it before the context is destroyed.
  class [[nodiscard]] Tracked {
   public:
    Tracked(Impl& m, grpc::ClientContext& ctx) : m_(m), ctx_(&ctx) {
      std::lock_guard<std::mutex> lock(m_.mu);
      m_.live_calls.insert(ctx_);
      if (m_.cancel_calls) ctx_->TryCancel();  // gRPC cancels it as soon as it starts
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
  Tracked arm(grpc::ClientContext& ctx, bool wait_for_ready = true) {
    identify(ctx);
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::duration_cast<std::chrono::system_clock::duration>(
                         std::chrono::duration<double>(opt.rpc_timeout_s)));
    ctx.set_wait_for_ready(wait_for_ready);
    return Tracked(*this, ctx);
  }

  // Calls attempt() until it returns OK; maps failures to exceptions. A
  // refusal ends the process's run. Whether a ps is unreachable is the
  // heartbeats' call (the watchdog): a call that ran out of time while the ps
  // still answers heartbeats met a slow ps, not a dead one, and is asked again.
  void call(int p, const char* what, const std::function<grpc::Status()>& attempt) {
    Clock::time_point first_failure{};
    double backoff = 0.05;
    for (;;) {
      check_state();
      const grpc::Status s = attempt();
      if (s.ok()) {
        heard(p);  // an answer is as good as a heartbeat's (a run can be steps ahead of the first beat)
        return;
      }
      check_state();  // the run ended while we waited (and the call was cancelled): say why
      if (s.error_code() == StatusCode::ABORTED) {
        const std::string msg = from_ps(p, s.error_message());
        set_failure(msg);
        throw PeerError(msg);
      }
      if (s.error_code() == StatusCode::OUT_OF_RANGE) {
        std::lock_guard<std::mutex> lock(mu);
        ended = true;
        throw RunEnded(s.error_message());
      }
      if (!retryable(s.error_code())) {
        const std::string msg = ps_name(p) + " refused " + what + ": " + s.error_message();
        set_failure(msg);
        throw PeerError(msg);
      }
      // A deadline met while the ps answers heartbeats is asked again for as
      // long as it answers. Other transient errors (UNAVAILABLE with the
      // heartbeats getting through, RESOURCE_EXHAUSTED) get the peer timeout.
      if (s.error_code() != StatusCode::DEADLINE_EXCEEDED) {
        if (first_failure == Clock::time_point{}) first_failure = Clock::now();
        const double down = std::chrono::duration<double>(Clock::now() - first_failure).count();
        if (down > opt.peer_timeout_s) {
          const std::string msg = ps_name(p) + " answers heartbeats but failed " + what + " for " +
                                  std::to_string(static_cast<int>(down)) + " s (" + s.error_message() + ")";
          set_failure(msg);
          throw PeerError(msg);
        }
      }
      std::this_thread::sleep_for(std::chrono::duration<double>(backoff));
      backoff = std::min(1.0, backoff * 2);
    }
  }

  void heard(int p) {
    std::lock_guard<std::mutex> lock(mu);
    last_heard[p] = Clock::now();
  }

  // Heartbeats to ps p: keep this replica alive in its eyes and note when it
  // last answered (the watchdog judges that).
  void beat_loop(size_t p) {
    const double deadline_s = std::min(5.0, std::max(opt.heartbeat_s, opt.peer_timeout_s / 2));
    std::unique_lock<std::mutex> lock(mu);
    while (!stop_beat) {
      const int64_t step = step_for_beat;
      const bool is_done = done;
      lock.unlock();
      rpc::HeartbeatRequest req;
      req.set_replica(static_cast<uint32_t>(replica));
      req.set_step(step);
      req.set_done(is_done);
      rpc::HeartbeatReply reply;
      grpc::Status s;
      {
        grpc::ClientContext ctx;
        identify(ctx);
        ctx.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::duration_cast<std::chrono::system_clock::duration>(
                             std::chrono::duration<double>(deadline_s)));
        const Tracked tracked(*this, ctx);
        s = stubs[p]->Heartbeat(&ctx, req, &reply);
      }
      lock.lock();
      if (s.ok()) {
        last_heard[p] = Clock::now();
        if (!reply.failure().empty()) fail_locked(from_ps(static_cast<int>(p), reply.failure()));
        if (reply.finished()) ended = true;
      } else {
        beat_error[p] = s.error_message();
      }
      cv.wait_for(lock, std::chrono::duration<double>(opt.heartbeat_s), [&] { return stop_beat; });
    }
  }

  // Declares a ps unreachable once it has been silent for the peer timeout
  // (or, never heard from, for the startup timeout), ending the run with
  // every call in flight cancelled. It judges by the clock, not by a call's
  // outcome, so a frozen ps is noticed even while calls to it still wait.
  void watchdog_loop() {
    const double startup_s = opt.startup_timeout_s > 0 ? opt.startup_timeout_s : opt.peer_timeout_s;
    const auto tick = std::chrono::duration<double>(std::min(0.25, opt.heartbeat_s));
    std::unique_lock<std::mutex> lock(mu);
    while (!stop_beat) {
      cv.wait_for(lock, tick, [&] { return stop_beat; });
      if (stop_beat || ended || !failure.empty()) continue;
      const auto now = Clock::now();
      for (size_t p = 0; p < last_heard.size(); ++p) {
        const bool heard = last_heard[p] != Clock::time_point{};
        const double quiet = std::chrono::duration<double>(now - (heard ? last_heard[p] : started)).count();
        if (quiet <= (heard ? opt.peer_timeout_s : startup_s)) continue;
        declared_silent[p] = true;
        const std::string secs = std::to_string(static_cast<int>(quiet));
        const std::string why = beat_error[p].empty() ? "" : " (" + beat_error[p] + ")";
        fail_locked(heard ? ps_name(static_cast<int>(p)) + " unreachable: silent for " + secs +
                                " s, no answer to heartbeats" + why
                          : ps_name(static_cast<int>(p)) + " unreachable: no answer in the " + secs +
                                " s since this replica started" + why);
        break;
      }
    }
  }

  void sender_loop(int p) {
    std::unique_lock<std::mutex> lk(pm);
    for (;;) {
      pcv.wait(lk, [&] { return stop_senders || !queues[p].empty(); });
      if (stop_senders) return;
      Bucket b = std::move(queues[p].front());
      queues[p].pop_front();
      lk.unlock();
      std::exception_ptr error;
      try {
        push_bucket_to(p, b);
      } catch (...) {
        error = std::current_exception();
      }
      lk.lock();
      if (error) fail_step_locked(error);
      if (--pushes_pending == 0) pushed_at = Clock::now();
      pcv.notify_all();
    }
  }

  void push_bucket_to(int p, const Bucket& b) {
    rpc::PushReply reply;
    uint64_t bytes = 0;
    call(p, "Push", [&] {
      grpc::ClientContext ctx;
      const auto armed = arm(ctx);
      reply.Clear();
      auto w = stubs[p]->Push(&ctx, &reply);
      rpc::PushChunk head;
      head.mutable_header()->set_replica(static_cast<uint32_t>(replica));
      head.mutable_header()->set_step(b.step);
      head.mutable_header()->set_loss(b.loss);
      for (uint32_t s : b.local) head.mutable_header()->add_shards(s);
      for (float t : b.step_ms) head.mutable_header()->add_step_ms(t);
      message_sent += head.ByteSizeLong();
      bytes = 0;
      bool ok = w->Write(head);
      for (size_t i = 0; ok && i < b.local.size(); ++i) ok = write_payload(*w, b.local[i], b.payloads[i], bytes);
      w->WritesDone();
      return w->Finish();
    });
    payload_sent += bytes;
    message_received += reply.ByteSizeLong();
  }

  // Receives ps p's sums of the pipelined step as the ps completes them.
  void pull_stream(int p) {
    const auto& mine = layout.shards_on[p];
    std::vector<detail::Reassembly> parts(mine.size());
    std::vector<bool> have(mine.size(), false);
    for (size_t local = 0; local < mine.size(); ++local) parts[local].adopt(std::move((*pipe_sums)[mine[local]]));
    for (;;) {
      rpc::PullHeader head;
      call(p, "Pull", [&] {
        grpc::ClientContext ctx;
        const auto armed = arm(ctx);
        {
          std::lock_guard<std::mutex> lk(pm);
          if (pipe_error) throw Cancelled{};
          live_pulls[p] = &ctx;
        }
        rpc::PullRequest req;
        req.set_replica(static_cast<uint32_t>(replica));
        req.set_step(pipe_step);
        req.set_stream(true);
        for (size_t local = 0; local < mine.size(); ++local) {
          if (have[local]) req.add_have(static_cast<uint32_t>(local));
          else parts[local].restart();
        }
        message_sent += req.ByteSizeLong();
        auto r = stubs[p]->Pull(&ctx, req);
        rpc::PullChunk c;
        std::string err;
        head.Clear();
        while (r->Read(&c)) {
          message_received += c.ByteSizeLong();
          if (c.has_header()) {
            head = c.header();
          } else if (c.has_payload() && err.empty()) {
            const rpc::PayloadChunk& pc = c.payload();
            const uint32_t local = pc.shard();
            if (local >= parts.size() || have[local]) {
              err = "sum for unknown or repeated shard " + std::to_string(local);
              continue;
            }
            err = parts[local].add(pc.offset(), pc.total_bytes(), pc.data(), UINT64_MAX);
            if (err.empty() && parts[local].complete()) {
              have[local] = true;
              payload_received += parts[local].bytes().size();
              std::lock_guard<std::mutex> lk(pm);
              (*pipe_sums)[mine[local]] = std::move(parts[local].bytes());
              arrived.push_back(mine[local]);
              pcv.notify_all();
            }
          }
        }
        grpc::Status s = r->Finish();
        {
          std::lock_guard<std::mutex> lk(pm);
          live_pulls[p] = nullptr;
          if (pipe_error) throw Cancelled{};
        }
        if (s.ok() && !err.empty()) s = grpc::Status(StatusCode::DATA_LOSS, err);
        return s;
      });
      if (!head.ready()) continue;
      for (size_t local = 0; local < mine.size(); ++local)
        if (!have[local])
          throw PeerError(ps_name(p) + " ended step " + std::to_string(pipe_step) + " without the sum of its shard " +
                          std::to_string(local));
      std::lock_guard<std::mutex> lk(pm);
      pipe_heads[p] = head;
      return;
    }
  }

  void join_pullers() {
    for (auto& t : pullers)
      if (t.joinable()) t.join();
    pullers.clear();
  }

  // One shard's payload chunks, written to a Push stream.
  bool write_payload(grpc::ClientWriter<rpc::PushChunk>& w, uint32_t local, std::span<const uint8_t> buf,
                     uint64_t& bytes) {
    bytes += buf.size();
    return detail::for_each_chunk(buf, [&](uint64_t off, std::span<const uint8_t> piece) {
      rpc::PushChunk c;
      rpc::PayloadChunk* pc = c.mutable_payload();
      pc->set_shard(local);
      pc->set_offset(off);
      pc->set_total_bytes(buf.size());
      pc->set_data(piece.data(), piece.size());
      message_sent += c.ByteSizeLong();
      return w.Write(c);
    });
  }

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
  rpc::InitChunk init_header(int p, int64_t global_step) const {
    rpc::InitChunk head;
    rpc::InitHeader* h = head.mutable_header();
    h->set_replica(0);
    for (const auto& v : layout.variables) {
      rpc::Variable* pv = h->add_variables();
      pv->set_name(v.name);
      pv->set_size(v.size);
      pv->set_codec(v.codec);
    }
    for (size_t s : layout.shards_on[p]) {
      rpc::Shard* ps = h->add_shards();
      ps->set_variable(layout.shards[s].variable);
      ps->set_begin(layout.shards[s].begin);
      ps->set_count(layout.shards[s].count);
    }
    h->set_fingerprint(fingerprint);
    h->set_global_step(global_step);
    h->set_sync(sync);
    h->set_total_replicas(static_cast<uint32_t>(total));
    h->set_replicas_to_aggregate(static_cast<uint32_t>(needed));
    return head;
  }

  // One tensor of ps-local shard `local` (slot "" for values), in chunks.
  bool write_init_tensor(grpc::ClientWriter<rpc::InitChunk>& w, size_t local, const std::string& slot,
                         std::span<const uint8_t> bytes) {
    return detail::for_each_chunk(bytes, [&](uint64_t off, std::span<const uint8_t> part) {
      rpc::InitChunk c;
      rpc::TensorChunk* t = c.mutable_tensor();
      t->set_shard(static_cast<uint32_t>(local));
      t->set_slot(slot);
      t->set_offset(off);
      t->set_total_bytes(bytes.size());
      t->set_data(part.data(), part.size());
      message_sent += c.ByteSizeLong();
      return w.Write(c);
    });
  }

  // Async: every shard's values and the update rule's slots, cut from the
  // whole variables' tensors.
  bool write_async_tensors(grpc::ClientWriter<rpc::InitChunk>& w, int p, const InitTensors& init) {
    auto send = [&](size_t local, const std::string& slot, std::span<const float> whole) {
      const ShardSpec& sh = layout.shards[layout.shards_on[p][local]];
      if (whole.size() != layout.variables[sh.variable].size)
        throw std::invalid_argument("join: tensor " + layout.variables[sh.variable].name + (slot.empty() ? "" : "/" + slot) +
                                    " has " + std::to_string(whole.size()) + " elements, the variable " +
                                    std::to_string(layout.variables[sh.variable].size));
      const auto piece = whole.subspan(sh.begin, sh.count);
      return write_init_tensor(w, local, slot, {reinterpret_cast<const uint8_t*>(piece.data()), piece.size_bytes()});
    };
    bool ok = true;
    for (size_t local = 0; ok && local < layout.shards_on[p].size(); ++local) {
      const uint32_t v = layout.shards[layout.shards_on[p][local]].variable;
      ok = send(local, "", init.values.at(v));
      for (const auto& [slot, tensors] : init.slots)
        if (ok) ok = send(local, slot, tensors.at(v));
    }
    return ok;
  }

  // Sync, resuming: the server states of p's shards (codecs that keep one).
  bool write_server_states(grpc::ClientWriter<rpc::InitChunk>& w, int p, const InitTensors& init) {
    if (init.server_states.size() != layout.shards.size())
      throw std::invalid_argument("join: " + std::to_string(init.server_states.size()) + " server states for " +
                                  std::to_string(layout.shards.size()) + " shards");
    bool ok = true;
    for (size_t local = 0; ok && local < layout.shards_on[p].size(); ++local) {
      const std::vector<uint8_t>& state = init.server_states[layout.shards_on[p][local]];
      if (!state.empty()) ok = write_init_tensor(w, local, detail::kServerStateSlot, state);
    }
    return ok;
  }

  // The chief's Init of ps p: the header, then the tensors its run needs.
  void init_ps(int p, int64_t global_step, const InitTensors* init) {
    call(p, "Init", [&] {
      grpc::ClientContext ctx;
      const auto armed = arm(ctx);
      rpc::InitReply reply;
      auto w = stubs[p]->Init(&ctx, &reply);
      const rpc::InitChunk head = init_header(p, global_step);
      message_sent += head.ByteSizeLong();
      bool ok = w->Write(head);
      if (ok && !sync) ok = write_async_tensors(*w, p, *init);
      if (ok && sync && init != nullptr && !init->server_states.empty()) ok = write_server_states(*w, p, *init);
      w->WritesDone();
      return w->Finish();
    });
  }

  // Registers with ps p and waits until every replica has; returns the run's
  // global step as p says. Without a cluster secret, a restarted replica may
  // register only once the ps has counted its previous process as gone
  // (peer_timeout of silence): until a little after that, "already
  // registered" means wait.
  int64_t register_with(int p) {
    const auto wait_until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                               std::chrono::duration<double>(opt.peer_timeout_s + 5));
    for (;;) {
      rpc::RegisterReply reply;
      call(p, "Register", [&] {
        grpc::ClientContext ctx;
        const auto armed = arm(ctx);
        rpc::RegisterRequest req;
        req.set_replica(static_cast<uint32_t>(replica));
        req.set_fingerprint(fingerprint);
        req.set_label(opt.label);
        message_sent += req.ByteSizeLong();
        reply.Clear();
        const grpc::Status s = stubs[p]->Register(&ctx, req, &reply);
        if (s.error_code() == StatusCode::ALREADY_EXISTS && Clock::now() < wait_until) {
          std::this_thread::sleep_for(std::chrono::milliseconds(500));
          reply.Clear();  // not ready: ask again
          return grpc::Status::OK;
        }
        return s;
      });
      message_received += reply.ByteSizeLong();
      if (reply.ready()) return reply.global_step();
    }
  }

  // ---- push ----

  // Shard payload chunks of one ps, written to a Push stream.
  bool write_payloads(grpc::ClientWriter<rpc::PushChunk>& w, int p,
                      std::span<const std::span<const uint8_t>> payloads, uint64_t& bytes) {
    const auto& mine = layout.shards_on[p];
    for (size_t local = 0; local < mine.size(); ++local)
      if (!write_payload(w, static_cast<uint32_t>(local), payloads[mine[local]], bytes)) return false;
    return true;
  }
};

WorkerClient::WorkerClient(std::vector<std::string> ps_addresses, Layout layout, int replica, bool sync,
                           int total_replicas, int replicas_to_aggregate, ClientOptions options)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  if (static_cast<int>(ps_addresses.size()) != layout.num_ps)
    throw std::invalid_argument("WorkerClient: " + std::to_string(ps_addresses.size()) + " ps addresses for a layout over " +
                                std::to_string(layout.num_ps) + " ps tasks");
  m.addresses = std::move(ps_addresses);
  m.layout = std::move(layout);
  m.replica = replica;
  m.sync = sync;
  m.total = total_replicas;
  m.needed = replicas_to_aggregate;
  m.opt = std::move(options);
  if (m.opt.label.empty()) {
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    m.opt.label = std::string(host) + ":" + std::to_string(getpid());
  }
  m.fingerprint = layout_fingerprint(m.layout, sync, total_replicas, replicas_to_aggregate);
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(detail::kMaxMessageBytes);
  args.SetMaxSendMessageSize(detail::kMaxMessageBytes);
  args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);  // retries are ours: idempotent by (replica, step)
  detail::add_tls_channel_arguments(m.opt.tls, args);
  if (m.opt.credential) {
    if (!m.opt.credential->role.is_replica(static_cast<uint32_t>(replica)))
      throw std::invalid_argument("WorkerClient: the credential is " + m.opt.credential->role.name() + "'s, not replica " +
                                  std::to_string(replica) + "'s");
    m.auth_token = m.opt.credential->call_token();
  }
  const auto credentials = detail::channel_credentials(m.opt.tls);
  for (const auto& a : m.addresses)
    m.stubs.push_back(rpc::ParameterServer::NewStub(grpc::CreateCustomChannel(a, credentials, args)));
  m.last_heard.assign(m.addresses.size(), Clock::time_point{});
  m.beat_error.assign(m.addresses.size(), "");
  m.declared_silent.assign(m.addresses.size(), false);
  m.async_steps.assign(m.addresses.size(), 0);
  m.local_index.assign(m.layout.shards.size(), 0);
  for (const auto& on : m.layout.shards_on)
    for (size_t local = 0; local < on.size(); ++local) m.local_index[on[local]] = static_cast<uint32_t>(local);
  for (size_t p = 0; p < m.stubs.size(); ++p) m.beaters.emplace_back([this, p] { impl_->beat_loop(p); });
  m.watchdog = std::thread([this] { impl_->watchdog_loop(); });
}

WorkerClient::~WorkerClient() {
  {
    std::lock_guard<std::mutex> lock(impl_->pm);
    impl_->stop_senders = true;
    impl_->fail_step_locked(std::make_exception_ptr(RunEnded("the replica is shutting down")));
  }
  {
    // Nothing waits for a call any more (a push stuck on a dead ps, a beat).
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop_beat = true;
    impl_->cancel_all_locked();
  }
  impl_->cv.notify_all();
  impl_->join_pullers();
  for (auto& t : impl_->senders) t.join();
  for (auto& t : impl_->beaters) t.join();
  if (impl_->watchdog.joinable()) impl_->watchdog.join();
}

const Layout& WorkerClient::layout() const { return impl_->layout; }

Traffic WorkerClient::traffic() const {
  return {impl_->payload_sent.load(), impl_->payload_received.load(), impl_->message_sent.load(),
          impl_->message_received.load()};
}

int64_t WorkerClient::join(int64_t global_step, const InitTensors* init) {
  Impl& m = *impl_;
  if (m.replica == 0) {
    if (!m.sync && init == nullptr) throw std::invalid_argument("join: the chief of an async run must pass the initial tensors");
    for_each_ps(m.layout.num_ps, [&](int p) { m.init_ps(p, global_step, init); });
  }
  int64_t step = global_step;
  for_each_ps(m.layout.num_ps, [&](int p) {
    const int64_t at = m.register_with(p);
    if (p == 0) step = at;
  });
  {
    std::lock_guard<std::mutex> lock(m.mu);
    m.step_for_beat = step;
  }
  return step;
}

std::vector<float> WorkerClient::exchange_scales(int64_t step, std::span<const float> local_scales,
                                                 std::span<const uint32_t> variables) {
  Impl& m = *impl_;
  rpc::ScalesRequest req;
  req.set_replica(static_cast<uint32_t>(m.replica));
  req.set_step(step);
  for (float s : local_scales) req.add_scales(s);
  for (uint32_t v : variables) req.add_variables(v);
  const auto reply = m.report_until_ready<rpc::ScalesReply>(
      "ExchangeScales", req, [&](grpc::ClientContext* ctx, const rpc::ScalesRequest& r, rpc::ScalesReply* out) {
        return m.stubs[0]->ExchangeScales(ctx, r, out);
      });
  return {reply.max_scales().begin(), reply.max_scales().end()};
}

std::vector<float> WorkerClient::exchange_presums(int64_t step, uint32_t round, std::span<const uint32_t> variables,
                                                  std::span<const float> values) {
  Impl& m = *impl_;
  rpc::PresumRequest req;
  req.set_replica(static_cast<uint32_t>(m.replica));
  req.set_step(step);
  req.set_round(round);
  for (uint32_t v : variables) req.add_variables(v);
  req.mutable_values()->Add(values.begin(), values.end());
  const auto reply = m.report_until_ready<rpc::PresumReply>(
      "ExchangePresums", req, [&](grpc::ClientContext* ctx, const rpc::PresumRequest& r, rpc::PresumReply* out) {
        return m.stubs[0]->ExchangePresums(ctx, r, out);
      });
  if (static_cast<size_t>(reply.sums_size()) != values.size())
    throw PeerError("ExchangePresums: ps 0 answered " + std::to_string(reply.sums_size()) + " sums for " +
                    std::to_string(values.size()) + " values");
  return {reply.sums().begin(), reply.sums().end()};
}

WorkerClient::PushOutcome WorkerClient::push(int64_t step, float loss,
                                             std::span<const std::span<const uint8_t>> shard_payloads) {
  Impl& m = *impl_;
  if (shard_payloads.size() != m.layout.shards.size())
    throw std::invalid_argument("push: " + std::to_string(shard_payloads.size()) + " payloads for " +
                                std::to_string(m.layout.shards.size()) + " shards");
  {
    std::lock_guard<std::mutex> lock(m.mu);
    m.step_for_beat = step;
  }
  std::vector<rpc::PushReply> replies(m.layout.num_ps);
  std::vector<float> report;
  {
    std::lock_guard<std::mutex> lk(m.pm);
    report = std::move(m.step_report);
    m.step_report.clear();
  }
  for_each_ps(m.layout.num_ps, [&](int p) {
    uint64_t bytes = 0;
    m.call(p, "Push", [&] {
      grpc::ClientContext ctx;
      const auto armed = m.arm(ctx);
      replies[p].Clear();
      auto w = m.stubs[p]->Push(&ctx, &replies[p]);
      rpc::PushChunk head;
      head.mutable_header()->set_replica(static_cast<uint32_t>(m.replica));
      head.mutable_header()->set_step(m.sync ? step : m.async_steps[p]);
      head.mutable_header()->set_loss(loss);
      if (p == 0 && m.sync)
        for (float t : report) head.mutable_header()->add_step_ms(t);
      m.message_sent += head.ByteSizeLong();
      bytes = 0;
      if (w->Write(head)) m.write_payloads(*w, p, shard_payloads, bytes);
      w->WritesDone();
      return w->Finish();
    });
    m.payload_sent += bytes;
    m.message_received += replies[p].ByteSizeLong();
  });
  PushOutcome out;
  for (const auto& r : replies) {
    if (r.outcome() == rpc::PushReply::STALE) ++out.stale;
    if (r.outcome() != rpc::PushReply::APPLIED) out.applied = false;
  }
  return out;
}

WorkerClient::Sums WorkerClient::pull_sums(int64_t step, std::vector<std::vector<uint8_t>>& sums) {
  Impl& m = *impl_;
  if (!m.sync) throw std::logic_error("pull_sums in an async run");
  sums.resize(m.layout.shards.size());
  std::vector<rpc::PullHeader> heads(m.layout.num_ps);
  const auto start = Clock::now();
  std::vector<double> ready_s(m.layout.num_ps, 0.0);
  for_each_ps(m.layout.num_ps, [&](int p) {
    const auto& mine = m.layout.shards_on[p];
    std::vector<detail::Reassembly> parts(mine.size());
    for (size_t local = 0; local < mine.size(); ++local) parts[local].adopt(std::move(sums[mine[local]]));
    for (;;) {
      m.call(p, "Pull", [&] {
        grpc::ClientContext ctx;
        const auto armed = m.arm(ctx);
        rpc::PullRequest req;
        req.set_replica(static_cast<uint32_t>(m.replica));
        req.set_step(step);
        m.message_sent += req.ByteSizeLong();
        auto r = m.stubs[p]->Pull(&ctx, req);
        rpc::PullChunk c;
        for (auto& part : parts) part.restart();
        heads[p].Clear();
        std::string err;
        while (r->Read(&c)) {
          m.message_received += c.ByteSizeLong();
          if (c.has_header()) {
            heads[p] = c.header();
            ready_s[p] = std::chrono::duration<double>(Clock::now() - start).count();
          } else if (c.has_payload() && err.empty()) {
            const rpc::PayloadChunk& pc = c.payload();
            if (pc.shard() >= parts.size()) err = "sum for unknown shard " + std::to_string(pc.shard());
            else err = parts[pc.shard()].add(pc.offset(), pc.total_bytes(), pc.data(), UINT64_MAX);
          }
        }
        grpc::Status s = r->Finish();
        if (s.ok() && !err.empty()) s = grpc::Status(StatusCode::DATA_LOSS, err);
        return s;
      });
      if (!heads[p].ready()) continue;
      for (size_t local = 0; local < mine.size(); ++local) {
        const bool complete = parts[local].complete();
        sums[mine[local]] = std::move(parts[local].bytes());  // the buffer serves the next step again
        if (!complete)
          throw PeerError(m.ps_name(p) + " sent an incomplete sum for shard " + std::to_string(local) + " of step " +
                          std::to_string(step));
        m.payload_received += sums[mine[local]].size();
      }
      return;
    }
  });
  return {heads[0].contributions(), heads[0].mean_loss(), *std::max_element(ready_s.begin(), ready_s.end()),
          {heads[0].replicas_step_ms().begin(), heads[0].replicas_step_ms().end()}, heads[0].replicas_reporting()};
}

void WorkerClient::begin_step(int64_t step, std::vector<std::vector<uint8_t>>& sums) {
  Impl& m = *impl_;
  if (!m.sync) throw std::logic_error("begin_step in an async run");
  m.join_pullers();  // a step abandoned by an exception
  {
    std::lock_guard<std::mutex> lock(m.mu);
    m.step_for_beat = step;
  }
  sums.resize(m.layout.shards.size());
  const int P = m.layout.num_ps;
  {
    std::lock_guard<std::mutex> lk(m.pm);
    if (m.pushes_pending != 0) throw std::logic_error("begin_step while the last step's pushes are in flight");
    m.pipe_step = step;
    m.pipe_sums = &sums;
    m.arrived.clear();
    m.delivered = 0;
    m.pipe_error = nullptr;
    m.pipe_heads.assign(P, {});
    m.live_pulls.assign(P, nullptr);
    m.pipe_start = m.pushed_at = m.first_sum_at = Clock::now();
    if (m.senders.empty()) {
      // Two pushes in flight per ps: the next bucket's bytes follow the
      // last one's without waiting for its reply (a round trip per bucket).
      m.queues.resize(P);
      for (int p = 0; p < P; ++p)
        for (int k = 0; k < 2; ++k) m.senders.emplace_back([&m, p] { m.sender_loop(p); });
    }
  }
  for (int p = 0; p < P; ++p)
    m.pullers.emplace_back([&m, p] {
      try {
        m.pull_stream(p);
      } catch (const Impl::Cancelled&) {
      } catch (...) {
        std::lock_guard<std::mutex> lk(m.pm);
        m.fail_step_locked(std::current_exception());
      }
    });
}

void WorkerClient::push_bucket(float loss, std::span<const size_t> shards,
                               std::span<const std::span<const uint8_t>> shard_payloads) {
  Impl& m = *impl_;
  if (shards.size() != shard_payloads.size())
    throw std::invalid_argument("push_bucket: " + std::to_string(shard_payloads.size()) + " payloads for " +
                                std::to_string(shards.size()) + " shards");
  std::vector<Impl::Bucket> per_ps(m.layout.num_ps);
  for (size_t i = 0; i < shards.size(); ++i) {
    if (shards[i] >= m.layout.shards.size())
      throw std::invalid_argument("push_bucket: shard " + std::to_string(shards[i]) + " of " +
                                  std::to_string(m.layout.shards.size()));
    Impl::Bucket& b = per_ps[m.layout.shards[shards[i]].ps];
    b.local.push_back(m.local_index[shards[i]]);
    b.payloads.push_back(shard_payloads[i]);
  }
  std::lock_guard<std::mutex> lk(m.pm);
  for (int p = 0; p < m.layout.num_ps; ++p) {
    if (per_ps[p].local.empty()) continue;
    per_ps[p].step = m.pipe_step;
    per_ps[p].loss = loss;
    if (p == 0) per_ps[p].step_ms = std::move(m.step_report);  // ps 0 keeps the reports
    m.step_report.clear();
    m.queues[p].push_back(std::move(per_ps[p]));
    ++m.pushes_pending;
  }
  m.pcv.notify_all();
}

std::optional<size_t> WorkerClient::next_sum() {
  Impl& m = *impl_;
  std::unique_lock<std::mutex> lk(m.pm);
  if (m.delivered == m.layout.shards.size()) return std::nullopt;
  m.pcv.wait(lk, [&] { return m.pipe_error || !m.arrived.empty(); });
  if (m.pipe_error) {
    const std::exception_ptr e = m.pipe_error;
    m.pcv.wait(lk, [&] { return m.pushes_pending == 0; });  // the senders drop nothing mid-push
    lk.unlock();
    m.join_pullers();
    std::rethrow_exception(e);
  }
  const size_t shard = m.arrived.front();
  m.arrived.pop_front();
  if (m.delivered++ == 0) m.first_sum_at = Clock::now();
  return shard;
}

WorkerClient::Sums WorkerClient::end_step(StepTimes* times) {
  Impl& m = *impl_;
  while (next_sum()) {
  }
  m.join_pullers();
  std::unique_lock<std::mutex> lk(m.pm);
  m.pcv.wait(lk, [&] { return m.pushes_pending == 0; });
  if (m.pipe_error) std::rethrow_exception(m.pipe_error);
  if (times) {
    times->pushed_s = std::chrono::duration<double>(m.pushed_at - m.pipe_start).count();
    times->first_sum_s = std::chrono::duration<double>(m.first_sum_at - m.pipe_start).count();
  }
  m.pipe_sums = nullptr;
  const rpc::PullHeader& h = m.pipe_heads[0];
  return {h.contributions(), h.mean_loss(), 0.0, {h.replicas_step_ms().begin(), h.replicas_step_ms().end()},
          h.replicas_reporting()};
}

void WorkerClient::report_step_times(std::vector<float> ms) {
  if (ms.size() != kStepTimeFields)
    throw std::invalid_argument("report_step_times: " + std::to_string(ms.size()) + " values, expected " +
                                std::to_string(kStepTimeFields));
  std::lock_guard<std::mutex> lk(impl_->pm);
  impl_->step_report = std::move(ms);
}

int64_t WorkerClient::pull_values(std::span<const std::span<float>> values) {
  Impl& m = *impl_;
  if (m.sync) throw std::logic_error("pull_values in a sync run");
  const Layout& l = m.layout;
  if (values.size() != l.variables.size())
    throw std::invalid_argument("pull_values: " + std::to_string(values.size()) + " tensors for " +
                                std::to_string(l.variables.size()) + " variables");
  for_each_ps(l.num_ps, [&](int p) {
    const auto& mine = l.shards_on[p];
    std::vector<detail::Reassembly> parts;
    int64_t step = 0;
    m.call(p, "Pull", [&] {
      grpc::ClientContext ctx;
      const auto armed = m.arm(ctx);
      rpc::PullRequest req;
      req.set_replica(static_cast<uint32_t>(m.replica));
      m.message_sent += req.ByteSizeLong();
      auto r = m.stubs[p]->Pull(&ctx, req);
      rpc::PullChunk c;
      parts.assign(mine.size(), detail::Reassembly{});
      std::string err;
      while (r->Read(&c)) {
        m.message_received += c.ByteSizeLong();
        if (c.has_header()) {
          step = c.header().step();
        } else if (c.has_values() && err.empty()) {
          const rpc::TensorChunk& t = c.values();
          if (t.shard() >= parts.size()) err = "values for unknown shard " + std::to_string(t.shard());
          else err = parts[t.shard()].add(t.offset(), t.total_bytes(), t.data(), 4 * l.shards[mine[t.shard()]].count);
        }
      }
      grpc::Status s = r->Finish();
      if (s.ok() && !err.empty()) s = grpc::Status(StatusCode::DATA_LOSS, err);
      return s;
    });
    for (size_t local = 0; local < mine.size(); ++local) {
      const ShardSpec& sh = l.shards[mine[local]];
      if (!parts[local].complete() || parts[local].bytes().size() != 4 * sh.count)
        throw PeerError(m.ps_name(p) + " sent incomplete values for " + l.variables[sh.variable].name);
      if (values[sh.variable].size() != l.variables[sh.variable].size)
        throw std::invalid_argument("pull_values: wrong size for " + l.variables[sh.variable].name);
      std::memcpy(values[sh.variable].data() + sh.begin, parts[local].bytes().data(), 4 * sh.count);
      m.payload_received += 4 * sh.count;
    }
    m.async_steps[p] = step;
  });
  {
    std::lock_guard<std::mutex> lock(m.mu);
    m.step_for_beat = m.async_steps[0];
  }
  return m.async_steps[0];
}

// One Checkpoint call to ps p (retried as every call is): restart() before
// each attempt, then take(chunk) for every chunk until one returns an error,
// which fails the call as DATA_LOSS once the stream is drained.
template <class Restart, class Take>
void read_checkpoint(WorkerClient::Impl& m, int p, int64_t step, Restart restart, Take take) {
  m.call(p, "Checkpoint", [&] {
    grpc::ClientContext ctx;
    const auto armed = m.arm(ctx);
    rpc::CheckpointRequest req;
    req.set_replica(static_cast<uint32_t>(m.replica));
    req.set_step(step);
    auto r = m.stubs[p]->Checkpoint(&ctx, req);
    restart();
    rpc::TensorChunk t;
    std::string err;
    while (r->Read(&t)) {
      m.message_received += t.ByteSizeLong();
      if (err.empty()) err = take(t);
    }
    grpc::Status s = r->Finish();
    if (s.ok() && !err.empty()) s = grpc::Status(StatusCode::DATA_LOSS, err);
    return s;
  });
}

std::map<std::string, std::vector<float>> WorkerClient::fetch_state() {
  Impl& m = *impl_;
  const Layout& l = m.layout;
  std::map<std::string, std::vector<float>> out;
  std::mutex out_mu;
  for_each_ps(l.num_ps, [&](int p) {
    const auto& mine = l.shards_on[p];
    std::map<std::pair<uint32_t, std::string>, detail::Reassembly> parts;
    read_checkpoint(m, p, 0, [&] { parts.clear(); }, [&](const rpc::TensorChunk& t) -> std::string {
      if (t.shard() >= mine.size()) return "state for unknown shard " + std::to_string(t.shard());
      return parts[{t.shard(), t.slot()}].add(t.offset(), t.total_bytes(), t.data(), 4 * l.shards[mine[t.shard()]].count);
    });
    std::lock_guard<std::mutex> lock(out_mu);
    for (auto& [key, part] : parts) {
      const ShardSpec& sh = l.shards[mine[key.first]];
      const VariableSpec& v = l.variables[sh.variable];
      if (!part.complete() || part.bytes().size() != 4 * sh.count)
        throw PeerError(m.ps_name(p) + " sent an incomplete " + v.name + " " + key.second);
      const std::string name = key.second.empty() ? v.name : v.name + "/" + key.second;
      auto& dst = out[name];
      dst.resize(v.size);
      std::memcpy(dst.data() + sh.begin, part.bytes().data(), 4 * sh.count);
    }
  });
  return out;
}

std::vector<std::vector<uint8_t>> WorkerClient::fetch_server_states(int64_t step) {
  Impl& m = *impl_;
  const Layout& l = m.layout;
  std::vector<std::vector<uint8_t>> out(l.shards.size());
  std::mutex out_mu;
  for_each_ps(l.num_ps, [&](int p) {
    const auto& mine = l.shards_on[p];
    std::map<uint32_t, detail::Reassembly> parts;
    read_checkpoint(m, p, step, [&] { parts.clear(); }, [&](const rpc::TensorChunk& t) -> std::string {
      if (t.shard() >= mine.size()) return "server state for unknown shard " + std::to_string(t.shard());
      if (t.slot() != detail::kServerStateSlot) return "unexpected slot \"" + t.slot().substr(0, 64) + "\"";
      return parts[t.shard()].add(t.offset(), t.total_bytes(), t.data(),
                                  detail::max_server_state_bytes(l.shards[mine[t.shard()]].count));
    });
    std::lock_guard<std::mutex> lock(out_mu);
    for (auto& [local, part] : parts) {
      if (!part.complete())
        throw PeerError(m.ps_name(p) + " sent an incomplete server state of " +
                        l.variables[l.shards[mine[local]].variable].name);
      out[mine[local]].assign(part.bytes().begin(), part.bytes().end());
    }
  });
  return out;
}

void WorkerClient::finish(bool ok, const std::string& reason) {
  Impl& m = *impl_;
  std::vector<bool> silent;  // a ps declared unreachable is not waited for
  {
    std::lock_guard<std::mutex> lock(m.mu);
    m.done = true;
    silent = m.declared_silent;
  }
  if (m.replica != 0) {  // tell every ps at once rather than at the next beat
    for (size_t p = 0; p < m.stubs.size(); ++p) {
      if (silent[p]) continue;
      rpc::HeartbeatRequest req;
      req.set_replica(static_cast<uint32_t>(m.replica));
      req.set_step(m.step_for_beat);
      req.set_done(true);
      rpc::HeartbeatReply reply;
      grpc::ClientContext ctx;
      m.identify(ctx);
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
      (void)m.stubs[p]->Heartbeat(&ctx, req, &reply);
    }
    return;
  }
  for (size_t p = 0; p < m.stubs.size(); ++p) {
    if (silent[p]) continue;
    rpc::ShutdownRequest req;
    req.set_replica(0);
    req.set_ok(ok);
    req.set_reason(reason);
    rpc::ShutdownReply reply;
    grpc::ClientContext ctx;
    m.identify(ctx);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    (void)m.stubs[p]->Shutdown(&ctx, req, &reply);  // a ps already gone needs no shutdown
  }
}

}  // namespace terngrad::comm
