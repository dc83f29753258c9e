// The parameter server (ps_server.h): the gRPC service over one lock-guarded
// state. Long polls wait on one condition variable; a monitor thread enforces
// the startup and liveness timeouts.
#include "terngrad/comm/ps_server.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "chunks.h"
#include "parameter_server.grpc.pb.h"
#include "terngrad/comm/errors.h"
#include "terngrad/comm/gradient_codec.h"
#include "terngrad/comm/step_times.h"

namespace terngrad::comm {

namespace {

using Clock = std::chrono::steady_clock;
using grpc::ServerContext;
using grpc::StatusCode;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

enum class Phase { kWaitingInit, kRunning, kFinished, kFailed };
const char* phase_name(Phase p) {
  switch (p) {
    case Phase::kWaitingInit: return "waiting_init";
    case Phase::kRunning: return "running";
    case Phase::kFinished: return "finished";
    case Phase::kFailed: return "failed";
  }
  return "?";
}

struct Replica {
  bool registered = false;
  bool done = false;
  bool gone = false;
  std::string gone_reason;
  std::string label;
  Clock::time_point last_heard{};
  int64_t last_pushed = -1;
  int64_t last_stale = -1;  // the last step whose push was counted stale
  std::vector<float> step_ms;  // its last step-time report (PushHeader.step_ms)
};

struct Shard {
  ShardView view;
  std::unique_ptr<GradientCodec> codec;
  std::vector<float> values;  // async
};

// A step's sums (sync). Filled shard by shard, each as soon as every
// replica has delivered it (when a step needs every replica), or all at
// once when the step closes (backup replicas); shared so that pullers
// stream it without a copy while later shards are still being summed.
struct Aggregate {
  int64_t step = 0;
  uint32_t contributions = 0;
  float mean_loss = 0;
  std::vector<std::vector<uint8_t>> shards;
  std::vector<bool> ready;  // shards[s] is summed and will not change
  size_t ready_count = 0;
  bool complete = false;    // the step is closed and every shard summed
  int pulls = 0;            // replicas that pulled all of it; at total it is no longer needed
};

// The pushes of the step being collected (sync). A replica delivers its
// shards in one push or in several buckets; it counts once it has
// delivered every shard.
struct StepBuffer {
  int64_t step = 0;
  std::vector<std::vector<std::string>> payloads;  // [replica][shard]
  std::vector<std::vector<bool>> got;              // [replica][shard]
  std::vector<size_t> got_count;                   // [replica]
  std::vector<int> have;                           // [shard] replicas that delivered it
  std::vector<bool> pushed;                        // [replica] delivered every shard
  std::vector<bool> loss_known;
  std::vector<float> loss;
  int count = 0;        // replicas that delivered every shard
  bool closed = false;  // replicas_to_aggregate reached: later pushes are stale
  std::shared_ptr<Aggregate> agg;
};

}  // namespace

struct ParameterServer::Impl final : public rpc::ParameterServer::Service {
  ServerOptions opt;
  UpdateHandler* handler;
  std::string address;
  int port = 0;
  std::unique_ptr<grpc::Server> server;

  std::mutex mu;
  std::condition_variable cv;
  Phase phase = Phase::kWaitingInit;
  std::string failure;
  const Clock::time_point started = Clock::now();
  // From the chief's Init.
  uint64_t fingerprint = 0;
  bool sync = true;
  int total = 0, needed = 0;  // replicas, replicas_to_aggregate
  std::vector<rpc::Variable> variables;
  std::vector<Shard> shards;
  int64_t global_step = 0;
  std::vector<Replica> replicas;
  StepBuffer current;
  std::deque<std::shared_ptr<Aggregate>> recent;  // completed steps, for late pullers
  // Sum buffers of earlier steps, reused so large tensors do not cost fresh
  // (page-faulting, zero-filled) memory every step.
  std::vector<std::vector<uint8_t>> spare_sums;  // [shard]
  // Scale sharing (ps 0), per step: each variable's running max and who reported it.
  struct Scales {
    int64_t step = -1;
    std::vector<float> max;                   // [variable]
    std::vector<std::vector<bool>> reported;  // [replica][variable]
    std::vector<int> count;                   // [variable] replicas that reported it
  };
  std::deque<Scales> scales;
  uint64_t stale = 0, duplicates = 0, bytes_in = 0, bytes_out = 0;

  std::thread monitor;
  std::atomic<bool> stopping{false};

  Impl(const std::string& addr, ServerOptions o, UpdateHandler* h) : opt(std::move(o)), handler(h), address(addr) {}

  void log(const std::string& msg) {
    if (opt.verbose) std::fprintf(stderr, "ps %d: %s\n", opt.task_index, msg.c_str());
  }

  std::string replica_name(uint32_t r) const {
    if (r < opt.replica_names.size() && !opt.replica_names[r].empty()) return opt.replica_names[r];
    return "replica " + std::to_string(r);
  }

  // --- state helpers (mu held) ---
  void fail_locked(const std::string& why) {
    if (phase == Phase::kFailed || phase == Phase::kFinished) return;
    phase = Phase::kFailed;
    failure = why;
    log("run failed: " + why);
    cv.notify_all();
  }

  grpc::Status ended_status() const {
    if (phase == Phase::kFailed) return grpc::Status(StatusCode::ABORTED, "ps " + std::to_string(opt.task_index) + ": " + failure);
    return grpc::Status(StatusCode::OUT_OF_RANGE, "ps " + std::to_string(opt.task_index) + ": training finished");
  }
  bool ended() const { return phase == Phase::kFailed || phase == Phase::kFinished; }

  grpc::Status check_replica(uint32_t r) const {
    if (r >= static_cast<uint32_t>(total))
      return grpc::Status(StatusCode::INVALID_ARGUMENT, "replica " + std::to_string(r) + " is outside the run's " +
                                                      std::to_string(total) + " replicas");
    return grpc::Status::OK;
  }

  void heard(uint32_t r) {
    if (r < replicas.size()) replicas[r].last_heard = Clock::now();
  }

