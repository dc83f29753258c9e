// One step's traffic: the pushes of its payloads and the pulls of its
// sums, plain (push, pull_sums) and pipelined (begin_step .. end_step:
// buckets leave as they are encoded, sums are handed out as they arrive) (worker_service.h).
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "chunks.h"
#include "terngrad/base/timeline.h"
#include "terngrad/comm/comm_threads.h"
#include "worker_service.h"

namespace terngrad::comm {

namespace {
using Clock = std::chrono::steady_clock;
using grpc::StatusCode;
}  // namespace

void WorkerClient::Impl::fail_step_locked(std::exception_ptr e) {
  if (!pipe_error) pipe_error = e;
  for (grpc::ClientContext* c : live_pulls)
    if (c) c->TryCancel();
  pcv.notify_all();
}

void WorkerClient::Impl::sender_loop(int p) {
  timeline::name_thread("push sender");
  std::unique_lock<std::mutex> lk(pm);
  for (;;) {
    pcv.wait(lk, [&] { return stop_senders || !queues[p].empty(); });
    if (stop_senders) return;
    auto next = std::min_element(queues[p].begin(), queues[p].end(),
                                 [](const Bucket& a, const Bucket& b) { return a.priority < b.priority; });
    Bucket b = std::move(*next);
    queues[p].erase(next);
    if (in_flight++ == 0) busy_since = Clock::now();
    lk.unlock();
    std::exception_ptr error;
    try {
      const timeline::Span span("push a bucket", b.local.empty() ? -1 : static_cast<int64_t>(b.local.front()));
      push_bucket_to(p, b);
    } catch (...) {
      error = std::current_exception();
    }
    lk.lock();
    if (error) fail_step_locked(error);
    for (const auto& payload : b.payloads) busy_bytes += payload.size();
    if (--in_flight == 0) busy_s += std::chrono::duration<double>(Clock::now() - busy_since).count();
    if (--pushes_pending == 0) pushed_at = Clock::now();
    pcv.notify_all();
  }
}

WorkerClient::PushOutcome WorkerClient::Impl::outcome_of(const std::vector<rpc::PushReply>& replies) {
  PushOutcome out;
  for (const auto& r : replies) {
    if (r.outcome() == rpc::PushReply::STALE) ++out.stale;
    if (r.outcome() == rpc::PushReply::PAST_END) ++out.past_end;
    if (r.outcome() != rpc::PushReply::APPLIED) out.applied = false;
  }
  return out;
}

rpc::PushChunk WorkerClient::Impl::push_head(int64_t step, float loss) const {
  rpc::PushChunk head;
  head.mutable_header()->set_replica(static_cast<uint32_t>(replica));
  head.mutable_header()->set_step(step);
  head.mutable_header()->set_loss(loss);
  return head;
}

void WorkerClient::Impl::push_bucket_to(int p, const Bucket& b) {
  rpc::PushReply reply;
  uint64_t bytes = 0;
  call(p, "Push", [&] {
    grpc::ClientContext ctx;
    const auto armed = arm(ctx);
    reply.Clear();
    detail::PushWriter w(channels[p].get(), &ctx, &reply);
    rpc::PushChunk head = push_head(b.step, b.loss);
    for (uint32_t s : b.local) head.mutable_header()->add_shards(s);
    for (float t : b.step_ms) head.mutable_header()->add_step_ms(t);
    bytes = 0;
    bool ok = w.write(head);
    for (size_t i = 0; ok && i < b.local.size(); ++i) ok = write_payload(w, b.local[i], b.payloads[i], bytes);
    w.WritesDone();
    message_sent += w.message_bytes();
    return w.Finish();
  });
  payload_sent += bytes;
  message_received += reply.ByteSizeLong();
}

void WorkerClient::Impl::pull_stream(int p) {
  timeline::name_thread("sum puller");
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
        if (have[local])
          req.add_have(static_cast<uint32_t>(local));
        else
          parts[local].restart();
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
            timeline::instant("sum landed", static_cast<int64_t>(local));
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

void WorkerClient::Impl::join_pullers() {
  for (auto& t : pullers)
    if (t.joinable()) t.join();
  pullers.clear();
}

bool WorkerClient::Impl::write_payload(detail::PushWriter& w, uint32_t local, std::span<const uint8_t> buf,
                                       uint64_t& bytes) {
  bytes += buf.size();
  return w.write_payload(local, buf);
}

bool WorkerClient::Impl::write_payloads(detail::PushWriter& w, int p,
                                        std::span<const std::span<const uint8_t>> payloads, uint64_t& bytes) {
  const auto& mine = layout.shards_on[p];
  for (size_t local = 0; local < mine.size(); ++local)
    if (!write_payload(w, static_cast<uint32_t>(local), payloads[mine[local]], bytes)) return false;
  return true;
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
  detail::for_each_ps(m.layout.num_ps, [&](int p) {
    uint64_t bytes = 0;
    m.call(p, "Push", [&] {
      grpc::ClientContext ctx;
      const auto armed = m.arm(ctx);
      replies[p].Clear();
      detail::PushWriter w(m.channels[p].get(), &ctx, &replies[p]);
      rpc::PushChunk head = m.push_head(m.sync ? step : m.async_steps[p], loss);
      if (p == 0 && m.sync)
        for (float t : report) head.mutable_header()->add_step_ms(t);
      bytes = 0;
      if (w.write(head)) m.write_payloads(w, p, shard_payloads, bytes);
      w.WritesDone();
      m.message_sent += w.message_bytes();
      return w.Finish();
    });
    m.payload_sent += bytes;
    m.message_received += replies[p].ByteSizeLong();
  });
  return Impl::outcome_of(replies);
}

WorkerClient::Sums WorkerClient::pull_sums(int64_t step, std::vector<std::vector<uint8_t>>& sums) {
  Impl& m = *impl_;
  if (!m.sync) throw std::logic_error("pull_sums in an async run");
  sums.resize(m.layout.shards.size());
  std::vector<rpc::PullHeader> heads(m.layout.num_ps);
  const auto start = Clock::now();
  std::vector<double> ready_s(m.layout.num_ps, 0.0);
  detail::for_each_ps(m.layout.num_ps, [&](int p) {
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
            if (pc.shard() >= parts.size())
              err = "sum for unknown shard " + std::to_string(pc.shard());
            else
              err = parts[pc.shard()].add(pc.offset(), pc.total_bytes(), pc.data(), UINT64_MAX);
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
  return {heads[0].contributions(),
          heads[0].mean_loss(),
          *std::max_element(ready_s.begin(), ready_s.end()),
          {heads[0].replicas_step_ms().begin(), heads[0].replicas_step_ms().end()},
          heads[0].replicas_reporting()};
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
        for (int k = 0; k < 2; ++k) m.senders.push_back(comm_thread([&m, p] { m.sender_loop(p); }));
    }
  }
  for (int p = 0; p < P; ++p)
    m.pullers.push_back(comm_thread([&m, p] {
      try {
        m.pull_stream(p);
      } catch (const Impl::Cancelled&) {
      } catch (...) {
        std::lock_guard<std::mutex> lk(m.pm);
        m.fail_step_locked(std::current_exception());
      }
    }));
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
    if (b.local.empty() || shards[i] < b.priority) b.priority = shards[i];
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
  if (m.busy_s > 0) m.push_rate = static_cast<double>(m.busy_bytes) / m.busy_s;
  m.busy_s = 0;
  m.busy_bytes = 0;
  m.pipe_sums = nullptr;
  const rpc::PullHeader& h = m.pipe_heads[0];
  return {h.contributions(),
          h.mean_loss(),
          0.0,
          {h.replicas_step_ms().begin(), h.replicas_step_ms().end()},
          h.replicas_reporting()};
}

double WorkerClient::push_rate() const {
  std::lock_guard<std::mutex> lk(impl_->pm);
  return impl_->push_rate;
}

void WorkerClient::report_step_times(std::vector<float> ms) {
  if (ms.size() != kStepTimeFields)
    throw std::invalid_argument("report_step_times: " + std::to_string(ms.size()) + " values, expected " +
                                std::to_string(kStepTimeFields));
  std::lock_guard<std::mutex> lk(impl_->pm);
  impl_->step_report = std::move(ms);
}

}  // namespace terngrad::comm
