// The async replica's streamed pull (begin_pull .. end_pull): pull_values()'s
// call per ps, each shard copied into the replica's weights as soon as it is
// whole, so the forward pass waits only for the layer it is at (worker_service.h).
#include <grpcpp/grpcpp.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "chunks.h"
#include "terngrad/base/timeline.h"
#include "terngrad/comm/comm_threads.h"
#include "worker_service.h"

namespace terngrad::comm {

namespace {
using grpc::StatusCode;
}  // namespace

void WorkerClient::Impl::stream_pull_from(int p, std::optional<int64_t> after_own_push, bool push_turn) {
  timeline::name_thread("values puller");
  const auto& mine = layout.shards_on[p];
  const uint64_t restarts_before = restarts_met_of(p);
  call(p, "Pull", [&] {
    grpc::ClientContext ctx;
    const auto armed = arm(ctx);
    rpc::PullRequest req;
    req.set_replica(static_cast<uint32_t>(replica));
    if (after_own_push && restarts_met_of(p) != restarts_before) after_own_push.reset();  // the ps restarted meanwhile
    if (after_own_push) {
      req.set_after_own_push(true);
      req.set_own_push_step(*after_own_push);
    }
    req.set_push_turn(push_turn);
    message_sent += req.ByteSizeLong();
    auto r = stubs[p]->Pull(&ctx, req);
    rpc::PullChunk c;
    std::vector<detail::Reassembly> parts(mine.size());
    std::vector<bool> whole_chunk(mine.size(), false);  // a shard that came in one chunk
    std::string err;
    while (r->Read(&c)) {
      message_received += c.ByteSizeLong();
      if (c.has_header()) {
        std::lock_guard<std::mutex> lk(sm);
        if (!pulled.answered[p]) async_steps[p] = c.header().step();  // a retry keeps the first answer's step
        pulled.answered[p] = true;
        scv.notify_all();
      } else if (c.has_values() && err.empty()) {
        const rpc::TensorChunk& t = c.values();
        if (t.shard() >= parts.size()) {
          err = "values for unknown shard " + std::to_string(t.shard());
          continue;
        }
        const ShardSpec& sh = layout.shards[mine[t.shard()]];
        detail::Reassembly& part = parts[t.shard()];
        if (whole_chunk[t.shard()]) {
          err = "values for " + layout.variables[sh.variable].name + " after the whole shard";
          continue;
        }
        // A shard in one chunk (every shard of at most kChunkBytes) is copied
        // from the message into the weights, not through the reassembly first.
        const bool whole = !part.started() && t.offset() == 0 && t.total_bytes() == 4 * sh.count &&
                           t.data().size() == t.total_bytes();
        if (whole) {
          whole_chunk[t.shard()] = true;
        } else {
          err = part.add(t.offset(), t.total_bytes(), t.data(), 4 * sh.count);
          if (!err.empty() || !part.complete()) continue;
          if (part.bytes().size() != 4 * sh.count) {
            err = "incomplete values for " + layout.variables[sh.variable].name;
            continue;
          }
        }
        const void* from = whole ? static_cast<const void*>(t.data().data()) : part.bytes().data();
        std::lock_guard<std::mutex> lk(sm);
        if (pulled.landed[mine[t.shard()]]) continue;  // landed in an earlier attempt: maybe read already
        std::memcpy(pulled.values[sh.variable].data() + sh.begin, from, 4 * sh.count);
        payload_received += 4 * sh.count;
        pulled.landed[mine[t.shard()]] = true;
        timeline::instant("values landed", static_cast<int64_t>(t.shard()));
        scv.notify_all();
      }
    }
    grpc::Status s = r->Finish();
    if (s.ok() && !err.empty()) s = grpc::Status(StatusCode::DATA_LOSS, err);
    if (s.ok()) {
      std::lock_guard<std::mutex> lk(sm);
      for (size_t local = 0; local < mine.size(); ++local)
        if (!pulled.landed[mine[local]])
          s = grpc::Status(StatusCode::DATA_LOSS,
                           "no values for " + layout.variables[layout.shards[mine[local]].variable].name);
    }
    return s;
  });
}

int64_t WorkerClient::begin_pull(std::span<const std::span<float>> values, bool push_turn) {
  start_pull(values, false, push_turn);
  return pulled_step();
}

void WorkerClient::start_pull(std::span<const std::span<float>> values, bool after_own_push, bool push_turn) {
  Impl& m = *impl_;
  if (m.sync) throw std::logic_error("begin_pull in a sync run");
  const Layout& l = m.layout;
  if (values.size() != l.variables.size())
    throw std::invalid_argument("begin_pull: " + std::to_string(values.size()) + " tensors for " +
                                std::to_string(l.variables.size()) + " variables");
  for (size_t v = 0; v < values.size(); ++v)
    if (values[v].size() != l.variables[v].size)
      throw std::invalid_argument("begin_pull: wrong size for " + l.variables[v].name);
  std::lock_guard<std::mutex> lk(m.sm);
  if (!m.pulled.readers.empty()) throw std::logic_error("begin_pull while the last pull is in flight");
  if (after_own_push && m.streamed.writers.empty())
    throw std::logic_error("start_pull after this replica's push, with no push in flight");
  m.pulled = {};
  m.pulled.values.assign(values.begin(), values.end());
  m.pulled.landed.assign(l.shards.size(), false);
  m.pulled.answered.assign(l.num_ps, false);
  for (int p = 0; p < l.num_ps; ++p) {
    // The push in flight to ps p carries the step of the values last pulled from it.
    const std::optional<int64_t> own = after_own_push ? std::optional<int64_t>(m.async_steps[p]) : std::nullopt;
    if (push_turn) ++m.turn_pulls_started[p];
    m.pulled.readers.push_back(comm_thread([&m, p, own, push_turn] {
      try {
        m.stream_pull_from(p, own, push_turn);
      } catch (...) {
        std::lock_guard<std::mutex> lk(m.sm);
        if (!m.pulled.error) m.pulled.error = std::current_exception();
        m.scv.notify_all();
      }
      if (push_turn) {  // the push waiting for this turn may go
        std::lock_guard<std::mutex> lk(m.sm);
        ++m.turn_pulls_ended[p];
        m.scv.notify_all();
      }
    }));
  }
}

int64_t WorkerClient::pulled_step() {
  Impl& m = *impl_;
  std::unique_lock<std::mutex> lk(m.sm);
  if (m.pulled.readers.empty()) throw std::logic_error("pulled_step with no pull in flight");
  m.scv.wait(lk, [&] {
    if (m.pulled.error) return true;
    for (bool a : m.pulled.answered)
      if (!a) return false;
    return true;
  });
  if (m.pulled.error) {
    lk.unlock();
    end_pull();  // joins, then throws the error
  }
  {
    std::lock_guard<std::mutex> beat(m.mu);
    m.step_for_beat = m.async_steps[0];
  }
  return m.async_steps[0];
}

void WorkerClient::wait_values(size_t v, uint64_t elements) {
  Impl& m = *impl_;
  std::unique_lock<std::mutex> lk(m.sm);
  if (v >= m.pulled.values.size() || elements > m.pulled.values[v].size())
    throw std::invalid_argument("wait_values(" + std::to_string(v) + ", " + std::to_string(elements) + "): " +
                                std::to_string(m.pulled.values.size()) + " variables" +
                                (v < m.pulled.values.size()
                                     ? ", variable " + std::to_string(v) + " has " +
                                           std::to_string(m.pulled.values[v].size()) + " elements"
                                     : std::string()));
  auto landed = [&] {
    for (size_t sh : m.layout.shards_of[v])
      if (m.layout.shards[sh].begin < elements && !m.pulled.landed[sh]) return false;
    return true;
  };
  m.scv.wait(lk, [&] { return m.pulled.error || landed(); });
  if (m.pulled.error && !landed()) {
    lk.unlock();
    end_pull();
  }
}

void WorkerClient::end_pull() {
  Impl& m = *impl_;
  std::vector<std::thread> readers;
  {
    std::lock_guard<std::mutex> lk(m.sm);
    readers = std::move(m.pulled.readers);
    m.pulled.readers.clear();
  }
  for (auto& t : readers) t.join();
  std::lock_guard<std::mutex> lk(m.sm);
  if (m.pulled.error) std::rethrow_exception(m.pulled.error);
}

}  // namespace terngrad::comm
