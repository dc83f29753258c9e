// A training replica's side of the parameter-server service: ps-lite's
// handful of calls (join, push, pull) plus scale sharing, checkpoint and
// finish. Every call fans out to the ps tasks in parallel, routes each shard
// of the layout to the ps that holds it, retries a ps that is briefly
// unreachable (a push carries (replica, step), so a retry is never applied
// twice), and throws PeerError naming the ps and the problem when one stays
// unreachable for peer_timeout or reports that the run failed, or RunEnded
// when the chief finished the run. Heartbeats (a thread per ps) keep the
// replica alive in the ps's eyes while it computes; a ps that answers none
// for peer_timeout (killed, frozen, cut off) ends the run at once, every call
// in flight cancelled, while a ps that still answers them is only slow and
// its calls are retried past their deadline.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "terngrad/comm/credentials.h"
#include "terngrad/comm/placement.h"
#include "terngrad/comm/step_times.h"
#include "terngrad/comm/tls.h"

namespace terngrad::comm {

struct ClientOptions {
  double rpc_timeout_s = 30;    // deadline of one request (long polls included)
  double peer_timeout_s = 60;   // a ps that answered no heartbeat this long is reported gone
  double startup_timeout_s = 0; // ... and one never heard from, this long (0: peer_timeout_s)
  double heartbeat_s = 1;       // liveness beat while computing
  std::string label;            // "host:pid", shown by the ps
  // This replica's credential (credentials.h), sent with every call; none
  // for a ps without a secret.
  std::optional<Credential> credential;
  TlsOptions tls;  // connect with TLS when tls.client_enabled()
  // Async, the chief's Init: the run's last global step. The ps applies no
  // push past it (they are answered as dropped), so concurrent replicas
  // cannot carry the run beyond it. 0: no limit.
  int64_t last_step = 0;
  // Sync, the chief's Init: it checkpoints after every step s with
  // (s + 1) % checkpoint_interval_steps == 0 (0: only after the last). The
  // ps keeps the server states of those steps, and of the last step it
  // summed, for fetch_server_states() (InitHeader.checkpoint_interval_steps).
  int64_t checkpoint_interval_steps = 0;
  // How long a call that met a ps which restarted (empty) waits for it to be
  // refilled (async: set_ps_refill) or the run rewound (sync: rewind_run),
  // and this replica registered with it again, before it ends the run. 0: a
  // restarted ps ends the run at once.
  double ps_rejoin_window_s = 0;
  // Sync, the chief of a run whose --codec=auto chose again (the link
  // moved): join() initializes every ps with this rewind id (above the run's
  // run_epoch()) and InitHeader.new_plan, so this client's layout replaces
  // the one the run had, from join()'s global step. 0: an ordinary join.
  uint64_t new_plan_rewind_id = 0;
};

// What went over the wire from this replica's point of view.
struct Traffic {
  uint64_t payload_sent = 0;      // codec payload bytes pushed
  uint64_t payload_received = 0;  // aggregated payload (sync) or value (async) bytes pulled
  uint64_t message_sent = 0;      // serialized protobuf bytes of every request
  uint64_t message_received = 0;  // serialized protobuf bytes of every reply
};

class WorkerClient {
 public:
  // The layout, sync flag and replica counts must be what every process of
  // the run computes (their fingerprint is checked by the ps).
  WorkerClient(std::vector<std::string> ps_addresses, Layout layout, int replica, bool sync, int total_replicas,
               int replicas_to_aggregate, ClientOptions options);
  ~WorkerClient();
  WorkerClient(const WorkerClient&) = delete;
  WorkerClient& operator=(const WorkerClient&) = delete;

  // Full-variable tensors to start an async run from: values[v] and, per
  // optimizer slot name, slots[name][v] (each variables[v].size floats).
  // Sync runs: only server_states, [layout shard] the server state each ps
  // resumes its shard from (codecs that keep one, server_ef(); empty: fresh).
  struct InitTensors {
    std::vector<std::span<const float>> values;
    std::map<std::string, std::vector<std::span<const float>>> slots;
    std::vector<std::vector<uint8_t>> server_states;
  };

  // The chief initializes every ps first (layout, global step; init's
  // tensors, or a sync run's server states). Then every replica registers
  // and waits until all have joined. Returns the run's global step.
  int64_t join(int64_t global_step, const InitTensors* init = nullptr);
  // The id of the last rewind of the run this client joined (0: none).
  uint64_t run_epoch() const;

