// Private to the ps: the order in which an async run's pushes cross the ps's
// link in, one replica's at a time.
//
// An async replica pushes its gradient, pulls the values once the ps has
// applied it, computes at them and pushes again. When two replicas' pushes
// share the link into the ps, TCP splits it between them: both end late, both
// pulls then share the link out, both replicas compute at once and push at
// once again. The replicas fall into step, and each link idles while the other
// carries both replicas' bytes (traced at 1 Gbit/s with 2 replicas: every push
// overlapped the other replica's). One push at a time ends each sooner, and
// its replica pulls while the next one pushes: each link carries one replica's
// bytes while the other link carries another's.
//
// A replica asks for its next turn when the ps has sent its pull's values,
// and the end of that pull is the answer: the replica writes its next push
// only once the pull has ended (WorkerClient::begin_pull with push_turn). Its
// forward and backward passes run meanwhile; only the bytes wait. Turns go in
// the order they were asked for. One is given when no other replica's push
// has more than `lead` bytes still to come (so the next push's first bytes
// arrive as the last one's end) and no replica given a turn before has yet to
// begin its push (a reservation, which lapses after `reservation`, so a
// replica that evaluates or checkpoints first holds no one up for long).
//
// Every call is made with the ps's lock held.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

namespace terngrad::comm::detail {

class PushTurns {
 public:
  using Clock = std::chrono::steady_clock;

  PushTurns(size_t replicas, uint64_t lead_bytes, Clock::duration reservation)
      : lead_(lead_bytes), reservation_(reservation), far_from_done_(replicas, 0), reserved_until_(replicas) {}

  uint64_t lead_bytes() const { return lead_; }

  // Replica r waits for its next turn (after any that asked before).
  void ask(uint32_t r) {
    if (std::find(queue_.begin(), queue_.end(), r) == queue_.end()) queue_.push_back(r);
  }
  // Whether r may push now. If so its turn is taken: r leaves the queue and
  // holds a reservation until its push begins (or the reservation lapses).
  bool take(uint32_t r, Clock::time_point now) {
    if (queue_.empty() || queue_.front() != r || !link_free_for(r, now)) return false;
    queue_.pop_front();
    reserved_until_[r] = now + reservation_;
    return true;
  }
  // r stops waiting without its turn (its pull ended otherwise).
  void withdraw(uint32_t r) { queue_.erase(std::remove(queue_.begin(), queue_.end(), r), queue_.end()); }
  // The earliest time a reservation lapses, after now (a waiter's timeout).
  std::optional<Clock::time_point> next_lapse(Clock::time_point now) const {
    std::optional<Clock::time_point> first;
    for (const auto& until : reserved_until_)
      if (until && *until > now && (!first || *until < *first)) first = until;
    return first;
  }

  // A push of replica r began to be read: its reservation is used. It counts
  // as far from done until nearly_done(r) or end_read(r).
  void begin_read(uint32_t r) {
    reserved_until_[r].reset();
    ++far_from_done_[r];
  }
  // That push has at most `lead` bytes still to come.
  void nearly_done(uint32_t r) {
    if (far_from_done_[r] > 0) --far_from_done_[r];
  }
  // ... or was read whole or refused (without nearly_done first: far_from_done
  // true says so).
  void end_read(uint32_t r, bool far_from_done) {
    if (far_from_done && far_from_done_[r] > 0) --far_from_done_[r];
  }

 private:
  bool link_free_for(uint32_t r, Clock::time_point now) const {
    for (size_t q = 0; q < far_from_done_.size(); ++q) {
      if (q == r) continue;
      if (far_from_done_[q] > 0) return false;
      if (reserved_until_[q] && *reserved_until_[q] > now) return false;
    }
    return true;
  }

  const uint64_t lead_;
  const Clock::duration reservation_;
  std::deque<uint32_t> queue_;                                // replicas waiting, in the order they asked
  std::vector<int> far_from_done_;                            // [replica] pushes read with more than lead to come
  std::vector<std::optional<Clock::time_point>> reserved_until_;  // [replica] a turn taken, push not begun
};

}  // namespace terngrad::comm::detail
