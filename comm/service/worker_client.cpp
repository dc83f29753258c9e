// The replica side of the service (worker_client.h): every call's retry
// and cancellation, failure, the exchanges through ps 0 and the public class;
// the rest by concern in worker_liveness.cpp, worker_join.cpp,
// worker_step.cpp and worker_reads.cpp (worker_service.h says which).
#include "terngrad/comm/worker_client.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#include "chunks.h"
#include "restarted_ps.h"
#include "tls_credentials.h"
#include "terngrad/comm/comm_threads.h"
#include "worker_service.h"

namespace terngrad::comm {

namespace {
using Clock = std::chrono::steady_clock;
using grpc::StatusCode;
}  // namespace

std::string WorkerClient::Impl::from_ps(int p, const std::string& verdict) const {
  const std::string own = "ps " + std::to_string(p) + ": ";
  return ps_name(p) + ": " + (verdict.rfind(own, 0) == 0 ? verdict.substr(own.size()) : verdict);
}

void WorkerClient::Impl::check_state() {
  std::lock_guard<std::mutex> lock(mu);
  if (!failure.empty()) throw PeerError(failure);
  if (ended) throw RunEnded("the run finished (the chief shut the parameter servers down)");
  if (rewind == Rewind::kNeeded)
    throw PsRestarted("replica " + std::to_string(replica) +
                      ": a ps restarted (or the chief rewound the run): the step cannot complete");
}

void WorkerClient::Impl::set_failure(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu);
  fail_locked(why);
}

void WorkerClient::Impl::identify(grpc::ClientContext& ctx) const {
  ctx.AddMetadata(kSessionMetadataKey, session);
  if (!auth_token.empty()) ctx.AddMetadata(kAuthMetadataKey, auth_token);
}

void WorkerClient::Impl::fail_locked(const std::string& why) {
  if (failure.empty()) failure = why;
  cancel_all_locked();
}

void WorkerClient::Impl::cancel_all_locked() {
  cancel_calls = true;
  for (grpc::ClientContext* c : live_calls) c->TryCancel();
}

WorkerClient::Impl::Tracked WorkerClient::Impl::arm(grpc::ClientContext& ctx, bool wait_for_ready) {
  identify(ctx);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::duration_cast<std::chrono::system_clock::duration>(
                                                          std::chrono::duration<double>(opt.rpc_timeout_s)));
  ctx.set_wait_for_ready(wait_for_ready);
  return Tracked(*this, ctx);
}

void WorkerClient::Impl::call(int p, const char* what, const std::function<grpc::Status()>& attempt) {
  Clock::time_point first_failure{}, first_restart{};
  double backoff = 0.05;
  for (;;) {
    check_state();
    const grpc::Status s = attempt();
    if (s.ok()) {
      heard(p);  // an answer is as good as a heartbeat's (a run can be steps ahead of the first beat)
      return;
    }
    check_state();  // the run ended while we waited (and the call was cancelled): say why
    if (detail::says_ps_restarted(s)) {
      // Sync: the ps restarted empty, or the chief rewound the run; the loop
      // rejoins the rewind (WorkerClient::rewind_run, rejoin_rewound_run).
      std::lock_guard<std::mutex> lock(mu);
      if (rewinds_sync_run_locked() && rewind != Rewind::kRejoining) {
        need_rewind_locked();
        throw PsRestarted(ps_name(p) + " restarted or the run was rewound (" + what + ": " + s.error_message() + ")");
      }
    }
    if (detail::says_ps_restarted(s) && rejoins_restarted_ps()) {
      // The ps restarted empty: refilled by the chief, registered with again, asked again.
      if (first_restart == Clock::time_point{}) first_restart = Clock::now();
      const double waited = std::chrono::duration<double>(Clock::now() - first_restart).count();
      if (waited > opt.ps_rejoin_window_s) {
        const std::string msg = ps_name(p) + " restarted and was not refilled within " +
                                std::to_string(static_cast<int>(opt.ps_rejoin_window_s)) + " s (" + what + ": " +
                                s.error_message() + ")";
        set_failure(msg);
        throw PeerError(msg);
      }
      rejoin_restarted_ps(p, std::string(what) + ": " + s.error_message());
      continue;
    }
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
    if (!detail::retryable(s.error_code())) {
      std::string msg = ps_name(p) + " refused " + what + ": " + s.error_message();
      if (detail::says_ps_restarted(s) && sync) {
        std::lock_guard<std::mutex> lock(mu);
        if (joined)
          msg += " (it restarted, and with it the step's pushes and sums are gone: a sync run cannot refill it; "
                 "restart every task, and the replicas resume from the chief's latest checkpoint)";
      }
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

WorkerClient::WorkerClient(std::vector<std::string> ps_addresses, Layout layout, int replica, bool sync,
                           int total_replicas, int replicas_to_aggregate, ClientOptions options)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  if (static_cast<int>(ps_addresses.size()) != layout.num_ps)
    throw std::invalid_argument("WorkerClient: " + std::to_string(ps_addresses.size()) +
                                " ps addresses for a layout over " + std::to_string(layout.num_ps) + " ps tasks");
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
      throw std::invalid_argument("WorkerClient: the credential is " + m.opt.credential->role.name() +
                                  "'s, not replica " + std::to_string(replica) + "'s");
    m.auth_token = m.opt.credential->call_token();
  }
  const auto credentials = detail::channel_credentials(m.opt.tls);
  for (const auto& a : m.addresses) {
    m.channels.push_back(grpc::CreateCustomChannel(a, credentials, args));
    m.stubs.push_back(rpc::ParameterServer::NewStub(m.channels.back()));
  }
  m.last_heard.assign(m.addresses.size(), Clock::time_point{});
  m.beat_error.assign(m.addresses.size(), "");
  m.declared_silent.assign(m.addresses.size(), false);
  m.async_steps.assign(m.addresses.size(), 0);
  m.restarts_met.assign(m.addresses.size(), 0);
  m.turn_pulls_started.assign(m.addresses.size(), 0);
  m.turn_pulls_ended.assign(m.addresses.size(), 0);
  m.local_index.assign(m.layout.shards.size(), 0);
  for (const auto& on : m.layout.shards_on)
    for (size_t local = 0; local < on.size(); ++local) m.local_index[on[local]] = static_cast<uint32_t>(local);
  for (size_t p = 0; p < m.stubs.size(); ++p) m.beaters.push_back(comm_thread([this, p] { impl_->beat_loop(p); }));
  m.watchdog = comm_thread([this] { impl_->watchdog_loop(); });
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
  {
    // A streamed push left unfinished (the backward pass threw): its
    // writers cancel their calls rather than send part of a push.
    std::lock_guard<std::mutex> lock(impl_->sm);
    impl_->streamed.ended = true;
    impl_->scv.notify_all();
  }
  for (auto& t : impl_->streamed.writers) t.join();
  for (auto& t : impl_->pulled.readers) t.join();  // their calls were cancelled above
  for (auto& t : impl_->senders) t.join();
  for (auto& t : impl_->beaters) t.join();
  if (impl_->watchdog.joinable()) impl_->watchdog.join();
}

const Layout& WorkerClient::layout() const { return impl_->layout; }

Traffic WorkerClient::traffic() const {
  return {impl_->payload_sent.load(), impl_->payload_received.load(), impl_->message_sent.load(),
          impl_->message_received.load()};
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