  std::vector<uint32_t> unregistered() const {
    std::vector<uint32_t> m;
    for (size_t r = 0; r < replicas.size(); ++r)
      if (!replicas[r].registered) m.push_back(static_cast<uint32_t>(r));
    return m;
  }

  // Waits until pred() or the poll interval / the call's deadline / an end.
  template <class Pred>
  void long_poll(std::unique_lock<std::mutex>& lock, ServerContext* ctx, Pred pred) {
    auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(opt.poll_s));
    const auto deadline = ctx->deadline();
    const auto now_sys = std::chrono::system_clock::now();
    if (deadline > now_sys) {
      const auto left = std::chrono::duration_cast<Clock::duration>(deadline - now_sys) - std::chrono::milliseconds(200);
      until = std::min(until, Clock::now() + std::max(left, Clock::duration::zero()));
    }
    cv.wait_until(lock, until, [&] { return pred() || ended() || ctx->IsCancelled(); });
  }

  // --- the service ---
  grpc::Status Init(ServerContext*, grpc::ServerReader<rpc::InitChunk>* reader, rpc::InitReply*) override {
    rpc::InitChunk chunk;
    if (!reader->Read(&chunk) || !chunk.has_header())
      return grpc::Status(StatusCode::INVALID_ARGUMENT, "Init: the first message must be the header");
    const rpc::InitHeader h = chunk.header();
    if (h.replica() != 0) return grpc::Status(StatusCode::PERMISSION_DENIED, "Init: only the chief (replica 0) initializes");
    if (h.total_replicas() == 0 || h.replicas_to_aggregate() == 0 || h.replicas_to_aggregate() > h.total_replicas())
      return grpc::Status(StatusCode::INVALID_ARGUMENT, "Init: replicas_to_aggregate " + std::to_string(h.replicas_to_aggregate()) +
                                                      " must be in [1, total_replicas " + std::to_string(h.total_replicas()) + "]");
    if (!h.sync() && handler == nullptr)
      return grpc::Status(StatusCode::FAILED_PRECONDITION, "Init: async training needs an update rule, and this ps has none");
    std::vector<Shard> fresh;
    for (int i = 0; i < h.shards_size(); ++i) {
      const rpc::Shard& s = h.shards(i);
      if (s.variable() >= static_cast<uint32_t>(h.variables_size()))
        return grpc::Status(StatusCode::INVALID_ARGUMENT, "Init: shard " + std::to_string(i) + " names variable " +
                                                        std::to_string(s.variable()) + " of " + std::to_string(h.variables_size()));
      const rpc::Variable& v = h.variables(s.variable());
      if (s.begin() > v.size() || s.count() > v.size() - s.begin())
        return grpc::Status(StatusCode::INVALID_ARGUMENT, "Init: shard " + std::to_string(i) + " lies outside " + v.name());
      Shard sh;
      sh.view = {s.variable(), v.name(), s.begin(), s.count(), v.codec()};
      try {
        sh.codec = make_codec(v.codec());
      } catch (const std::exception& e) {
        return grpc::Status(StatusCode::INVALID_ARGUMENT, std::string("Init: ") + v.name() + ": " + e.what());
      }
      if (!h.sync()) sh.values.assign(s.count(), 0.0f);
      fresh.push_back(std::move(sh));
    }
    if (!h.sync())
      for (size_t i = 0; i < fresh.size(); ++i) handler->init_shard(i, fresh[i].view);
    // Async: values and slots follow, each a complete shard-sized tensor.
    std::vector<std::vector<detail::Reassembly>> parts(fresh.size());
    std::vector<std::vector<std::string>> part_names(fresh.size());
    while (reader->Read(&chunk)) {
      if (!chunk.has_tensor()) return grpc::Status(StatusCode::INVALID_ARGUMENT, "Init: a second header");
      const rpc::TensorChunk& t = chunk.tensor();
      if (h.sync()) return grpc::Status(StatusCode::INVALID_ARGUMENT, "Init: sync runs keep no values on the ps");
      if (t.shard() >= fresh.size()) return grpc::Status(StatusCode::INVALID_ARGUMENT, "Init: tensor for unknown shard " + std::to_string(t.shard()));
      auto& names = part_names[t.shard()];
      size_t k = std::find(names.begin(), names.end(), t.slot()) - names.begin();
      if (k == names.size()) {
        names.push_back(t.slot());
        parts[t.shard()].emplace_back();
      }
      const std::string err = parts[t.shard()][k].add(t.offset(), t.total_bytes(), t.data(), 4 * fresh[t.shard()].view.count);
      if (!err.empty()) return grpc::Status(StatusCode::INVALID_ARGUMENT, "Init: shard " + std::to_string(t.shard()) + " " + t.slot() + ": " + err);
    }
    for (size_t s = 0; s < fresh.size(); ++s) {
      std::vector<std::pair<std::string, std::span<float>>> targets;
      if (!h.sync()) {
        targets = handler->slots(s);
        targets.insert(targets.begin(), {"", std::span<float>(fresh[s].values)});
      }
      for (size_t k = 0; k < part_names[s].size(); ++k) {
        auto it = std::find_if(targets.begin(), targets.end(), [&](auto& p) { return p.first == part_names[s][k]; });
        if (it == targets.end())
          return grpc::Status(StatusCode::INVALID_ARGUMENT, "Init: shard " + std::to_string(s) + " has no slot \"" + part_names[s][k] + "\"");
        detail::Reassembly& r = parts[s][k];
        if (!r.complete() || r.bytes().size() != it->second.size_bytes())
          return grpc::Status(StatusCode::INVALID_ARGUMENT, "Init: shard " + std::to_string(s) + " slot \"" + part_names[s][k] +
                                                          "\" is incomplete or has the wrong size");
        std::memcpy(it->second.data(), r.bytes().data(), r.bytes().size());
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    if (phase != Phase::kWaitingInit) {
      if (phase == Phase::kRunning && h.fingerprint() == fingerprint) return grpc::Status::OK;  // a retried Init
      return phase == Phase::kRunning ? grpc::Status(StatusCode::FAILED_PRECONDITION, "Init: already initialized with another layout")
                                      : ended_status();
    }
    fingerprint = h.fingerprint();
    sync = h.sync();
    total = static_cast<int>(h.total_replicas());
    needed = static_cast<int>(h.replicas_to_aggregate());
    variables.assign(h.variables().begin(), h.variables().end());
    shards = std::move(fresh);
    global_step = h.global_step();
    replicas.assign(total, Replica{});
    spare_sums.assign(shards.size(), {});
    start_step_locked(global_step);
    phase = Phase::kRunning;
    log("initialized: " + std::to_string(shards.size()) + " shards, " + (sync ? "sync" : "async") + ", " +
        std::to_string(needed) + " of " + std::to_string(total) + " replicas per step, global step " +
        std::to_string(global_step));
    cv.notify_all();
    return grpc::Status::OK;
  }

  grpc::Status Register(ServerContext* ctx, const rpc::RegisterRequest* req, rpc::RegisterReply* reply) override {
    std::unique_lock<std::mutex> lock(mu);
    long_poll(lock, ctx, [&] { return phase != Phase::kWaitingInit; });
    if (ended()) return ended_status();
    if (phase == Phase::kWaitingInit) {  // the chief has not initialized this ps yet
      reply->set_ready(false);
      reply->add_missing(0);
      return grpc::Status::OK;
    }
    if (grpc::Status s = check_replica(req->replica()); !s.ok()) return s;
    if (req->fingerprint() != fingerprint)
      return grpc::Status(StatusCode::INVALID_ARGUMENT,
                    replica_name(req->replica()) + " has a different model, codec, placement or sync setting than the chief "
                    "(layout fingerprint " + std::to_string(req->fingerprint()) + " vs " + std::to_string(fingerprint) +
                    "): start every task with the same flags");
    Replica& r = replicas[req->replica()];
    if (!r.registered) log(replica_name(req->replica()) + " (" + req->label() + ") joined");
    r.registered = true;
    r.gone = false;
    r.label = req->label();
    heard(req->replica());
    cv.notify_all();
    long_poll(lock, ctx, [&] { return unregistered().empty(); });
    if (ended()) return ended_status();
    const auto missing = unregistered();
    reply->set_ready(missing.empty());
    for (uint32_t m : missing) reply->add_missing(m);
    reply->set_global_step(global_step);
    return grpc::Status::OK;
  }

  grpc::Status ExchangeScales(ServerContext* ctx, const rpc::ScalesRequest* req, rpc::ScalesReply* reply) override {
    std::unique_lock<std::mutex> lock(mu);
    if (ended()) return ended_status();
    if (phase != Phase::kRunning) return grpc::Status(StatusCode::FAILED_PRECONDITION, "ExchangeScales before Init");
    if (grpc::Status s = check_replica(req->replica()); !s.ok()) return s;
    // Which variables: every one, or a subset named once each.
    const size_t V = variables.size();
    std::vector<uint32_t> vars;
    if (req->variables_size() == 0) {
      for (uint32_t v = 0; v < V; ++v) vars.push_back(v);
    } else {
      std::vector<bool> seen(V, false);
      for (uint32_t v : req->variables()) {
        if (v >= V || seen[v])
          return grpc::Status(StatusCode::INVALID_ARGUMENT, "ExchangeScales: variable " + std::to_string(v) +
                                                          (v >= V ? " of " + std::to_string(V) : " named twice"));
        seen[v] = true;
        vars.push_back(v);
      }
    }
    if (req->scales_size() != static_cast<int>(vars.size()))
      return grpc::Status(StatusCode::INVALID_ARGUMENT, "ExchangeScales: " + std::to_string(req->scales_size()) + " scales for " +
                                                      std::to_string(vars.size()) + " variables");
    for (float x : req->scales())
      if (!(x >= 0 && x <= 3.4e38f))
        return grpc::Status(StatusCode::INVALID_ARGUMENT, "ExchangeScales: scale " + std::to_string(x) + " is not a finite non-negative number");
    heard(req->replica());
    const int64_t step = req->step();
    auto find = [&]() -> Scales* {
      for (auto& s : scales)
        if (s.step == step) return &s;
      return nullptr;
    };
    if (find() == nullptr) {
      Scales s;
      s.step = step;
      s.max.assign(V, 0.0f);
      s.reported.assign(total, std::vector<bool>(V, false));
      s.count.assign(V, 0);
      scales.push_back(std::move(s));
      while (scales.size() > static_cast<size_t>(opt.keep_steps)) scales.pop_front();
      if (find() == nullptr)
        return grpc::Status(StatusCode::FAILED_PRECONDITION, "ExchangeScales: step " + std::to_string(step) + " is too old");
    }
    Scales* mine = find();
    bool fresh = false;
    for (size_t i = 0; i < vars.size(); ++i) {
      const uint32_t v = vars[i];
      if (mine->reported[req->replica()][v]) continue;  // a retried report
      mine->reported[req->replica()][v] = true;
      ++mine->count[v];
      mine->max[v] = std::max(mine->max[v], req->scales(static_cast<int>(i)));
      fresh = true;
    }
    if (fresh) cv.notify_all();
    auto all_in = [&](const Scales& s) {
      for (uint32_t v : vars)
        if (s.count[v] < needed) return false;
      return true;
    };
    long_poll(lock, ctx, [&] { Scales* s = find(); return s == nullptr || all_in(*s); });
    if (ended()) return ended_status();
    Scales* s = find();
    if (s == nullptr) return grpc::Status(StatusCode::FAILED_PRECONDITION, "ExchangeScales: step " + std::to_string(step) + " is too old");
    reply->set_ready(all_in(*s));
    if (reply->ready()) {
      for (uint32_t v : vars) reply->add_max_scales(s->max[v]);
    } else {
      for (int r = 0; r < total; ++r)
        for (uint32_t v : vars)
          if (!s->reported[r][v]) {
            reply->add_missing(static_cast<uint32_t>(r));
            break;
          }
    }
    return grpc::Status::OK;
  }

  grpc::Status Push(ServerContext*, grpc::ServerReader<rpc::PushChunk>* reader, rpc::PushReply* reply) override {
    rpc::PushChunk chunk;
    if (!reader->Read(&chunk) || !chunk.has_header())
      return grpc::Status(StatusCode::INVALID_ARGUMENT, "Push: the first message must be the header");
    const rpc::PushHeader h = chunk.header();
    std::vector<uint64_t> expect;  // payload bytes per shard of this ps
    {
      std::lock_guard<std::mutex> lock(mu);
      if (ended()) return ended_status();
      if (phase != Phase::kRunning) return grpc::Status(StatusCode::FAILED_PRECONDITION, "Push before Init");
      if (grpc::Status s = check_replica(h.replica()); !s.ok()) return s;
      heard(h.replica());
      for (const Shard& s : shards) expect.push_back(s.codec->payload_bytes(s.view.count));
    }
    const std::string who = replica_name(h.replica()) + " step " + std::to_string(h.step());
    // The shards this push carries: every shard, or one bucket's (sync).
    std::vector<uint32_t> ids;
    std::vector<int> slot(expect.size(), -1);  // shard -> index into ids
    if (h.shards_size() == 0) {
      for (uint32_t s = 0; s < expect.size(); ++s) ids.push_back(s);
    } else {
      if (!sync) return grpc::Status(StatusCode::INVALID_ARGUMENT, "Push from " + who + ": an async push carries every shard, not a bucket");
      for (uint32_t s : h.shards()) {
        if (s >= expect.size())
          return grpc::Status(StatusCode::INVALID_ARGUMENT, "Push from " + who + ": bucket names shard " + std::to_string(s) +
                                                          " of this ps's " + std::to_string(expect.size()));
        if (slot[s] >= 0)
          return grpc::Status(StatusCode::INVALID_ARGUMENT, "Push from " + who + ": bucket names shard " + std::to_string(s) + " twice");
        slot[s] = static_cast<int>(ids.size());
        ids.push_back(s);
      }
    }
    for (size_t i = 0; i < ids.size(); ++i) slot[ids[i]] = static_cast<int>(i);
    if (h.step_ms_size() != 0 && h.step_ms_size() != static_cast<int>(kStepTimeFields))
      return grpc::Status(StatusCode::INVALID_ARGUMENT, "Push from " + who + ": " + std::to_string(h.step_ms_size()) +
                                                      " step times, expected 0 or " + std::to_string(kStepTimeFields));
    for (float t : h.step_ms())
      if (!(t >= 0 && t <= 1e7))
        return grpc::Status(StatusCode::INVALID_ARGUMENT, "Push from " + who + ": step time " + std::to_string(t) +
                                                        " ms is not in [0, 1e7]");
    std::vector<detail::StringReassembly> parts(ids.size());
    while (reader->Read(&chunk)) {
      if (!chunk.has_payload()) return grpc::Status(StatusCode::INVALID_ARGUMENT, "Push from " + who + ": a second header");
      rpc::PayloadChunk& p = *chunk.mutable_payload();
      if (p.shard() >= expect.size() || slot[p.shard()] < 0)
        return grpc::Status(StatusCode::INVALID_ARGUMENT, "Push from " + who + ": shard " + std::to_string(p.shard()) +
                                                        (p.shard() >= expect.size() ? " is unknown" : " is not in its bucket"));
      // The chunk's bytes are taken over, not copied (chunks.h).
      const std::string err = parts[slot[p.shard()]].take(p.offset(), p.total_bytes(), std::move(*p.mutable_data()), expect[p.shard()]);
      if (!err.empty()) return grpc::Status(StatusCode::INVALID_ARGUMENT, "Push from " + who + ", shard " + std::to_string(p.shard()) + ": " + err);
    }
    // The whole request is checked before anything of it is kept.
    uint64_t received = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      const uint32_t s = ids[i];
      if (!parts[i].complete() || parts[i].bytes().size() != expect[s])
        return grpc::Status(StatusCode::INVALID_ARGUMENT, "Push from " + who + ": shard " + std::to_string(s) + " has " +
                                                        std::to_string(parts[i].filled()) + " of the " +
                                                        std::to_string(expect[s]) + " payload bytes its codec writes");
      try {
        shards[s].codec->validate(detail::as_bytes(parts[i].bytes()), shards[s].view.count);
      } catch (const std::exception& e) {
        return grpc::Status(StatusCode::INVALID_ARGUMENT, "Push from " + who + ": shard " + std::to_string(s) + " (" +
                                                        shards[s].view.name + "): malformed payload: " + e.what());
      }
      received += parts[i].bytes().size();
    }
    return sync ? push_sync(h, ids, parts, received, reply) : push_async(h, parts, received, reply);
  }

  // A fresh step buffer and its (empty) aggregate (mu held).
  void start_step_locked(int64_t step) {
    const size_t S = shards.size();
    current = StepBuffer{};
    current.step = step;
    current.payloads.assign(total, std::vector<std::string>(S));
    current.got.assign(total, std::vector<bool>(S, false));
    current.got_count.assign(total, 0);
    current.have.assign(S, 0);
    current.pushed.assign(total, false);
    current.loss_known.assign(total, false);
    current.loss.assign(total, 0.0f);
    auto agg = std::make_shared<Aggregate>();
    agg->step = step;
    agg->shards = std::move(spare_sums);
    agg->shards.resize(S);
    agg->ready.assign(S, false);
    current.agg = std::move(agg);
    spare_sums.assign(S, {});
  }

  // Sums shards `ids` of `buf` over the replicas in `from` into agg (no lock:
  // the payloads and these agg shards are touched by this thread alone).
  std::string sum_shards(const std::vector<uint32_t>& ids, const StepBuffer& buf, const std::vector<bool>& from,
                         Aggregate& agg) {
    try {
      for (uint32_t s : ids) {
        std::vector<std::span<const uint8_t>> views;
        for (int r = 0; r < total; ++r)
          if (from[r]) views.push_back(detail::as_bytes(buf.payloads[r][s]));
        shards[s].codec->aggregate(views, shards[s].view.count, agg.shards[s]);
      }
    } catch (const std::exception& e) {
      return std::string("summing step ") + std::to_string(buf.step) + ": " + e.what();
    }
    return "";
  }

  // The step's replicas and shards are all in: its aggregate is complete,
  // and the next step begins (mu held).
  void finish_step_locked(const StepBuffer& buf) {
    Aggregate& agg = *buf.agg;
    agg.contributions = static_cast<uint32_t>(buf.count);
    double loss = 0;
    for (int r = 0; r < total; ++r)
      if (buf.pushed[r]) loss += buf.loss[r];
    agg.mean_loss = static_cast<float>(loss / buf.count);
    agg.complete = true;
    recent.push_back(buf.agg);
    while (recent.size() > static_cast<size_t>(opt.keep_steps)) {
      if (recent.front().use_count() == 1) spare_sums = std::move(recent.front()->shards);  // nobody streams it
      recent.pop_front();
    }
    global_step = buf.step + 1;
    if (buf.step == current.step) start_step_locked(global_step);
    cv.notify_all();
  }

  grpc::Status push_sync(const rpc::PushHeader& h, const std::vector<uint32_t>& ids,
                         std::vector<detail::StringReassembly>& parts, uint64_t received, rpc::PushReply* reply) {
    std::unique_lock<std::mutex> lock(mu);
    if (ended()) return ended_status();
    const uint32_t r = h.replica();
    heard(r);
    Replica& rep = replicas[r];
    reply->set_global_step(global_step);
    if (h.step() < current.step || (h.step() == current.step && current.closed)) {
      const bool dup = h.step() <= rep.last_pushed;
      reply->set_outcome(dup ? rpc::PushReply::DUPLICATE : rpc::PushReply::STALE);
      if (dup) {
        ++duplicates;
      } else if (rep.last_stale != h.step()) {  // a late replica's buckets count once per step
        rep.last_stale = h.step();
        ++stale;
        // Backups are stale every step by design: the first few and then every
        // 100th are logged; Status and the chief's result.json carry the count.
        if (stale <= 5 || stale % 100 == 0)
          log(replica_name(r) + ": push of step " + std::to_string(h.step()) + " is stale (step " +
              std::to_string(current.step) + " already summed); dropped (" + std::to_string(stale) + " so far)");
      }
      return grpc::Status::OK;
    }
    if (h.step() > current.step)
      return grpc::Status(StatusCode::FAILED_PRECONDITION, replica_name(r) + " pushed step " + std::to_string(h.step()) +
                                                         " but the ps is at step " + std::to_string(current.step));
    size_t repeated = 0;
    for (uint32_t s : ids) repeated += current.got[r][s];
    if (repeated == ids.size()) {  // a retried push or bucket
      ++duplicates;
      reply->set_outcome(rpc::PushReply::DUPLICATE);
      return grpc::Status::OK;
    }
    if (repeated > 0)
      return grpc::Status(StatusCode::INVALID_ARGUMENT, replica_name(r) + " step " + std::to_string(h.step()) +
                                                      ": a bucket repeats shards an earlier push of the step delivered");
    for (size_t i = 0; i < ids.size(); ++i) {
      current.payloads[r][ids[i]] = std::move(parts[i].bytes());
      current.got[r][ids[i]] = true;
      ++current.have[ids[i]];
    }
    current.got_count[r] += ids.size();
    if (h.step_ms_size() > 0) rep.step_ms.assign(h.step_ms().begin(), h.step_ms().end());
    if (!current.loss_known[r]) {
      current.loss_known[r] = true;
      current.loss[r] = h.loss();
    }
    bytes_in += received;
    reply->set_outcome(rpc::PushReply::APPLIED);
    if (current.got_count[r] == shards.size()) {
      current.pushed[r] = true;
      rep.last_pushed = h.step();
      ++current.count;
    }
    cv.notify_all();  // pullers list who has not pushed
    if (needed == total) {
      // Every replica is needed: a shard all of them delivered can be summed
      // now, by this thread, while other buckets are still arriving.
      std::vector<uint32_t> ready;
      for (uint32_t s : ids)
        if (current.have[s] == total) ready.push_back(s);
      if (!ready.empty()) {
        const std::vector<bool> everyone(total, true);
        const std::shared_ptr<Aggregate> agg = current.agg;
        lock.unlock();  // `current` stays: the step cannot finish before these shards are summed
        const std::string error = sum_shards(ready, current, everyone, *agg);
        lock.lock();
        if (!error.empty()) {
          fail_locked(error);
          return ended_status();
        }
        for (uint32_t s : ready) agg->ready[s] = true;
        agg->ready_count += ready.size();
        cv.notify_all();
      }
      if (!current.closed && current.count == total && current.agg->ready_count == shards.size()) {
        current.closed = true;
        finish_step_locked(current);
      }
      reply->set_global_step(global_step);
      return grpc::Status::OK;
    }
    if (current.count < needed) return grpc::Status::OK;

    // Backup replicas: the first `needed` replicas to deliver every shard
    // make the step; sum it outside the lock, in replica order. The buffer
    // stays (closed, payloads moved out) so that late pushes read as stale
    // and waiting pulls can still list who pushed.
    current.closed = true;
    StepBuffer buf;
    buf.step = current.step;
    buf.pushed = current.pushed;
    buf.loss = current.loss;
    buf.count = current.count;
    buf.payloads = std::move(current.payloads);
    buf.agg = current.agg;
    current.payloads.assign(total, std::vector<std::string>(shards.size()));
    lock.unlock();
    std::vector<uint32_t> all(shards.size());
    for (uint32_t s = 0; s < all.size(); ++s) all[s] = s;
    const std::string error = sum_shards(all, buf, buf.pushed, *buf.agg);
    lock.lock();
    if (!error.empty()) {
      fail_locked(error);
      return ended_status();
    }
    buf.agg->ready.assign(shards.size(), true);
    buf.agg->ready_count = shards.size();
    finish_step_locked(buf);
    reply->set_global_step(global_step);
    return grpc::Status::OK;
  }

  grpc::Status push_async(const rpc::PushHeader& h, std::vector<detail::StringReassembly>& parts, uint64_t received,
                          rpc::PushReply* reply) {
    std::lock_guard<std::mutex> lock(mu);
    if (ended()) return ended_status();
    heard(h.replica());
    Replica& rep = replicas[h.replica()];
    if (h.step() <= rep.last_pushed) {
      ++duplicates;
      reply->set_outcome(rpc::PushReply::DUPLICATE);
      reply->set_global_step(global_step);
      return grpc::Status::OK;
    }
    std::vector<float> grad;
    try {
      for (size_t s = 0; s < shards.size(); ++s) {
        grad.assign(shards[s].view.count, 0.0f);
        shards[s].codec->decode(detail::as_bytes(parts[s].bytes()), grad);
        handler->apply(s, global_step, shards[s].values, grad);
      }
    } catch (const std::exception& e) {
      fail_locked(std::string("applying ") + replica_name(h.replica()) + "'s push: " + e.what());
      return ended_status();
    }
    rep.last_pushed = h.step();
    bytes_in += received;
    ++global_step;
    reply->set_outcome(rpc::PushReply::APPLIED);
    reply->set_global_step(global_step);
    cv.notify_all();
    return grpc::Status::OK;
  }

  // After the chief finishes a sync run normally, the sums of completed
  // steps are still served (until run() closes the port): a replica that is
  // one pull behind the chief finishes its last step instead of failing.
  bool serves_after_finish(int64_t step) const { return sync && phase == Phase::kFinished && step < global_step; }

  // The aggregate of `step` (complete, or being filled), or null (mu held).
  std::shared_ptr<Aggregate> aggregate_of(int64_t step) const {
    if (step == current.step && !current.closed) return current.agg;
    for (const auto& a : recent)
      if (a->step == step) return a;
    if (step == current.step) return current.agg;  // closed, being summed
    return nullptr;
  }

  // A replica has the whole aggregate: when every replica has it, its
  // buffers serve a later step (if no other puller still streams it).
  void pulled_locked(const std::shared_ptr<Aggregate>& held) {
    auto at = std::find(recent.begin(), recent.end(), held);
    if (at != recent.end() && ++(*at)->pulls >= total) {
      if (held.use_count() == 2) spare_sums = std::move((*at)->shards);
      recent.erase(at);
    }
  }

  grpc::Status Pull(ServerContext* ctx, const rpc::PullRequest* req, grpc::ServerWriter<rpc::PullChunk>* writer) override {
    std::unique_lock<std::mutex> lock(mu);
    if (ended() && !serves_after_finish(req->step())) return ended_status();
    if (phase == Phase::kWaitingInit) return grpc::Status(StatusCode::FAILED_PRECONDITION, "Pull before Init");
    if (grpc::Status s = check_replica(req->replica()); !s.ok()) return s;
    heard(req->replica());
    rpc::PullChunk out;
    if (!sync) {  // the current values of every shard
      out.mutable_header()->set_ready(true);
      out.mutable_header()->set_step(global_step);
      std::vector<std::vector<uint8_t>> copies;
      for (const Shard& s : shards) {
        const auto* b = reinterpret_cast<const uint8_t*>(s.values.data());
        copies.emplace_back(b, b + 4 * s.values.size());
      }
      lock.unlock();
      if (!writer->Write(out)) return grpc::Status(StatusCode::CANCELLED, "Pull: client went away");
      for (size_t s = 0; s < copies.size(); ++s)
        if (!write_shard(writer, s, copies[s], true)) return grpc::Status(StatusCode::CANCELLED, "Pull: client went away");
      return grpc::Status::OK;
    }
    if (req->stream()) return stream_sums(ctx, req, writer, lock);
    const int64_t step = req->step();
    long_poll(lock, ctx, [&] { return step < global_step; });
    if (ended() && !serves_after_finish(step)) return ended_status();
    if (step >= global_step) {
      out.mutable_header()->set_ready(false);
      out.mutable_header()->set_step(step);
      for (int r = 0; r < total; ++r)
        if (!current.pushed[r]) out.mutable_header()->add_missing(static_cast<uint32_t>(r));
      lock.unlock();
      writer->Write(out);
      return grpc::Status::OK;
    }
    const std::shared_ptr<Aggregate> held = aggregate_of(step);  // kept alive while we stream, even if the ring drops it
    if (!held || !held->complete) return too_old(req->replica(), step);
    const Aggregate& agg = *held;
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
    if (!writer->Write(out)) return grpc::Status(StatusCode::CANCELLED, "Pull: client went away");
    for (size_t s = 0; s < agg.shards.size(); ++s)
      if (!write_shard(writer, s, agg.shards[s], false)) return grpc::Status(StatusCode::CANCELLED, "Pull: client went away");
    std::lock_guard<std::mutex> relock(mu);
    pulled_locked(held);
    return grpc::Status::OK;
  }

  // The mean of the replicas' last step-time reports (mu held).
  void report_step_times_locked(rpc::PullHeader* head) const {
    std::vector<double> sum(kStepTimeFields, 0.0);
    uint32_t n = 0;
    for (const Replica& rep : replicas) {
      if (rep.step_ms.size() != kStepTimeFields) continue;
      for (size_t i = 0; i < kStepTimeFields; ++i) sum[i] += rep.step_ms[i];
      ++n;
    }
    if (n == 0) return;
    for (double x : sum) head->add_replicas_step_ms(static_cast<float>(x / n));
    head->set_replicas_reporting(n);
  }

  grpc::Status too_old(uint32_t replica, int64_t step) const {
    return grpc::Status(StatusCode::FAILED_PRECONDITION,
                        replica_name(replica) + " asked for step " + std::to_string(step) +
                            ", which is no longer kept (the ps keeps the last " + std::to_string(opt.keep_steps) +
                            " steps, now at " + std::to_string(global_step) + "): it fell too far behind");
  }

  // A streamed pull: each shard's sum as soon as it is ready, then the
  // header once the step is complete. Near the call's deadline it ends with
  // a "not ready" header, and the replica asks again naming what it has.
  grpc::Status stream_sums(ServerContext* ctx, const rpc::PullRequest* req, grpc::ServerWriter<rpc::PullChunk>* writer,
                           std::unique_lock<std::mutex>& lock) {
    const int64_t step = req->step();
    if (step > current.step)
      return grpc::Status(StatusCode::FAILED_PRECONDITION, replica_name(req->replica()) + " pulls step " + std::to_string(step) +
                                                         " but the ps is at step " + std::to_string(current.step));
    const std::shared_ptr<Aggregate> held = aggregate_of(step);
    if (!held) return too_old(req->replica(), step);
    Aggregate& agg = *held;
    std::vector<bool> sent(shards.size(), false);
    size_t sent_count = 0;
    for (uint32_t s : req->have()) {
      if (s >= shards.size())
        return grpc::Status(StatusCode::INVALID_ARGUMENT, "Pull: have names shard " + std::to_string(s) + " of " +
                                                        std::to_string(shards.size()));
      if (!sent[s]) ++sent_count;
      sent[s] = true;
    }
    auto until = Clock::now() + std::chrono::seconds(30);
    const auto deadline = ctx->deadline();
    const auto now_sys = std::chrono::system_clock::now();
    if (deadline > now_sys)
      until = std::min(until, Clock::now() + std::chrono::duration_cast<Clock::duration>(deadline - now_sys) -
                                  std::chrono::milliseconds(200));
    for (;;) {
      std::vector<uint32_t> fresh;
      cv.wait_until(lock, until, [&] {
        if (ended() || ctx->IsCancelled() || (agg.complete && sent_count == shards.size())) return true;
        for (size_t s = 0; s < shards.size(); ++s)
          if (agg.ready[s] && !sent[s]) return true;
        return false;
      });
      if (ended() && !(agg.complete && serves_after_finish(step))) return ended_status();
      if (ctx->IsCancelled()) return grpc::Status(StatusCode::CANCELLED, "Pull: client went away");
      for (uint32_t s = 0; s < shards.size(); ++s)
        if (agg.ready[s] && !sent[s]) fresh.push_back(s);
      if (!fresh.empty()) {
        for (uint32_t s : fresh) {
          sent[s] = true;
          bytes_out += agg.shards[s].size();
        }
        sent_count += fresh.size();
        lock.unlock();  // ready shards do not change
        for (uint32_t s : fresh)
          if (!write_shard(writer, s, agg.shards[s], false)) return grpc::Status(StatusCode::CANCELLED, "Pull: client went away");
        lock.lock();
        continue;
      }
      rpc::PullChunk out;
      rpc::PullHeader* head = out.mutable_header();
      head->set_step(step);
      if (agg.complete && sent_count == shards.size()) {
        head->set_ready(true);
        head->set_contributions(agg.contributions);
        head->set_mean_loss(agg.mean_loss);
        report_step_times_locked(head);
        pulled_locked(held);
      } else if (Clock::now() >= until) {
        head->set_ready(false);
        if (step == current.step)
          for (int r = 0; r < total; ++r)
            if (!current.pushed[r]) head->add_missing(static_cast<uint32_t>(r));
      } else {
        continue;  // woken for nothing new
      }
      lock.unlock();
      writer->Write(out);
      return grpc::Status::OK;
    }
  }

  // Streams one shard's buffer: an aggregated payload, or (values) float32s.
  static bool write_shard(grpc::ServerWriter<rpc::PullChunk>* writer, size_t s, const std::vector<uint8_t>& buf,
                          bool values) {
    return detail::for_each_chunk(buf, [&](uint64_t off, std::span<const uint8_t> piece) {
      rpc::PullChunk c;
      if (values) {
        rpc::TensorChunk* t = c.mutable_values();
        t->set_shard(static_cast<uint32_t>(s));
        t->set_offset(off);
        t->set_total_bytes(buf.size());
        t->set_data(piece.data(), piece.size());
      } else {
        rpc::PayloadChunk* p = c.mutable_payload();
        p->set_shard(static_cast<uint32_t>(s));
        p->set_offset(off);
        p->set_total_bytes(buf.size());
        p->set_data(piece.data(), piece.size());
      }
      return writer->Write(c);
    });
  }

  grpc::Status Heartbeat(ServerContext*, const rpc::HeartbeatRequest* req, rpc::HeartbeatReply* reply) override {
    std::lock_guard<std::mutex> lock(mu);
    reply->set_global_step(global_step);
    reply->set_finished(phase == Phase::kFinished);
    if (phase == Phase::kFailed) reply->set_failure("ps " + std::to_string(opt.task_index) + ": " + failure);
    if (phase != Phase::kRunning) return grpc::Status::OK;
    if (grpc::Status s = check_replica(req->replica()); !s.ok()) return s;
    heard(req->replica());
    if (req->done() && !replicas[req->replica()].done) {
      replicas[req->replica()].done = true;
      log(replica_name(req->replica()) + " finished");
    }
    return grpc::Status::OK;
  }

  grpc::Status Status(ServerContext*, const rpc::StatusRequest*, rpc::StatusReply* reply) override {
    std::lock_guard<std::mutex> lock(mu);
    reply->set_phase(phase_name(phase));
    reply->set_global_step(global_step);
    reply->set_sync(sync);
    reply->set_total_replicas(total);
    reply->set_replicas_to_aggregate(needed);
    reply->set_stale_pushes(stale);
    reply->set_duplicate_pushes(duplicates);
    reply->set_bytes_received(bytes_in);
    reply->set_bytes_sent(bytes_out);
    reply->set_failure(failure);
    reply->set_shards(static_cast<uint32_t>(shards.size()));
    for (size_t r = 0; r < replicas.size(); ++r) {
      rpc::ReplicaStatus* s = reply->add_replicas();
      s->set_replica(static_cast<uint32_t>(r));
      s->set_label(replicas[r].label);
      s->set_registered(replicas[r].registered);
      s->set_done(replicas[r].done);
      s->set_seconds_since_heard(replicas[r].registered ? seconds_since(replicas[r].last_heard) : -1);
      s->set_last_step_pushed(replicas[r].last_pushed);
    }
    return grpc::Status::OK;
  }

  grpc::Status Checkpoint(ServerContext*, const rpc::CheckpointRequest* req,
                          grpc::ServerWriter<rpc::TensorChunk>* writer) override {
    std::vector<std::pair<std::pair<uint32_t, std::string>, std::vector<uint8_t>>> tensors;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (ended()) return ended_status();
      if (phase != Phase::kRunning) return grpc::Status(StatusCode::FAILED_PRECONDITION, "Checkpoint before Init");
      if (req->replica() != 0) return grpc::Status(StatusCode::PERMISSION_DENIED, "Checkpoint: only the chief");
      if (sync) return grpc::Status(StatusCode::FAILED_PRECONDITION, "Checkpoint: a sync ps holds no values (the chief checkpoints its own)");
      heard(0);
      for (size_t s = 0; s < shards.size(); ++s) {
        auto copy = [](std::span<const float> f) {
          const auto* b = reinterpret_cast<const uint8_t*>(f.data());
          return std::vector<uint8_t>(b, b + f.size_bytes());
        };
        tensors.push_back({{static_cast<uint32_t>(s), ""}, copy(shards[s].values)});
        for (auto& [name, span] : handler->slots(s)) tensors.push_back({{static_cast<uint32_t>(s), name}, copy(span)});
      }
    }
    for (const auto& [key, bytes] : tensors) {
      const bool ok = detail::for_each_chunk(bytes, [&](uint64_t off, std::span<const uint8_t> piece) {
        rpc::TensorChunk t;
        t.set_shard(key.first);
        t.set_slot(key.second);
        t.set_offset(off);
        t.set_total_bytes(bytes.size());
        t.set_data(piece.data(), piece.size());
        return writer->Write(t);
      });
      if (!ok) return grpc::Status(StatusCode::CANCELLED, "Checkpoint: client went away");
    }
    return grpc::Status::OK;
  }

