// Sync runs: a ps that restarted, and the rewind that lets the run go on
// (worker_service.h). A sync ps holds no weights, only the step's pushes and
// sums; when one restarts those are gone, and replicas may stand on either
// side of the step it was summing. So the chief takes every ps back to its
// latest checkpoint's step (an Init with a rewind id: ps_join.cpp,
// rewind_locked), and every replica restores that checkpoint and computes
// the steps since again. Each step's batch and randomness are functions of
// the step, so the run ends with the weights it would have had unfaulted.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "worker_service.h"

namespace terngrad::comm {

namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

void WorkerClient::Impl::need_rewind_locked() {
  if (rewind != Rewind::kNone) return;
  rewind = Rewind::kNeeded;
  // Calls that wait on the old steps (a pull for a sum that a replica in
  // rewind will never push) end now, not at their deadline.
  for (grpc::ClientContext* c : live_calls) c->TryCancel();
}

void WorkerClient::Impl::abandon_pipelined_step() {
  {
    std::unique_lock<std::mutex> lk(pm);
    fail_step_locked(std::make_exception_ptr(PsRestarted("the step was abandoned for a rewind")));
    for (auto& q : queues) {
      pushes_pending -= q.size();
      q.clear();
    }
    pcv.wait(lk, [&] { return pushes_pending == 0; });  // those in flight fail fast: check_state()
  }
  join_pullers();
}

int64_t WorkerClient::Impl::register_after_rewind(uint64_t after, const std::string& who) {
  const auto until =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(opt.ps_rejoin_window_s));
  const int P = layout.num_ps;
  for (;;) {
    std::vector<rpc::RegisterReply> replies(P);
    detail::for_each_ps(P, [&](int p) { replies[p] = register_call(p, register_deadline()); });
    const bool rewound = std::all_of(replies.begin(), replies.end(), [&](const rpc::RegisterReply& r) {
      return r.ready() && r.run_epoch() > after && r.run_epoch() == replies[0].run_epoch() &&
             r.global_step() == replies[0].global_step();
    });
    if (rewound) {
      std::lock_guard<std::mutex> lock(mu);
      run_epoch = replies[0].run_epoch();
      rewind = Rewind::kNone;
      ++rejoins;
      step_for_beat = replies[0].global_step();
      return replies[0].global_step();
    }
    if (Clock::now() > until) {
      std::string state;
      for (int p = 0; p < P; ++p)
        state += (p ? "; " : "") + ps_name(p) + ": " +
                 (replies[p].waiting_init() ? "waiting for Init"
                                            : "rewind " + std::to_string(replies[p].run_epoch()) + " at step " +
                                                  std::to_string(replies[p].global_step()) +
                                                  (replies[p].ready() ? "" : ", replicas missing"));
      const std::string msg = who + ": a ps restarted and the run was not rewound within " +
                              std::to_string(static_cast<int>(opt.ps_rejoin_window_s)) +
                              " s (--ps_rejoin_window_secs): " + state;
      set_failure(msg);
      throw PeerError(msg);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

uint64_t WorkerClient::Impl::begin_rejoin() {
  abandon_pipelined_step();
  std::lock_guard<std::mutex> lock(mu);
  rewind = Rewind::kRejoining;
  return run_epoch;
}

int64_t WorkerClient::rewind_run(int64_t step, const InitTensors* init) {
  Impl& m = *impl_;
  if (m.replica != 0 || !m.sync) throw std::logic_error("rewind_run: the chief of a sync run only");
  const uint64_t before = m.begin_rejoin();
  detail::for_each_ps(m.layout.num_ps, [&](int p) { m.init_ps(p, step, init, before + 1); });
  return m.register_after_rewind(before, "the chief");
}

int64_t WorkerClient::rejoin_rewound_run() {
  Impl& m = *impl_;
  if (!m.sync) throw std::logic_error("rejoin_rewound_run: sync runs only");
  return m.register_after_rewind(m.begin_rejoin(), "replica " + std::to_string(m.replica));
}

}  // namespace terngrad::comm
