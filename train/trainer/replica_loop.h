// Private to the trainer: the training loop of a cluster replica, given its
// step (replica_step.h, on its device) and its bookkeeping (replica_run.h).
// Two loops, chosen once by --sync_replicas: the synchronous one
// (sync_loop.cpp: every step, the ps sums the replicas' gradients and every
// replica applies the same average) and the asynchronous one
// (async_loop.cpp: the ps holds the weights and applies each gradient as it
// arrives).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "plan_recheck.h"
#include "replica_run.h"
#include "replica_step.h"
#include "session.h"
#include "terngrad/comm/placement.h"
#include "terngrad/comm/worker_client.h"
#include "wire.h"

namespace terngrad::train::detail {

// What a loop works with; outlives it.
struct Replica {
  TrainingSession& s;
  ReplicaStep& step;
  comm::WorkerClient& client;
  const comm::Layout& layout;
  Wire& wire;
  const std::string& name;  // "worker 0 at host:port", for messages
  bool chief;
  // --codec=auto choosing again (plan_recheck.h), sync runs: the chief's
  // re-check at its checkpoints (nullptr: none); and for another replica,
  // after its calls were rewound: waits until every ps took the chief's
  // rewind and returns its step when it brought a new plan (empty: never).
  PlanRecheck* recheck = nullptr;
  std::function<std::optional<int64_t>()> rewound_to_new_plan = {};
};

class ReplicaLoop {
 public:
  virtual ~ReplicaLoop() = default;
  // Joins the run, the session holding the state restored at step
  // `restored`; returns the global step training goes on from.
  virtual int64_t join(int64_t restored) = 0;
  // Trains from global step `first` to the last; returns the last, with the
  // session holding the final state on the chief.
  virtual int64_t train(int64_t first, ReplicaRun& run) = 0;
  // Set when train() returned before the last step because the run switches
  // to a new --codec=auto plan at this global step (plan_recheck.h): the
  // caller builds the replica again with it (distributed.cpp).
  virtual std::optional<int64_t> new_plan_at() const { return std::nullopt; }
};

std::unique_ptr<ReplicaLoop> make_sync_loop(const Replica& r);
std::unique_ptr<ReplicaLoop> make_async_loop(const Replica& r);

}  // namespace terngrad::train::detail
