// Private to the trainer: the training loop of a cluster replica, given its
// step (replica_step.h, on its device) and its bookkeeping (replica_run.h).
// Two loops, chosen once by --sync_replicas: the synchronous one
// (sync_loop.cpp: every step, the ps sums the replicas' gradients and every
// replica applies the same average) and the asynchronous one
// (async_loop.cpp: the ps holds the weights and applies each gradient as it
// arrives).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

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
};

std::unique_ptr<ReplicaLoop> make_sync_loop(const Replica& r);
std::unique_ptr<ReplicaLoop> make_async_loop(const Replica& r);

}  // namespace terngrad::train::detail
