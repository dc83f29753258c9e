// The ps's Pull: a step's sums, whole or streamed shard by shard as they
// are ready, or an async run's current values; streamed without the lock (ps_service.h).
#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "ps_service.h"
#include "terngrad/base/timeline.h"
#include "terngrad/comm/step_times.h"

namespace terngrad::comm {

bool ParameterServer::Impl::serves_after_finish(int64_t step) const {
  return sync && phase == Phase::kFinished && step < global_step_locked();
}

grpc::Status ParameterServer::Impl::pull(const Caller& caller, ServerContext* ctx, const rpc::PullRequest* req,
                                         detail::PullStream& out_stream) {
  std::unique_lock<std::mutex> lock(mu);
  if (ended() && !serves_after_finish(req->step())) return ended_status();
  if (phase == Phase::kWaitingInit) return detail::before_init("Pull");
  if (grpc::Status s = authorize_locked(caller, req->replica(), "Pull", true); !s.ok()) return s;
  heard(req->replica());
  rpc::PullChunk out;
  if (!sync) {  // the current values of every shard
    if (req->after_own_push()) {
      // Held until the replica's push is applied or dropped; the run ending,
      // a rewind or the caller leaving end the wait too (a long poll, as Pull's).
      const uint32_t r = req->replica();
      const int64_t own = req->own_push_step();
      const auto applied = [&] { return updates->last_pushed(r) >= own || updates->past_end(); };
      if (long_poll(lock, ctx, applied)) return rewound("Pull", r);
      if (ended()) return ended_status();
      if (!applied())
        return grpc::Status(StatusCode::DEADLINE_EXCEEDED, replica_name(r) + "'s push of step " + std::to_string(own) +
                                                               " has not arrived; pull again");
    }
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
    const timeline::Span span("ps: send values", int64_t{req->replica()});
    if (!out_stream.write(out)) return grpc::Status(StatusCode::CANCELLED, "Pull: client went away");
    for (size_t s = 0; s < held->size(); ++s)
      if (!out_stream.write_shard(detail::ShardBytes::kValues, static_cast<uint32_t>(s), (*held)[s], held))
        return grpc::Status(StatusCode::CANCELLED, "Pull: client went away");
    if (req->push_turn()) wait_push_turn(ctx, req->replica());
    return grpc::Status::OK;
  }
  if (req->stream()) return stream_sums(ctx, req, out_stream, lock);
  const int64_t step = req->step();
  if (long_poll(lock, ctx, [&] { return step < steps->global_step(); })) return rewound("Pull", req->replica());
  if (ended() && !serves_after_finish(step)) return ended_status();
  if (step >= steps->global_step()) {
    out.mutable_header()->set_ready(false);
    out.mutable_header()->set_step(step);
    for (uint32_t r : steps->missing()) out.mutable_header()->add_missing(r);
    lock.unlock();
    out_stream.write(out);
    return grpc::Status::OK;
  }
  const std::shared_ptr<detail::StepSums> held =
      steps->sums_of(step);  // kept alive while we stream, even if the ring drops it
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
  const uint64_t epoch = run_epoch;
  if (!out_stream.write(out)) return grpc::Status(StatusCode::CANCELLED, "Pull: client went away");
  for (size_t s = 0; s < agg.shards.size(); ++s)
    if (!out_stream.write_shard(detail::ShardBytes::kSum, static_cast<uint32_t>(s), agg.shards[s], held))
      return grpc::Status(StatusCode::CANCELLED, "Pull: client went away");
  std::lock_guard<std::mutex> relock(mu);
  if (run_epoch == epoch) steps->pulled(held, req->replica());  // else: a step of the steps a rewind dropped
  return grpc::Status::OK;
}

void ParameterServer::Impl::wait_push_turn(ServerContext* ctx, uint32_t r) {
  const timeline::Span span("ps: hold for a push turn", int64_t{r});
  std::unique_lock<std::mutex> lock(mu);
  const uint64_t epoch = run_epoch;
  const Clock::time_point until = Clock::now() + kMaxTurnHold;
  turns->ask(r);
  for (;;) {
    const Clock::time_point now = Clock::now();
    if (run_epoch != epoch) return;  // a new run's turns: this replica registers again
    if (turns->take(r, now)) return;
    // The values are sent: whatever else ends the wait, the pull ends well,
    // and the replica's push finds out what happened.
    if (ended() || ctx->IsCancelled() || now >= until) break;
    turns_cv.wait_until(lock, std::min(until, turns->next_lapse(now).value_or(until)));
  }
  turns->withdraw(r);
}

void ParameterServer::Impl::report_step_times_locked(rpc::PullHeader* head) const {
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

grpc::Status ParameterServer::Impl::too_old(uint32_t replica, int64_t step) const {
  return grpc::Status(StatusCode::FAILED_PRECONDITION,
                      replica_name(replica) + " asked for step " + std::to_string(step) +
                          ", which is no longer kept (the ps keeps the last " + std::to_string(opt.keep_steps) +
                          " steps, now at " + std::to_string(global_step_locked()) + "): it fell too far behind");
}

grpc::Status ParameterServer::Impl::stream_sums(ServerContext* ctx, const rpc::PullRequest* req,
                                                detail::PullStream& out_stream, std::unique_lock<std::mutex>& lock) {
  const int64_t step = req->step();
  if (step > steps->current_step())
    return grpc::Status(StatusCode::FAILED_PRECONDITION, replica_name(req->replica()) + " pulls step " +
                                                             std::to_string(step) + " but the ps is at step " +
                                                             std::to_string(steps->current_step()));
  const std::shared_ptr<detail::StepSums> held = steps->sums_of(step);
  if (!held) return too_old(req->replica(), step);
  const detail::StepSums& agg = *held;
  std::vector<bool> sent(shards().size(), false);
  size_t sent_count = 0;
  for (uint32_t s : req->have()) {
    if (s >= shards().size())
      return grpc::Status(StatusCode::INVALID_ARGUMENT,
                          "Pull: have names shard " + std::to_string(s) + " of " + std::to_string(shards().size()));
    if (!sent[s]) ++sent_count;
    sent[s] = true;
  }
  auto until = Clock::now() + std::chrono::seconds(30);
  const auto deadline = ctx->deadline();
  const auto now_sys = std::chrono::system_clock::now();
  if (deadline > now_sys)
    until = std::min(until, Clock::now() + std::chrono::duration_cast<Clock::duration>(deadline - now_sys) -
                                std::chrono::milliseconds(200));
  const uint64_t epoch = run_epoch;
  for (;;) {
    std::vector<uint32_t> fresh;
    sums_cv.wait_until(lock, until, [&] {
      if (ended() || ctx->IsCancelled() || run_epoch != epoch || (agg.complete && sent_count == shards().size()))
        return true;
      for (size_t s = 0; s < shards().size(); ++s)
        if (agg.ready[s] && !sent[s]) return true;
      return false;
    });
    if (ended() && !(agg.complete && serves_after_finish(step))) return ended_status();
    if (ctx->IsCancelled()) return grpc::Status(StatusCode::CANCELLED, "Pull: client went away");
    if (run_epoch != epoch) return rewound("Pull", req->replica());
    for (uint32_t s = 0; s < shards().size(); ++s)
      if (agg.ready[s] && !sent[s]) fresh.push_back(s);
    if (!fresh.empty()) {
      for (uint32_t s : fresh) {
        sent[s] = true;
        bytes_out += agg.shards[s].size();
      }
      sent_count += fresh.size();
      lock.unlock();  // ready shards do not change
      for (uint32_t s : fresh) {
        // Arg: the replica and the shard ("replica * 1000 + shard").
        const timeline::Span span("ps: send a sum", 1000 * int64_t{req->replica()} + s);
        if (!out_stream.write_shard(detail::ShardBytes::kSum, s, agg.shards[s], held))
          return grpc::Status(StatusCode::CANCELLED, "Pull: client went away");
      }
      lock.lock();
      continue;
    }
    rpc::PullChunk out;
    rpc::PullHeader* head = out.mutable_header();
    head->set_step(step);
    if (agg.complete && sent_count == shards().size()) {
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
    out_stream.write(out);
    return grpc::Status::OK;
  }
}

}  // namespace terngrad::comm
