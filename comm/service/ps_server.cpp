// The parameter server (ps_server.h): serve(), every call's entry
// (authentication, exceptions to statuses, the refusal log), the
// authorization of a caller for a replica, the run's end states, Heartbeat,
// Status, Checkpoint, Shutdown, the startup and liveness timeouts, and the
// public class. The other calls are in ps_join.cpp, ps_exchanges.cpp,
// ps_push.cpp and ps_pull.cpp; ps_service.h says who owns what.
#include "terngrad/comm/ps_server.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "checkpoint_tensors.h"
#include "chunks.h"
#include "ps_in_process.h"
#include "ps_service.h"
#include "terngrad/comm/errors.h"
#include "tls_credentials.h"

namespace terngrad::comm {

using Phase = detail::Phase;

std::string ParameterServer::Impl::replica_name(uint32_t r) const {
  if (r < opt.replica_names.size() && !opt.replica_names[r].empty()) return opt.replica_names[r];
  return "replica " + std::to_string(r);
}

void ParameterServer::Impl::fail_locked(const std::string& why) {
  if (phase == Phase::kFailed || phase == Phase::kFinished) return;
  phase = Phase::kFailed;
  failure = why;
  log("run failed: " + why);
  wake_all_locked();
}

grpc::Status ParameterServer::Impl::ended_status() const {
  if (phase == Phase::kFailed)
    return grpc::Status(StatusCode::ABORTED, "ps " + std::to_string(opt.task_index) + ": " + failure);
  return grpc::Status(StatusCode::OUT_OF_RANGE, "ps " + std::to_string(opt.task_index) + ": training finished");
}

grpc::Status ParameterServer::Impl::check_replica(uint32_t r) const {
  if (r >= static_cast<uint32_t>(total))
    return grpc::Status(StatusCode::INVALID_ARGUMENT, "replica " + std::to_string(r) + " is outside the run's " +
                                                          std::to_string(total) + " replicas");
  return grpc::Status::OK;
}

grpc::Status ParameterServer::Impl::authorize_locked(const Caller& c, uint32_t r, const char* call,
                                                     bool need_session) const {
  if (grpc::Status s = check_replica(r); !s.ok()) return s;
  if (auth && !c.role->is_replica(r))
    return grpc::Status(StatusCode::PERMISSION_DENIED,
                        std::string(call) + ": " + c.role->name() + " may not act as replica " + std::to_string(r));
  const std::string& session = replicas[r].session;
  if (session.empty()) {
    if (!need_session) return grpc::Status::OK;
    return grpc::Status(StatusCode::FAILED_PRECONDITION,
                        std::string(call) + ": " + replica_name(r) + detail::kNotRegistered);
  }
  if (!detail::same_session(c.session, session))
    return grpc::Status(StatusCode::PERMISSION_DENIED,
                        std::string(call) + ": not the session " + replica_name(r) +
                            " registered with (this process was replaced by a newer one, or is another in its name)");
  return grpc::Status::OK;
}

grpc::Status ParameterServer::Impl::chief_only(const Caller& c, uint32_t claimed, const char* call) const {
  if (claimed != 0 || (auth && !c.role->is_replica(0)))
    return grpc::Status(StatusCode::PERMISSION_DENIED, std::string(call) + ": only the chief (replica 0)");
  return grpc::Status::OK;
}

int64_t ParameterServer::Impl::global_step_locked() const {
  if (steps) return steps->global_step();
  if (updates) return updates->global_step();
  return 0;
}

int64_t ParameterServer::Impl::last_pushed_locked(uint32_t r) const {
  if (steps) return steps->last_pushed(r);
  if (updates) return updates->last_pushed(r);
  return -1;
}

uint64_t ParameterServer::Impl::duplicates_locked() const {
  if (steps) return steps->duplicates();
  if (updates) return updates->duplicates();
  return 0;
}

grpc::Status ParameterServer::Impl::heartbeat(const Caller& caller, const rpc::HeartbeatRequest* req,
                                              rpc::HeartbeatReply* reply) {
  std::lock_guard<std::mutex> lock(mu);
  reply->set_global_step(global_step_locked());
  reply->set_finished(phase == Phase::kFinished);
  if (phase == Phase::kFailed) reply->set_failure("ps " + std::to_string(opt.task_index) + ": " + failure);
  if (phase == Phase::kWaitingInit) reply->set_unknown_replica(true);
  if (phase != Phase::kRunning) return grpc::Status::OK;
  if (grpc::Status s = authorize_locked(caller, req->replica(), "Heartbeat", false); !s.ok()) return s;
  if (replicas[req->replica()].session.empty()) {  // not registered yet, or not since a rewind
    reply->set_unknown_replica(true);
    return grpc::Status::OK;
  }
  heard(req->replica());
  if (req->done() && !replicas[req->replica()].done) {
    replicas[req->replica()].done = true;
    log(replica_name(req->replica()) + " finished");
  }
  return grpc::Status::OK;
}

grpc::Status ParameterServer::Impl::status(rpc::StatusReply* reply) {
  std::lock_guard<std::mutex> lock(mu);
  reply->set_phase(detail::phase_name(phase));
  reply->set_global_step(global_step_locked());
  reply->set_sync(sync);
  reply->set_total_replicas(total);
  reply->set_replicas_to_aggregate(needed);
  reply->set_stale_pushes(stale_locked());
  reply->set_duplicate_pushes(duplicates_locked());
  reply->set_bytes_received(bytes_in);
  reply->set_bytes_sent(bytes_out);
  reply->set_failure(failure);
  reply->set_shards(static_cast<uint32_t>(shards().size()));
  for (const rpc::Variable& v : variables) *reply->add_variables() = v;
  reply->set_run_epoch(run_epoch);
  for (size_t r = 0; r < replicas.size(); ++r) {
    rpc::ReplicaStatus* s = reply->add_replicas();
    s->set_replica(static_cast<uint32_t>(r));
    s->set_label(replicas[r].label);
    s->set_registered(replicas[r].registered);
    s->set_done(replicas[r].done);
    s->set_seconds_since_heard(replicas[r].registered ? detail::seconds_since(replicas[r].last_heard) : -1);
    s->set_last_step_pushed(last_pushed_locked(static_cast<uint32_t>(r)));
  }
  return grpc::Status::OK;
}

grpc::Status ParameterServer::Impl::checkpoint(const Caller& caller, const rpc::CheckpointRequest* req,
                                               grpc::ServerWriter<rpc::TensorChunk>* writer) {
  std::vector<detail::CheckpointTensor> tensors;
  {
    if (grpc::Status s = chief_only(caller, req->replica(), "Checkpoint"); !s.ok()) return s;
    std::lock_guard<std::mutex> lock(mu);
    if (ended()) return ended_status();
    if (phase != Phase::kRunning) return detail::before_init("Checkpoint");
    if (grpc::Status s = authorize_locked(caller, 0, "Checkpoint", true); !s.ok()) return s;
    heard(0);
    if (sync) {
      // The server states as the sum of req->step left them.
      auto states = detail::sync_checkpoint(*steps, req->step(), shards().size());
      if (!states)
        return grpc::Status(StatusCode::FAILED_PRECONDITION,
                            "Checkpoint: this ps keeps no server states of step " + std::to_string(req->step()) +
                                " (global step " + std::to_string(global_step_locked()) +
                                "; for codecs that have them, it keeps those of the last step it summed until the "
                                "next step's sums begin, and those of the checkpoint steps Init named "
                                "(checkpoint_interval_steps) among its last kept steps)");
      tensors = std::move(*states);
    } else {
      tensors = detail::async_checkpoint(*updates, *handler, shards().size());
    }
  }
  const bool ok = detail::stream_checkpoint(tensors, [&](uint32_t shard, const std::string& slot, uint64_t off,
                                                         uint64_t total, std::span<const uint8_t> piece) {
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

grpc::Status ParameterServer::Impl::shutdown(const Caller& caller, const rpc::ShutdownRequest* req,
                                             rpc::ShutdownReply*) {
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
  wake_all_locked();
  return grpc::Status::OK;
}

grpc::Status ParameterServer::Impl::probe(const Caller& caller, const rpc::ProbeRequest* req,
                                          rpc::ProbeReply* reply) const {
  if (grpc::Status s = chief_only(caller, req->replica(), "Probe"); !s.ok()) return s;
  if (req->data().size() > detail::kMaxProbeBytes || req->reply_bytes() > detail::kMaxProbeBytes)
    return grpc::Status(StatusCode::INVALID_ARGUMENT,
                        "Probe: " + std::to_string(req->data().size()) + " bytes sent, " +
                            std::to_string(req->reply_bytes()) + " asked back (at most " +
                            std::to_string(detail::kMaxProbeBytes) + " each)");
  reply->mutable_data()->assign(req->reply_bytes(), '\0');
  return grpc::Status::OK;
}

void ParameterServer::Impl::watch() {
  std::unique_lock<std::mutex> lock(mu);
  while (!stopping) {
    ended_cv.wait_for(lock, std::chrono::milliseconds(250));
    if (!ended()) check_timeouts_locked(Clock::now());
  }
}

void ParameterServer::Impl::check_timeouts_locked(Clock::time_point now) {
  const auto name = [&](uint32_t r) { return replica_name(r); };
  const detail::ReplicaTable::Startup startup =
      replicas.judge_startup(phase != Phase::kWaitingInit, registrations_open, now, opt.startup_timeout_s, name);
  if (startup.failure) fail_locked(*startup.failure);
  if (!startup.complete) return;
  const detail::ReplicaTable::Verdict v =
      replicas.judge(now, opt.peer_timeout_s, sync, needed, name, [&](uint32_t r) { return last_pushed_locked(r); });
  for (const std::string& gone : v.newly_gone) log(gone + ": counted as gone");
  if (v.failure) fail_locked(*v.failure);
}

ParameterServer::ParameterServer(const std::string& address, ServerOptions options, UpdateHandler* handler)
    : impl_(std::make_unique<Impl>(address, std::move(options), handler)) {
  grpc::ServerBuilder b;
  if (!impl_->opt.secret && !address.empty() && !is_loopback_address(address))
    std::fprintf(
        stderr,
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
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
    impl_->wake_all_locked();
  }
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
  impl_->wake_all_locked();
}

void ParameterServer::run() {
  std::string failure;
  {
    std::unique_lock<std::mutex> lock(impl_->mu);
    impl_->ended_cv.wait(lock, [&] { return impl_->ended(); });
    failure = impl_->phase == Phase::kFailed ? impl_->failure : "";
  }
  // Let pollers and heartbeats hear how the run ended before the port closes.
  std::this_thread::sleep_for(std::chrono::duration<double>(std::min(3.0, std::max(0.5, 1.5 * impl_->opt.poll_s))));
  impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  if (!failure.empty()) throw PeerError("ps " + std::to_string(impl_->opt.task_index) + ": " + failure);
}

}  // namespace terngrad::comm
