// A parameter server task: holds some shards of every variable, aggregates
// the workers' encoded gradients, and serves them back (service definition:
// comm/proto/parameter_server.proto).
//
//   sync:  a step's sum is formed from the first replicas_to_aggregate pushes
//          of that step (summed in replica order, so the result does not
//          depend on arrival order); later pushes of the step are dropped
//          and counted as stale; the global step then advances. Workers pull
//          the sum, in the codec's compact form, and apply it themselves
//          (parameter localization): the ps needs no model and no optimizer.
//   async: each push is decoded and handed to the UpdateHandler at once; the
//          ps holds the values and workers pull them.
//
// Who may call: with a cluster secret (credentials.h) every call must carry
// a role's token; a replica acts only as itself, only the chief (replica 0)
// may Init, Checkpoint or Shutdown, and Status needs any role. Callers that
// fail this learn nothing about the run, and each refusal is logged with the
// caller's address (rate-limited). Without a secret, the ps trusts the
// replica numbers callers send: fit only for loopback and networks you
// control (a ps on another address says so loudly when it starts). Either
// way, a replica is bound to the session id its process registered with
// (the tg-session metadata): calls of another process in its name, or of a
// replaced one, are refused.
//
// Liveness: replicas heartbeat; one silent for peer_timeout is reported by
// name, and the run fails when training cannot go on without it (the chief,
// or in sync mode fewer than replicas_to_aggregate replicas left). Every
// waiting request then returns the reason, and run() throws it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "terngrad/comm/credentials.h"
#include "terngrad/comm/tls.h"

namespace grpc {
class Channel;
}

namespace terngrad::comm {

class ParameterServer;
namespace detail {
std::shared_ptr<grpc::Channel> in_process_channel(ParameterServer& ps);  // comm/service/ps_in_process.h
}

struct ShardView {
  uint32_t variable = 0;
  std::string name;  // the variable's name
  uint64_t begin = 0, count = 0;
  std::string codec;
};

// The update rule of async training, plugged in by the program that starts
// the ps (ps-lite's request handler): the ps itself knows no model and no
// optimizer. Called with the server's lock held, one shard at a time.
class UpdateHandler {
 public:
  virtual ~UpdateHandler() = default;
  // Once per shard, when the chief initializes the ps.
  virtual void init_shard(size_t shard, const ShardView& view) = 0;
  // values = update(values, grad) at the global step `step`.
  virtual void apply(size_t shard, int64_t step, std::span<float> values, std::span<const float> grad) = 0;
  // The shard's named state tensors besides its values (optimizer slots such
  // as "Momentum"), each shard-sized: written by Init, read by Checkpoint.
  virtual std::vector<std::pair<std::string, std::span<float>>> slots(size_t shard) = 0;
};

struct ServerOptions {
  int task_index = 0;
  // Names of the replicas for messages, e.g. "worker 1 at 10.0.0.2:2222".
  std::vector<std::string> replica_names;
  double peer_timeout_s = 60;      // a replica silent this long is gone
  double startup_timeout_s = 120;  // the chief's Init and every Register within this
  double poll_s = 2;               // a long poll answers "not ready" after this
  int keep_steps = 8;              // sync: aggregated steps kept for late pullers
  // Sync: keep those steps even once every replica pulled them, so that a
  // restarted replica catches up through them (--rejoin_window_steps).
  bool keep_pulled_steps = false;
  // Sync, every replica aggregated: a push's reply waits while its replica
  // has more than this many bytes of the step in beyond a replica still
  // sending (or twice the largest push, if more), so that replicas sharing a
  // link deliver each shard together (comm/service/push_skew.h). 0: never.
  // Async: a replica's push turn (a Pull with push_turn) begins once the
  // push before it has at most this many bytes to come (0: once it is read
  // whole; comm/service/push_turns.h).
  uint64_t push_lead_bytes = 0;
  bool verbose = true;             // one line per event on stderr
  // The run's cluster secret: every call must then prove a role (above).
  std::optional<ClusterSecret> secret;
  TlsOptions tls;  // serves TLS when tls.server_enabled()
};

class ParameterServer {
 public:
  // Listens on address ("host:port"; port 0 picks a free one; "" listens
  // nowhere and serves only in-process channels: tests and fuzzing, see
  // comm/service/ps_in_process.h). handler is needed for async runs and may
  // be null for sync ones.
  ParameterServer(const std::string& address, ServerOptions options, UpdateHandler* handler);
  ~ParameterServer();
  ParameterServer(const ParameterServer&) = delete;
  ParameterServer& operator=(const ParameterServer&) = delete;

  int port() const;
  // Serves until the chief shuts it down (returns) or the run fails (throws
  // PeerError with the reason, after giving waiting peers time to hear it).
  void run();
  // Ends run() from this process (tests, signals): failure if !ok.
  void stop(bool ok, const std::string& reason);

  struct Impl;

 private:
  friend std::shared_ptr<grpc::Channel> detail::in_process_channel(ParameterServer& ps);
  std::unique_ptr<Impl> impl_;
};

}  // namespace terngrad::comm
