// Joining the run: the chief's Init of each ps (its layout, an async
// run's tensors, a resumed run's server states), then every replica's
// Register (worker_service.h).
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cstdio>
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

rpc::InitChunk WorkerClient::Impl::init_header(int p, int64_t global_step, uint64_t rewind_id) const {
  rpc::InitChunk head;
  rpc::InitHeader* h = head.mutable_header();
  h->set_replica(0);
  for (const auto& v : layout.variables) {
    rpc::Variable* pv = h->add_variables();
    pv->set_name(v.name);
    pv->set_size(v.size);
    pv->set_codec(v.codec);
  }
  for (size_t s : layout.shards_on[p]) {
    rpc::Shard* ps = h->add_shards();
    ps->set_variable(layout.shards[s].variable);
    ps->set_begin(layout.shards[s].begin);
    ps->set_count(layout.shards[s].count);
  }
  h->set_fingerprint(fingerprint);
  h->set_global_step(global_step);
  h->set_sync(sync);
  h->set_total_replicas(static_cast<uint32_t>(total));
  h->set_replicas_to_aggregate(static_cast<uint32_t>(needed));
  if (!sync) h->set_last_step(opt.last_step);
  if (sync) h->set_checkpoint_interval_steps(opt.checkpoint_interval_steps);
  h->set_rewind_id(rewind_id);
  h->set_new_plan(rewind_id != 0 && rewind_id == opt.new_plan_rewind_id);
  return head;
}

bool WorkerClient::Impl::write_init_tensor(grpc::ClientWriter<rpc::InitChunk>& w, size_t local, const std::string& slot,
                                           std::span<const uint8_t> bytes) {
  return detail::for_each_chunk(bytes, [&](uint64_t off, std::span<const uint8_t> part) {
    rpc::InitChunk c;
    rpc::TensorChunk* t = c.mutable_tensor();
    t->set_shard(static_cast<uint32_t>(local));
    t->set_slot(slot);
    t->set_offset(off);
    t->set_total_bytes(bytes.size());
    t->set_data(part.data(), part.size());
    message_sent += c.ByteSizeLong();
    return w.Write(c);
  });
}

bool WorkerClient::Impl::write_async_tensors(grpc::ClientWriter<rpc::InitChunk>& w, int p, const InitTensors& init) {
  auto send = [&](size_t local, const std::string& slot, std::span<const float> whole) {
    const ShardSpec& sh = layout.shards[layout.shards_on[p][local]];
    if (whole.size() != layout.variables[sh.variable].size)
      throw std::invalid_argument("join: tensor " + layout.variables[sh.variable].name +
                                  (slot.empty() ? "" : "/" + slot) + " has " + std::to_string(whole.size()) +
                                  " elements, the variable " + std::to_string(layout.variables[sh.variable].size));
    const auto piece = whole.subspan(sh.begin, sh.count);
    return write_init_tensor(w, local, slot, {reinterpret_cast<const uint8_t*>(piece.data()), piece.size_bytes()});
  };
  bool ok = true;
  for (size_t local = 0; ok && local < layout.shards_on[p].size(); ++local) {
    const uint32_t v = layout.shards[layout.shards_on[p][local]].variable;
    ok = send(local, "", init.values.at(v));
    for (const auto& [slot, tensors] : init.slots)
      if (ok) ok = send(local, slot, tensors.at(v));
  }
  return ok;
}

bool WorkerClient::Impl::write_server_states(grpc::ClientWriter<rpc::InitChunk>& w, int p, const InitTensors& init) {
  if (init.server_states.size() != layout.shards.size())
    throw std::invalid_argument("join: " + std::to_string(init.server_states.size()) + " server states for " +
                                std::to_string(layout.shards.size()) + " shards");
  bool ok = true;
  for (size_t local = 0; ok && local < layout.shards_on[p].size(); ++local) {
    const std::vector<uint8_t>& state = init.server_states[layout.shards_on[p][local]];
    if (!state.empty()) ok = write_init_tensor(w, local, detail::kServerStateSlot, state);
  }
  return ok;
}

void WorkerClient::Impl::init_ps(int p, int64_t global_step, const InitTensors* init, uint64_t rewind_id) {
  call(p, "Init", [&] {
    grpc::ClientContext ctx;
    const auto armed = arm(ctx);
    rpc::InitReply reply;
    auto w = stubs[p]->Init(&ctx, &reply);
    const rpc::InitChunk head = init_header(p, global_step, rewind_id);
    message_sent += head.ByteSizeLong();
    bool ok = w->Write(head);
    if (ok && !sync) ok = write_async_tensors(*w, p, *init);
    if (ok && sync && init != nullptr && !init->server_states.empty()) ok = write_server_states(*w, p, *init);
    w->WritesDone();
    return w->Finish();
  });
}

