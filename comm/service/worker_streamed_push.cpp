// The async replica's streamed push (begin_push .. end_push): one Push call
// per ps, as push() makes, whose payloads are written as the backward pass
// encodes them, so the bytes leave while earlier layers still compute
// (worker_service.h).
#include <grpcpp/grpcpp.h>

#include <string>
#include <vector>

#include "terngrad/base/timeline.h"
#include "terngrad/comm/comm_threads.h"
#include "worker_service.h"

namespace terngrad::comm {

void WorkerClient::Impl::stream_push_to(int p) {
  timeline::name_thread("push writer");
  const timeline::Span span("push stream", p);
  const size_t expected = layout.shards_on[p].size();
  rpc::PushReply& reply = streamed.replies[p];
  uint64_t bytes = 0;
  // The step of the values this gradient was computed at, read once: a pull
  // sent with the push (start_pull after_own_push) replaces it when answered,
  // and a retried call must carry the same tag (a new one would apply twice).
  int64_t tag = 0;
  {
    std::lock_guard<std::mutex> lk(sm);
    tag = async_steps[p];
  }
  call(p, "Push", [&] {
    float loss = 0;
    {
      std::unique_lock<std::mutex> lk(sm);
      scv.wait(lk, [&] { return streamed.loss_set || streamed.ended; });
      if (!streamed.loss_set) throw Cancelled{};  // ended before a payload: no call, not even a header
      loss = streamed.loss;
      // The push turn the last pull asked for (push_turns.h): its end says this push may go.
      if (turn_pulls_ended[p] < streamed.turns_needed[p]) {
        const timeline::Span wait("wait for a push turn", p);
        scv.wait(lk, [&] { return turn_pulls_ended[p] >= streamed.turns_needed[p]; });
      }
    }
    grpc::ClientContext ctx;
    const auto armed = arm(ctx);
    reply.Clear();
    detail::PushWriter w(channels[p].get(), &ctx, &reply);
    bytes = 0;
    bool ok = w.write(push_head(tag, loss));
    // Every attempt writes from the first payload: a retried call starts over.
    for (size_t i = 0; ok && i < expected; ++i) {
      std::pair<uint32_t, std::span<const uint8_t>> next;
      {
        std::unique_lock<std::mutex> lk(sm);
        scv.wait(lk, [&] { return streamed.queued[p].size() > i || streamed.ended; });
        if (streamed.queued[p].size() <= i) {  // ended short: never send part of a push
          ctx.TryCancel();
          throw Cancelled{};
        }
        next = streamed.queued[p][i];
      }
      ok = write_payload(w, next.first, next.second, bytes);
      timeline::instant("payload written", next.first);
    }
    w.WritesDone();
    message_sent += w.message_bytes();
    return w.Finish();
  });
  payload_sent += bytes;
  message_received += reply.ByteSizeLong();
}

void WorkerClient::begin_push() {
  Impl& m = *impl_;
  if (m.sync) throw std::logic_error("begin_push in a sync run");
  std::lock_guard<std::mutex> lk(m.sm);
  if (!m.streamed.writers.empty()) throw std::logic_error("begin_push while the last push is in flight");
  m.streamed = {};
  m.streamed.queued.resize(m.layout.num_ps);
  m.streamed.replies.resize(m.layout.num_ps);
  m.streamed.turns_needed = m.turn_pulls_started;
  for (int p = 0; p < m.layout.num_ps; ++p)
    m.streamed.writers.push_back(comm_thread([&m, p] {
      try {
        m.stream_push_to(p);
      } catch (const Impl::Cancelled&) {
        // end_push() names what is missing; a closing client needs nothing
      } catch (...) {
        std::lock_guard<std::mutex> lk(m.sm);
        if (!m.streamed.error) m.streamed.error = std::current_exception();
      }
    }));
}

void WorkerClient::push_payloads(float loss, std::span<const size_t> shards,
                                 std::span<const std::span<const uint8_t>> shard_payloads) {
  Impl& m = *impl_;
  if (shards.size() != shard_payloads.size())
    throw std::invalid_argument("push_payloads: " + std::to_string(shard_payloads.size()) + " payloads for " +
                                std::to_string(shards.size()) + " shards");
  std::lock_guard<std::mutex> lk(m.sm);
  if (m.streamed.writers.empty()) throw std::logic_error("push_payloads before begin_push");
  if (!m.streamed.loss_set) m.streamed.loss = loss, m.streamed.loss_set = true;
  for (size_t i = 0; i < shards.size(); ++i) {
    if (shards[i] >= m.layout.shards.size())
      throw std::invalid_argument("push_payloads: shard " + std::to_string(shards[i]) + " of " +
                                 std::to_string(m.layout.shards.size()));
    m.streamed.queued[m.layout.shards[shards[i]].ps].emplace_back(m.local_index[shards[i]], shard_payloads[i]);
  }
  m.scv.notify_all();
}

WorkerClient::PushOutcome WorkerClient::end_push() {
  Impl& m = *impl_;
  std::vector<std::thread> writers;
  {
    std::lock_guard<std::mutex> lk(m.sm);
    m.streamed.ended = true;
    writers = std::move(m.streamed.writers);
    m.streamed.writers.clear();
    m.scv.notify_all();
  }
  for (auto& t : writers) t.join();
  std::lock_guard<std::mutex> lk(m.sm);
  if (m.streamed.error) std::rethrow_exception(m.streamed.error);
  for (int p = 0; p < m.layout.num_ps; ++p)
    if (m.streamed.queued[p].size() != m.layout.shards_on[p].size())
      throw std::logic_error("end_push: " + std::to_string(m.streamed.queued[p].size()) + " of " +
                             m.ps_name(p) + "'s " + std::to_string(m.layout.shards_on[p].size()) +
                             " shards were queued");
  return Impl::outcome_of(m.streamed.replies);
}

}  // namespace terngrad::comm
