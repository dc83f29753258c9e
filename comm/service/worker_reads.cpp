// Reads of the ps's state: an async run's values, the chief's checkpoint
// of every ps's shards, a resumed sync run's server states (worker_service.h).
#include <grpcpp/grpcpp.h>

#include <map>
#include <string>
#include <vector>

#include "chunks.h"
#include "server_state.h"
#include "worker_service.h"

namespace terngrad::comm {

namespace {
using Clock = std::chrono::steady_clock;
using grpc::StatusCode;
}  // namespace

int64_t WorkerClient::pull_values(std::span<const std::span<float>> values) {
  Impl& m = *impl_;
  if (m.sync) throw std::logic_error("pull_values in a sync run");
  const Layout& l = m.layout;
  if (values.size() != l.variables.size())
    throw std::invalid_argument("pull_values: " + std::to_string(values.size()) + " tensors for " +
                                std::to_string(l.variables.size()) + " variables");
  detail::for_each_ps(l.num_ps, [&](int p) {
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
          if (t.shard() >= parts.size())
            err = "values for unknown shard " + std::to_string(t.shard());
          else
            err = parts[t.shard()].add(t.offset(), t.total_bytes(), t.data(), 4 * l.shards[mine[t.shard()]].count);
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
  detail::for_each_ps(l.num_ps, [&](int p) {
    const auto& mine = l.shards_on[p];
    std::map<std::pair<uint32_t, std::string>, detail::Reassembly> parts;
    read_checkpoint(
        m, p, 0, [&] { parts.clear(); },
        [&](const rpc::TensorChunk& t) -> std::string {
          if (t.shard() >= mine.size()) return "state for unknown shard " + std::to_string(t.shard());
          return parts[{t.shard(), t.slot()}].add(t.offset(), t.total_bytes(), t.data(),
                                                  4 * l.shards[mine[t.shard()]].count);
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
  detail::for_each_ps(l.num_ps, [&](int p) {
    const auto& mine = l.shards_on[p];
    std::map<uint32_t, detail::Reassembly> parts;
    read_checkpoint(
        m, p, step, [&] { parts.clear(); },
        [&](const rpc::TensorChunk& t) -> std::string {
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

}  // namespace terngrad::comm