  // Async, the chief (before join): what a ps that restarted is refilled
  // with. A ps killed and started again (a pod's restart) is empty: it
  // refuses a replica's calls as "before Init", then as "not registered".
  // With options.ps_rejoin_window_s > 0, the call that meets it does not end
  // the run: the chief initializes the ps again with refill()'s tensors
  // (join()'s: every variable's values and slots, whole; the ps takes its
  // shards) at the latest global step this replica pulled, every replica
  // registers with it again, and the call is retried. What that ps applied
  // since the values and slots refill() returns is lost (the run's other
  // ps keep theirs). refill runs on the thread of the call that met the ps,
  // with the streamed pull's writes held off, while that call waits.
  void set_ps_refill(std::function<InitTensors()> refill);

  // Sync, with options.ps_rejoin_window_s > 0: a ps that restarted (empty)
  // makes every call of the step throw PsRestarted (errors.h), on every
  // replica (a call's refusal, or a heartbeat that the ps no longer knows
  // it; the calls in flight are cancelled). Then:
  //   the chief: rewind_run(step, init) with its latest checkpoint's step and
  //     server states: every ps, the restarted and the running, goes back to
  //     that step (the running ones drop their steps and registrations), and
  //     the chief registers again;
  //   every other replica: rejoin_rewound_run() waits (within the window)
  //     until every ps has been rewound, registers again, and returns the step.
  // Each then restores the chief's checkpoint of that step and goes on from
  // there. Either throws PeerError when the window passes; a pipelined step
  // in progress is abandoned first.
  int64_t rewind_run(int64_t step, const InitTensors* init);
  int64_t rejoin_rewound_run();

  // Sync scale sharing: the max over replicas of each variable's local scale.
  // With `variables`, only those (local_scales[i] is variables[i]'s; the
  // result in the same order): a layer's scales can be shared as soon as
  // the backward pass has finished it.
  std::vector<float> exchange_scales(int64_t step, std::span<const float> local_scales,
                                     std::span<const uint32_t> variables = {});

  // Sync pre-rounds of multi-round codecs (ps 0): the sums over the
  // replicas, in replica order, of each replica's vectors of round `round` of
  // `variables` (values: their vectors one after another); the sums in the
  // same layout. Long-polls until they are final.
  std::vector<float> exchange_presums(int64_t step, uint32_t round, std::span<const uint32_t> variables,
                                      std::span<const float> values);

  struct PushOutcome {
    bool applied = true;  // every ps counted it
    int stale = 0;        // ps tasks that dropped it as stale
    int past_end = 0;     // async: ps tasks that dropped it, the run's last step being applied
  };
  // One payload per shard of the layout (layout.shards order).
  PushOutcome push(int64_t step, float loss, std::span<const std::span<const uint8_t>> shard_payloads);

  // --- Async, streamed: push()'s one Push call per ps, its payloads written
  // as they are encoded (during the backward pass) by a thread per ps:
  //   begin_push(); push_payloads(...)...; end_push();
  // The ps reads and applies it as it does push()'s. Every shard must be
  // given exactly once; the payload bytes must stay untouched until end_push().
  void begin_push();
  // Queues these shards' payloads (layout indices; any ps). The loss is the
  // push header's: the first call's counts.
  void push_payloads(float loss, std::span<const size_t> shards,
                     std::span<const std::span<const uint8_t>> shard_payloads);
  // Waits until every ps has the whole push; throws what a push met.
  PushOutcome end_push();

  struct Sums {
    uint32_t contributions = 0;  // R payloads summed
    float mean_loss = 0;         // their replicas' mean loss
    double ready_s = 0;          // pull_sums: seconds until every ps had the sum ready (the rest: transfer)
    // end_step: the mean over replicas of their last report_step_times (ps 0's view), and over how many.
    std::vector<float> replicas_step_ms;
    uint32_t replicas_reporting = 0;
  };
  // The step-time report (kStepTimeFields values) the next pipelined step's
  // first bucket carries, so the chief can log every replica's average.
  void report_step_times(std::vector<float> ms);
  // Sync: waits for step's sums and writes the aggregated payload of every
  // shard into sums[shard].
  Sums pull_sums(int64_t step, std::vector<std::vector<uint8_t>>& sums);

