// Private: the steps of a sync run on one ps. A step's sum is formed from
// the first replicas_to_aggregate replicas to deliver every shard of it,
// summed in replica order (so the bits do not depend on arrival order);
// later pushes of the step are stale; then the next step begins. The sums of
// the last keep_steps steps stay for late pullers, and the buffers of sums
// nobody needs any more are reused for later steps, so that large tensors do
// not cost fresh (page-faulting, zero-filled) memory every step.
//
// No gRPC here: the service (ps_server.cpp) checks a push completely (replica,
// shards, payload sizes, codec validation), hands it to push(), and streams
// the StepSums to pullers.
//
// Not thread-safe: the service calls every member with its lock held, except
// sum(), which it calls with the lock released (summing is the slow part; see
// SumJob), and StepSums shards once they are ready (they no longer change).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "shard_coding.h"

namespace terngrad::comm::detail {

// One step's sums, in the codecs' aggregate form. Filled shard by shard, each
// as soon as every replica has delivered it (when a step needs every
// replica), or all at once when the step closes (backup replicas); shared so
// that pullers stream it without a copy while later shards are still being
// summed.
struct StepSums {
  int64_t step = 0;
  uint32_t contributions = 0;  // replicas summed
  float mean_loss = 0;         // their losses' mean
  std::vector<std::vector<uint8_t>> shards;
  std::vector<bool> ready;  // shards[s] is summed and will not change
  size_t ready_count = 0;
  bool complete = false;  // the step is closed and every shard summed
  // [replica] pulled all of it (each replica counts once, however often it
  // asks); once every replica has, it is no longer needed.
  std::vector<bool> pulled_by;
  int pulls = 0;
};

class SyncSteps {
 public:
  // shards: this ps's shards (their codecs outlive this). replicas: the run's
  // replicas; needed: replicas_to_aggregate, in [1, replicas]. keep_steps:
  // completed steps kept for late pullers. first_step: the global step the
  // run starts at. Throws std::invalid_argument on a bad count or a null codec.
  // server_states: [shard] each shard's server state to start from (a
  // checkpoint's, checked by the caller with validate_aggregate_state), or
  // empty: every state fresh.
  SyncSteps(std::vector<ShardCoding> shards, int replicas, int needed, size_t keep_steps, int64_t first_step,
            std::vector<std::vector<uint8_t>> server_states = {});

  // The next step to complete. It equals current_step(): they are named apart
  // as the service reports them (global step; the step being collected).
  int64_t global_step() const { return global_step_; }
  int64_t current_step() const { return current_.step; }

  enum class PushOutcome {
    kAccepted,       // kept: take_sums() next
    kStale,          // for a step already summed (or closed): dropped
    kDuplicate,      // delivered before (a retry): dropped
    kAhead,          // for a step after the current one: the replica is wrong
  };
  struct PushResult {
    PushOutcome outcome = PushOutcome::kAccepted;
    // kStale: this push is the first of the replica's stale pushes for its
    // step, and so the one counted (a late replica's buckets count once).
    bool counted_stale = false;
    // kAccepted: the shards kept, for take_sums(). A bucket that repeats
    // some shards the replica delivered before in this step keeps only the
    // others: a replica restarted mid-step (or a retry) may cut its buckets
    // differently, and a step's payloads of a replica are the same bytes
    // whichever process encodes them (the first delivery stays).
    std::vector<uint32_t> accepted;
    size_t repeated = 0;  // shards dropped that way
  };
  // A replica's push of step carrying shards[i]'s payloads[i] (a whole step,
  // or one bucket). The caller has validated the payloads; here replica must
  // be in [0, replicas), shards distinct and in range, and one payload per
  // shard (std::invalid_argument otherwise, before anything changes).
  // kAccepted moves the payloads in; other outcomes change only the counts.
  PushResult push(uint32_t replica, int64_t step, std::span<const uint32_t> shards, std::span<std::string> payloads,
                  float loss);

  // The sums an accepted push made possible: take_sums() (lock held) picks
  // them, sum() (lock released) computes them, settle() (lock held again)
  // publishes them. When every replica is needed, each shard is summed as
  // soon as all replicas delivered it, by the thread of the push that
  // completed it; otherwise the whole step is summed once `needed` replicas
  // delivered everything, and the step is closed meanwhile.
  class SumJob {
   public:
    // Whether sum() has anything to do (settle() is called regardless).
    bool empty() const { return shards_.empty(); }

