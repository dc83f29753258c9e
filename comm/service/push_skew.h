// Private to the ps: how far one replica's pushes of a sync step may run
// ahead of another's that is still sending.
//
// A shard's sum leaves only once every replica's push of it is in. When the
// replicas share the ps's link, TCP does not share it evenly: measured at
// 500 Mbit/s with 4 replicas, one replica's pushes ended 125 ms (median)
// before another's, so the link out idled while the sums waited for the
// slowest, then carried them all after the link in had gone quiet. The ps
// therefore holds its reply to a push from a replica that is more than
// `limit` bytes of this step ahead of another replica whose push is being
// read: the replica's pushes wait for replies (two in flight), so it stops
// sending and the link goes to the one behind. The replica furthest behind
// is never held, so the hold cannot deadlock; it ends when that replica
// catches up or stops sending (between buckets, or finished).
//
// Every call is made with the ps's lock held.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace terngrad::comm::detail {

class PushSkew {
 public:
  // limit 0: never hold.
  PushSkew(size_t replicas, uint64_t limit_bytes)
      : limit_(limit_bytes), reading_(replicas), reading_step_(replicas, -1), step_(replicas, -1),
        bytes_(replicas, 0) {}

  // Whether replies are ever held (a limit was set): otherwise reads need not be counted.
  bool active() const { return limit_ != 0; }

  // A push of replica r for `step` began to be read (its header arrived)...
  void begin_read(uint32_t r, int64_t step) {
    ++reading_[r];
    reading_step_[r] = step;
  }
  // ...and was read whole, or refused.
  void end_read(uint32_t r) { --reading_[r]; }
  // r's push of `step` was accepted with `bytes` payload bytes.
  void accepted(uint32_t r, int64_t step, uint64_t bytes) {
    if (step_[r] != step) step_[r] = step, bytes_[r] = 0;
    bytes_[r] += bytes;
    if (step > push_step_) push_step_ = step, last_largest_ = largest_, largest_ = 0;
    if (step == push_step_) largest_ = std::max(largest_, bytes);
  }

  // Whether r's reply for `step` waits: another replica still sending this
  // step has more than the limit fewer bytes of it in.
  bool ahead(uint32_t r, int64_t step) const {
    if (limit_ == 0 || step_[r] != step) return false;
    const uint64_t limit = std::max(limit_, 2 * std::max(largest_, last_largest_));
    for (size_t q = 0; q < reading_.size(); ++q) {
      if (q == r || reading_[q] == 0 || reading_step_[q] != step) continue;
      const uint64_t theirs = step_[q] == step ? bytes_[q] : 0;
      if (theirs + limit < bytes_[r]) return true;
    }
    return false;
  }

 private:
  const uint64_t limit_;
  std::vector<int> reading_;              // [replica] pushes being read
  std::vector<int64_t> reading_step_;     // [replica] the step of the last push begun
  std::vector<int64_t> step_;             // [replica] the step bytes_ counts
  std::vector<uint64_t> bytes_;           // [replica] payload bytes accepted in step_
  // The largest push (bucket) of the newest step, and of the one before.
  int64_t push_step_ = -1;
  uint64_t largest_ = 0, last_largest_ = 0;
};

}  // namespace terngrad::comm::detail