  // --- Sync, pipelined: one step's payloads leave in buckets as they are
  // encoded (during the backward pass), and its sums come back shard by
  // shard as the ps completes them, so pushing, summing and pulling overlap
  // one another and the computation. The arithmetic is push()/pull_sums()'s.
  //   begin_step(step, sums); push_bucket(...)...; while (next_sum()) ...; end_step();
  // Starts receiving step's sums into sums[shard] (layout.shards order).
  void begin_step(int64_t step, std::vector<std::vector<uint8_t>>& sums);
  // Queues a push of these shards (layout indices; any ps) with their
  // payloads (shard_payloads[i] for shards[i]) and returns at once; at most
  // two pushes are in flight per ps, and of the queued ones the bucket with
  // the lowest shard index leaves next (the first layers' gradients overtake
  // a large later layer's, so their sums return first). The payload bytes must
  // stay untouched until end_step(). Every shard is pushed exactly once a step.
  void push_bucket(float loss, std::span<const size_t> shards, std::span<const std::span<const uint8_t>> shard_payloads);
  // Blocks until another shard's sum is in sums[shard] and returns that
  // shard; nullopt once every shard of the step has arrived. Throws what a
  // push or pull of the step met (PeerError, RunEnded).
  std::optional<size_t> next_sum();
  // When the step's pushes were all acknowledged and its first sum arrived,
  // in seconds since begin_step (what the step's time went to).
  struct StepTimes {
    double pushed_s = 0;
    double first_sum_s = 0;
  };
  // Waits for the step's pushes and pulls; the sums' header.
  Sums end_step(StepTimes* times = nullptr);
  // The last pipelined step's push rate in bytes per second: its payload
  // bytes over the time some push of it was in flight (0 before the first).
  // What a bucket costs on the link, to size the next step's buckets.
  double push_rate() const;

  // Async: the current values into values[v] (full variables); returns the
  // global step (ps 0's). Pushes that follow are tagged with these steps.
  int64_t pull_values(std::span<const std::span<float>> values);

  // Async, streamed: pull_values()'s values landing shard by shard on a
  // thread per ps, so the forward pass starts on the first layers while the
  // rest still arrive:
  //   step = begin_pull(values); wait_values(v, elements)...; end_pull();
  // begin_pull returns ps 0's global step once every ps has answered. Each ps
  // sends one snapshot of its shards; a retried call keeps the shards that
  // had landed (a replica may have read them) and takes the rest from the ps's
  // snapshot then, as reads of separate variables do in any async ps.
  //
  // With push_turn, each ps ends the pull only once this replica's next push
  // may cross its link in alone (comm/service/push_turns.h), and the next
  // begin_push's bytes to that ps wait for that end: the values land as
  // before, only the push's bytes wait. A pull ended before the values are
  // read (end_pull() first, by a step that takes the weights whole) should
  // not ask: its end would wait for the turn.
  int64_t begin_pull(std::span<const std::span<float>> values, bool push_turn = false);
  // begin_pull in two halves. start_pull sends the pull and returns at once;
  // pulled_step waits for every ps's answer and returns begin_pull's step.
  // With after_own_push, called between this replica's last push_payloads
  // and its end_push, each ps answers once it has applied that push (or
  // dropped it past the run's end), so the values include it as after
  // end_push, and the request travels with the push's last bytes instead of
  // after its reply:
  //   start_pull(values, true); end_push(); step = pulled_step(); wait_values...; end_pull();
  // The values land in `values` from then on: nothing may read them as the
  // last pull's meanwhile. std::logic_error with no push in flight.
  void start_pull(std::span<const std::span<float>> values, bool after_own_push, bool push_turn = false);
  int64_t pulled_step();
  // Blocks until elements [0, elements) of variable v have landed (every
  // shard of v that begins below `elements`); throws what the pull met, and
  // std::invalid_argument for a variable or element count out of range.
  void wait_values(size_t v, uint64_t elements);
  // Waits for every shard; throws what the pull met.
  void end_pull();

  // Async, chief: every variable's values ("name") and slots ("name/slot").
  std::map<std::string, std::vector<float>> fetch_state();

  // Sync, chief: [layout shard] the server state as the sum of `step` left
  // it (codecs that keep one, server_ef(); empty for the others), for the
  // checkpoint of that step. The ps keeps the states of the last step it
  // summed until a sum of the next step begins (so the chief asks before it
  // pushes that step), and those of the steps ClientOptions::
  // checkpoint_interval_steps names while they are among its last kept
  // steps (a chief behind a run with backup replicas); any other step is a
  // PeerError.
  std::vector<std::vector<uint8_t>> fetch_server_states(int64_t step);

  // This replica is done. The chief also ends the run on every ps (ok), or
  // stops it with the reason (!ok). Never throws.
  void finish(bool ok, const std::string& reason = "");

  Traffic traffic() const;
  const Layout& layout() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace terngrad::comm