   private:
    friend class SyncSteps;
    enum class Kind { kNone, kDeliveredShards, kWholeStep } kind_ = Kind::kNone;
    int64_t step_ = 0;
    std::vector<uint32_t> shards_;
    std::vector<bool> from_;  // [replica] summed
    // kWholeStep: the closed step's pushes, moved out of the step buffer.
    // kDeliveredShards reads the step buffer itself: those shards are
    // complete and no push changes them, and the step cannot end before
    // they are summed.
    std::vector<std::vector<std::string>> payloads_;  // [replica][shard]
    std::vector<float> loss_;                         // [replica] (kWholeStep)
    int count_ = 0;                                   // replicas (kWholeStep)
    std::shared_ptr<StepSums> sums_;
  };
  // shards: those of the push just accepted (in range, std::invalid_argument
  // otherwise). Nothing to take once the step is closed.
  SumJob take_sums(std::span<const uint32_t> shards);
  // Returns "" or why a payload could not be summed (the run cannot go on:
  // the job is then not settled).
  std::string sum(const SumJob& job) const;
  // Once per job, after sum() succeeded (or for an empty job). Returns
  // whether anything changed that waiting pullers should hear.
  bool settle(const SumJob& job);

  // The sums of step (complete, or being filled), or null when not kept.
  std::shared_ptr<StepSums> sums_of(int64_t step) const;
  // replica has streamed all of held (held is the caller's only copy):
  // once every replica has, the step is dropped and, if nobody else streams
  // it, its buffers serve a later step. A replica's repeated pulls count
  // once, so no replica's reads can drop a step another still needs.
  // std::invalid_argument for a replica out of range.
  void pulled(const std::shared_ptr<StepSums>& held, uint32_t replica);
  // Keep every step of the window even once each replica has pulled it: a
  // replica that restarts catches up through them (ServerOptions::
  // keep_pulled_steps). Costs keep_steps steps' sums in memory.
  void keep_pulled(bool keep) { keep_pulled_ = keep; }
  // The chief checkpoints after every step s with (s + 1) % every == 0 (0:
  // only after its last step; InitHeader.checkpoint_interval_steps). The
  // states after those steps are copied aside when the step completes.
  // std::invalid_argument for a negative interval.
  void keep_states_every(int64_t every);

  // [shard] the codecs' server states (server_ef() residuals; empty for
  // codecs that keep none) as the sum of `step` left them, for the chief's
  // checkpoint of that step, or null (and always null when no codec keeps
  // a state). Two sources:
  // - the live states, while step is the last completed step and no sum of
  //   the next step has begun: the chief asks before it pushes the next
  //   step, so its checkpoint at any step, and the last, costs no copy;
  // - the copies of the steps keep_states_every() names, while they are
  //   among the last keep_steps steps: a chief that lags behind the run
  //   (backup replicas: the ps moves on without it, and a restarted chief
  //   rejoins behind) asks for them after the ps left that step.
  // Copying every step's states instead cost a copy of the whole model per
  // step under the service's lock, and keep_steps such copies of memory.
  // The pointer is valid until the next take_sums().
  const std::vector<std::vector<uint8_t>>* server_states_after(int64_t step) const;

  // The replicas that have not delivered every shard of the current step.
  std::vector<uint32_t> missing() const;
  // The last step a replica delivered completely (-1 for none).
  int64_t last_pushed(uint32_t replica) const;
  uint64_t stale() const { return stale_; }
  uint64_t duplicates() const { return duplicates_; }

 private:
  // The pushes of the step being collected. A replica delivers its shards in
  // one push or in several buckets; it counts once it delivered every shard.
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
    std::shared_ptr<StepSums> sums;
  };
  void start(int64_t step);
  void finish(int64_t step, const std::vector<bool>& pushed, const std::vector<float>& loss, int count,
              const std::shared_ptr<StepSums>& sums);

  std::vector<ShardCoding> shards_;
  int replicas_;
  int needed_;
  size_t keep_steps_;
  bool keep_pulled_ = false;
  int64_t global_step_;
  StepBuffer current_;
  std::deque<std::shared_ptr<StepSums>> recent_;  // completed steps, for late pullers
  std::vector<std::vector<uint8_t>> spare_sums_;  // [shard] buffers of dropped steps
  // [shard] the codecs' server state (server_ef() residuals). sum() runs
  // without the lock, but a shard's state is touched only by the one sum of
  // that shard in flight: a step's shard is summed once, and the next step
  // begins only after every shard of this one is settled.
  mutable std::vector<std::vector<uint8_t>> server_states_;
  bool keeps_server_states_ = false;  // some shard's codec keeps one
  // The step whose sum server_states_ reflect, or kNoStep while a sum of
  // a later step has begun (taken, perhaps still running).
  static constexpr int64_t kNoStep = INT64_MIN;
  int64_t live_states_step_;
  int64_t keep_states_every_ = 0;
  struct StatesAfter {
    int64_t step = 0;
    std::vector<std::vector<uint8_t>> states;  // [shard]
  };
  std::deque<StatesAfter> states_after_;  // checkpoint steps among the last keep_steps
  std::vector<int64_t> last_pushed_;              // [replica]
  std::vector<int64_t> last_stale_;               // [replica] the last step counted stale
  uint64_t stale_ = 0, duplicates_ = 0;
};

}  // namespace terngrad::comm::detail