  grpc::Status Shutdown(ServerContext*, const rpc::ShutdownRequest* req, rpc::ShutdownReply*) override {
    std::lock_guard<std::mutex> lock(mu);
    if (req->replica() != 0) return grpc::Status(StatusCode::PERMISSION_DENIED, "Shutdown: only the chief");
    if (req->ok()) {
      if (!ended()) {
        phase = Phase::kFinished;
        log("the chief finished the run at global step " + std::to_string(global_step));
      }
    } else {
      fail_locked(replica_name(0) + " stopped the run: " + req->reason());
    }
    cv.notify_all();
    return grpc::Status::OK;
  }

  // --- timeouts ---
  void watch() {
    std::unique_lock<std::mutex> lock(mu);
    while (!stopping) {
      cv.wait_for(lock, std::chrono::milliseconds(250));
      if (ended()) continue;
      const double age = seconds_since(started);
      if (phase == Phase::kWaitingInit) {
        if (age > opt.startup_timeout_s)
          fail_locked(replica_name(0) + " (the chief) did not initialize this ps within " +
                      std::to_string(static_cast<int>(opt.startup_timeout_s)) + " s");
        continue;
      }
      const auto missing = unregistered();
      if (!missing.empty()) {
        if (age > opt.startup_timeout_s) {
          std::string names;
          for (uint32_t m : missing) names += (names.empty() ? "" : ", ") + replica_name(m);
          fail_locked("never joined within " + std::to_string(static_cast<int>(opt.startup_timeout_s)) + " s: " + names);
        }
        continue;
      }
      int alive = 0;
      for (size_t r = 0; r < replicas.size(); ++r) {
        Replica& rep = replicas[r];
        if (rep.done) continue;
        if (!rep.gone && seconds_since(rep.last_heard) > opt.peer_timeout_s) {
          rep.gone = true;
          const std::string what = replica_name(static_cast<uint32_t>(r)) + " (" + rep.label + ") has been silent for " +
                                   std::to_string(static_cast<int>(seconds_since(rep.last_heard))) + " s (last pushed step " +
                                   std::to_string(rep.last_pushed) + ")";
          rep.gone_reason = what;
          if (r == 0) {
            fail_locked(what + "; it is the chief, so the run cannot finish");
            break;
          }
          log(what + ": counted as gone");
        }
        if (!rep.gone) ++alive;
      }
      if (ended() || !sync) continue;
      int finished = 0;
      for (const Replica& rep : replicas) finished += rep.done;
      if (alive + finished < needed && alive > 0) {
        std::string gone;
        for (const Replica& rep : replicas)
          if (rep.gone) gone += (gone.empty() ? "" : "; ") + rep.gone_reason;
        fail_locked(gone + "; only " + std::to_string(alive) + " replicas left and a step needs " + std::to_string(needed));
      }
    }
  }
};

