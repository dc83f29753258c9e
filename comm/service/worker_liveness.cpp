// A replica's liveness: heartbeats to every ps (one thread each, so a
// frozen ps delays nobody else's) and the watchdog that ends the run for
// this replica when a ps stays silent (worker_service.h).
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <string>

#include "worker_service.h"

namespace terngrad::comm {

namespace {
using Clock = std::chrono::steady_clock;
using grpc::StatusCode;
}  // namespace

void WorkerClient::Impl::beat_loop(size_t p) {
  const double deadline_s = std::min(5.0, std::max(opt.heartbeat_s, opt.peer_timeout_s / 2));
  std::unique_lock<std::mutex> lock(mu);
  while (!stop_beat) {
    const int64_t step = step_for_beat;
    const bool is_done = done;
    const uint64_t rejoined = rejoins;
    const bool asked_joined = joined;
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
      ctx.set_deadline(
          std::chrono::system_clock::now() +
          std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::duration<double>(deadline_s)));
      const Tracked tracked(*this, ctx);
      s = stubs[p]->Heartbeat(&ctx, req, &reply);
    }
    lock.lock();
    if (s.ok()) {
      last_heard[p] = Clock::now();
      if (!reply.failure().empty()) fail_locked(from_ps(static_cast<int>(p), reply.failure()));
      if (reply.finished()) ended = true;
      // Asked before the join or the last rejoin, the answer may predate
      // this replica's registration (a join that others were already
      // waiting for completes within one beat).
      if (reply.unknown_replica() && asked_joined && rejoined == rejoins && rewinds_sync_run_locked() &&
          rewind == Rewind::kNone)
        need_rewind_locked();
    } else {
      beat_error[p] = s.error_message();
    }
    cv.wait_for(lock, std::chrono::duration<double>(opt.heartbeat_s), [&] { return stop_beat; });
  }
}

void WorkerClient::Impl::watchdog_loop() {
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

}  // namespace terngrad::comm
