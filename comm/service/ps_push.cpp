// The ps's Push: a replica's step payloads, read whole by the push intake,
// then handed to the sync steps (summed outside the lock) or the async updates (ps_service.h).
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ps_service.h"
#include "terngrad/base/timeline.h"

namespace terngrad::comm {

grpc::Status ParameterServer::Impl::push(const Caller& caller, grpc::ServerReader<rpc::PushChunk>* reader,
                                         rpc::PushReply* reply) {
  rpc::PushChunk chunk;
  if (!reader->Read(&chunk) || !chunk.has_header())
    return grpc::Status(StatusCode::INVALID_ARGUMENT, "Push: the first message must be the header");
  const rpc::PushHeader h = chunk.header();
  std::shared_ptr<const std::vector<Shard>> layout;
  uint64_t epoch = 0;
  uint64_t turns_lead = 0;
  bool counted = false;  // this read counts for held replies (push_skew.h)
  {
    std::lock_guard<std::mutex> lock(mu);
    if (ended()) return ended_status();
    if (phase != Phase::kRunning) return detail::before_init("Push");
    if (grpc::Status s = authorize_locked(caller, h.replica(), "Push", true); !s.ok()) return s;
    heard(h.replica());
    layout = shard_set;
    epoch = run_epoch;
    counted = sync && skew->active();
    if (counted) skew->begin_read(h.replica(), h.step());
    if (!sync) {
      turns->begin_read(h.replica());
      turns_lead = turns->lead_bytes();
    }
  }
  // The read's end, however take_push returns: held replies wait on it (push_skew.h).
  struct ReadCount {
    Impl& ps;
    const uint32_t r;
    const uint64_t epoch;
    ReadCount(Impl& p, uint32_t replica, uint64_t e) : ps(p), r(replica), epoch(e) {}
    ReadCount(const ReadCount&) = delete;
    ReadCount& operator=(const ReadCount&) = delete;
    ~ReadCount() {
      std::lock_guard<std::mutex> lock(ps.mu);
      if (ps.run_epoch == epoch) ps.skew->end_read(r);
      ps.cv.notify_all();
    }
  };
  std::optional<ReadCount> reading;
  if (counted) reading.emplace(*this, h.replica(), epoch);
  // Async: this push holds the link in until at most the lead's bytes of it
  // are still to come, then the next replica's turn may begin (push_turns.h).
  struct TurnHeld {
    Impl& ps;
    const uint32_t r;
    const uint64_t epoch;
    bool far_from_done = true;
    TurnHeld(Impl& p, uint32_t replica, uint64_t e) : ps(p), r(replica), epoch(e) {}
    TurnHeld(const TurnHeld&) = delete;
    TurnHeld& operator=(const TurnHeld&) = delete;
    void nearly_done() {
      std::lock_guard<std::mutex> lock(ps.mu);
      if (ps.run_epoch == epoch) ps.turns->nearly_done(r);
      far_from_done = false;
      ps.turns_cv.notify_all();
    }
    ~TurnHeld() {
      std::lock_guard<std::mutex> lock(ps.mu);
      if (ps.run_epoch == epoch) ps.turns->end_read(r, far_from_done);
      ps.turns_cv.notify_all();
    }
  };
  std::optional<TurnHeld> turn;
  uint64_t to_come = 0;  // payload bytes of this push not read yet (at most: a variable-size codec's capacity)
  if (!sync) {
    turn.emplace(*this, h.replica(), epoch);
    for (const Shard& sh : *layout) to_come += sh.codec->payload_bytes(sh.view.count);
  }
  auto next = [&](rpc::PushChunk& c) {
    if (!reader->Read(&c)) return false;
    if (turn && turn->far_from_done && c.has_payload()) {
      to_come -= std::min<uint64_t>(to_come, c.payload().data().size());
      if (to_come <= turns_lead) turn->nearly_done();
    }
    return true;
  };
  // The mode is fixed once Init has run, and this push holds the shards
  // (codecs) it began with: the push intake reads them without the lock.
  const std::string who = replica_name(h.replica()) + " step " + std::to_string(h.step());
  detail::PushIntake in;
  const int64_t read_from = timeline::recording() ? timeline::now_us() : 0;
  if (const auto refusal = detail::take_push(
          h, *layout, sync, who, next, in))
    return grpc::Status(StatusCode::INVALID_ARGUMENT, *refusal);
  // Arg: the replica, and the bucket's first shard ("replica * 1000 + shard").
  timeline::complete("ps: read a push", read_from, timeline::now_us(),
                     1000 * int64_t{h.replica()} + (in.ids.empty() ? 0 : in.ids.front()));
  reading.reset();
  turn.reset();
  return sync ? push_sync(caller, h, epoch, in.ids, in.payloads, in.received, reply)
              : push_async(caller, h, in.payloads, in.received, reply);
}

grpc::Status ParameterServer::Impl::push_sync(const Caller& caller, const rpc::PushHeader& h, uint64_t epoch,
                                              const std::vector<uint32_t>& ids, std::vector<std::string>& payloads,
                                              uint64_t received, rpc::PushReply* reply) {
  std::unique_lock<std::mutex> lock(mu);  // declared first: released after `job` below is gone
  if (ended()) return ended_status();
  // A rewind while the push was read (a new plan's shards, perhaps): it was
  // read against the run it left; the replica registers again.
  if (run_epoch != epoch) return rewound("Push", h.replica());
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
      return grpc::Status(StatusCode::FAILED_PRECONDITION, replica_name(r) + " pushed step " +
                                                               std::to_string(h.step()) + " but the ps is at step " +
                                                               std::to_string(steps->current_step()));
    case detail::SyncSteps::PushOutcome::kAccepted: break;
  }
  if (h.step_ms_size() > 0) replicas[r].step_ms.assign(h.step_ms().begin(), h.step_ms().end());
  bytes_in += received;
  reply->set_outcome(rpc::PushReply::APPLIED);
  skew->accepted(r, h.step(), received);
  cv.notify_all();  // pullers list who has not pushed; held replies re-check
  // Summing is the slow part: outside the lock (sync_steps.h, SumJob).
  const detail::SyncSteps::SumJob job = steps->take_sums(pushed.accepted);
  if (!job.empty()) {
    ++sums_in_flight;  // a rewind waits: the job reads *steps
    lock.unlock();
    std::string error;
    {
      const timeline::Span span("ps: sum", int64_t{r});
      error = steps->sum(job);
    }
    lock.lock();
    if (!error.empty()) {
      --sums_in_flight;
      fail_locked(error);
      cv.notify_all();
      return ended_status();
    }
  }
  if (steps->settle(job)) {
    cv.notify_all();
    sums_cv.notify_all();  // streamed Pulls: sums are ready
  }
  if (!job.empty() && --sums_in_flight == 0) cv.notify_all();
  if (skew->ahead(r, h.step())) {
    const timeline::Span span("ps: hold a reply", int64_t{r});
    // The push is summed: whatever ends the wait, the reply says so.
    cv.wait_for(lock, kMaxReplyHold,
                [&] { return ended() || run_epoch != epoch || !skew->ahead(r, h.step()); });
  }
  reply->set_global_step(steps->global_step());
  return grpc::Status::OK;
}