ParameterServer::ParameterServer(const std::string& address, ServerOptions options, UpdateHandler* handler)
    : impl_(std::make_unique<Impl>(address, std::move(options), handler)) {
  grpc::ServerBuilder b;
  b.AddListeningPort(address, grpc::InsecureServerCredentials(), &impl_->port);
  b.SetMaxReceiveMessageSize(detail::kMaxMessageBytes);
  b.SetMaxSendMessageSize(detail::kMaxMessageBytes);
  b.RegisterService(impl_.get());
  impl_->server = b.BuildAndStart();
  if (!impl_->server || impl_->port == 0)
    throw PeerError("ps " + std::to_string(impl_->opt.task_index) + ": cannot listen on " + address +
                    " (address in use or not local?)");
  impl_->monitor = std::thread([this] { impl_->watch(); });
  impl_->log("listening on " + address.substr(0, address.rfind(':')) + ":" + std::to_string(impl_->port));
}

ParameterServer::~ParameterServer() {
  impl_->stopping = true;
  impl_->cv.notify_all();
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
  impl_->cv.notify_all();
}

void ParameterServer::run() {
  std::string failure;
  {
    std::unique_lock<std::mutex> lock(impl_->mu);
    impl_->cv.wait(lock, [&] { return impl_->ended(); });
    failure = impl_->phase == Phase::kFailed ? impl_->failure : "";
  }
  // Let pollers and heartbeats hear how the run ended before the port closes.
  std::this_thread::sleep_for(std::chrono::duration<double>(std::min(3.0, std::max(0.5, 1.5 * impl_->opt.poll_s))));
  impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  if (!failure.empty()) throw PeerError("ps " + std::to_string(impl_->opt.task_index) + ": " + failure);
}

}  // namespace terngrad::comm