Clock::time_point WorkerClient::Impl::register_deadline() const {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(opt.peer_timeout_s + 5));
}

rpc::RegisterReply WorkerClient::Impl::register_call(int p, Clock::time_point wait_until) {
  rpc::RegisterRequest req;
  req.set_replica(static_cast<uint32_t>(replica));
  req.set_fingerprint(fingerprint);
  req.set_label(opt.label);
  rpc::RegisterReply reply;
  call(p, "Register", [&] {
    grpc::ClientContext ctx;
    const auto armed = arm(ctx);
    message_sent += req.ByteSizeLong();
    reply.Clear();
    const grpc::Status s = stubs[p]->Register(&ctx, req, &reply);
    if (s.error_code() == StatusCode::ALREADY_EXISTS && Clock::now() < wait_until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      reply.Clear();  // not ready: ask again
      return grpc::Status::OK;
    }
    return s;
  });
  message_received += reply.ByteSizeLong();
  return reply;
}

int64_t WorkerClient::Impl::register_with(int p) { return register_until_ready(p).global_step(); }

rpc::RegisterReply WorkerClient::Impl::register_until_ready(int p) {
  const Clock::time_point wait_until = register_deadline();
  for (;;) {
    rpc::RegisterReply reply = register_call(p, wait_until);
    if (reply.ready()) return reply;
  }
}

bool WorkerClient::Impl::register_once(int p) { return !register_call(p, register_deadline()).waiting_init(); }

bool WorkerClient::Impl::rejoins_restarted_ps() {
  std::lock_guard<std::mutex> lock(mu);
  return !sync && opt.ps_rejoin_window_s > 0 && joined;
}

void WorkerClient::Impl::rejoin_restarted_ps(int p, const std::string& refusal) {
  std::lock_guard<std::mutex> one(rejoin_mu);
  {
    std::lock_guard<std::mutex> lock(mu);
    ++restarts_met[p];
  }
  const auto until =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(opt.ps_rejoin_window_s));
  std::fprintf(stderr, "replica %d (%s): %s restarted (%s); %s\n", replica, opt.label.c_str(), ps_name(p).c_str(),
               refusal.c_str(),
               replica == 0 ? "initializing it again with this chief's values and slots"
                            : "registering with it again once the chief has initialized it");
  if (replica == 0) {
    if (!refill) {
      const std::string msg = ps_name(p) + " restarted and this chief has no values to refill it with";
      set_failure(msg);
      throw PeerError(msg);
    }
    // The streamed pull's writes wait (sm) while refill() reads the values they land in.
    std::lock_guard<std::mutex> values(sm);
    const InitTensors init = refill();
    int64_t step = 0;
    for (int64_t s : async_steps) step = std::max(step, s);
    init_ps(p, step, &init);
  }
  // A repeated rejoin (another call met the same restart) registers again: the same session, no change.
  while (!register_once(p)) {
    if (Clock::now() > until) {
      const std::string msg = ps_name(p) + " restarted and the chief did not initialize it again within " +
                              std::to_string(static_cast<int>(opt.ps_rejoin_window_s)) + " s";
      set_failure(msg);
      throw PeerError(msg);
    }
  }
}

void WorkerClient::set_ps_refill(std::function<InitTensors()> refill) { impl_->refill = std::move(refill); }

int64_t WorkerClient::join(int64_t global_step, const InitTensors* init) {
  Impl& m = *impl_;
  if (m.replica == 0) {
    if (!m.sync && init == nullptr)
      throw std::invalid_argument("join: the chief of an async run must pass the initial tensors");
    detail::for_each_ps(m.layout.num_ps, [&](int p) { m.init_ps(p, global_step, init, m.opt.new_plan_rewind_id); });
  }
  int64_t step = global_step;
  std::vector<uint64_t> epochs(m.layout.num_ps, 0);
  detail::for_each_ps(m.layout.num_ps, [&](int p) {
    const rpc::RegisterReply at = m.register_until_ready(p);
    epochs[p] = at.run_epoch();
    if (p == 0) step = at.global_step();
  });
  {
    std::lock_guard<std::mutex> lock(m.mu);
    m.run_epoch = *std::max_element(epochs.begin(), epochs.end());
    m.step_for_beat = step;
    m.joined = true;
  }
  return step;
}

uint64_t WorkerClient::run_epoch() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->run_epoch;
}

}  // namespace terngrad::comm