grpc::Status ParameterServer::Impl::push_async(const Caller& caller, const rpc::PushHeader& h,
                                               const std::vector<std::string>& payloads, uint64_t received,
                                               rpc::PushReply* reply) {
  std::lock_guard<std::mutex> lock(mu);
  if (ended()) return ended_status();
  if (grpc::Status s = authorize_locked(caller, h.replica(), "Push", true); !s.ok()) return s;
  heard(h.replica());
  detail::AsyncUpdates::Outcome outcome;
  try {
    const timeline::Span span("ps: apply", int64_t{h.replica()});
    outcome = updates->apply(h.replica(), h.step(), payloads);
  } catch (const std::exception& e) {
    fail_locked(std::string("applying ") + replica_name(h.replica()) + "'s push: " + e.what());
    return ended_status();
  }
  if (outcome != detail::AsyncUpdates::Outcome::kApplied) {
    reply->set_outcome(outcome == detail::AsyncUpdates::Outcome::kDuplicate ? rpc::PushReply::DUPLICATE
                                                                             : rpc::PushReply::PAST_END);
    reply->set_global_step(updates->global_step());
    return grpc::Status::OK;
  }
  bytes_in += received;
  reply->set_outcome(rpc::PushReply::APPLIED);
  reply->set_global_step(updates->global_step());
  cv.notify_all();
  return grpc::Status::OK;
}

}  // namespace terngrad::comm
