// Private to ps_load_bench: where the replica threads post their progress and
// the main thread watches it. A step is complete when every replica has
// finished it; the main thread's watchdog fails the run when the slowest
// replica makes no progress for the step timeout (a stall or a deadlock), so
// every wait here has a bound.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace terngrad::bench {

class StepBoard {
 public:
  explicit StepBoard(int replicas) : done_(replicas, 0) {}

  // Replica r finished its step `steps_done - 1`.
  void finished(int r, int64_t steps_done) {
    std::lock_guard<std::mutex> lock(mu_);
    done_[r] = steps_done;
    cv_.notify_all();
  }
  // Replica r stopped on an error: the run fails with the first one.
  void failed(int r, const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_.empty()) error_ = "replica " + std::to_string(r) + ": " + why;
    cv_.notify_all();
  }

  struct View {
    int64_t complete = 0;          // steps every replica has finished
    std::vector<int> behind;       // replicas at `complete` (still in step `complete`)
    std::string error;
  };
  // Waits until more than `complete` steps are complete, an error, or timeout.
  View wait_beyond(int64_t complete, std::chrono::duration<double> timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return !error_.empty() || min_locked() > complete; });
    View v;
    v.complete = min_locked();
    v.error = error_;
    for (size_t r = 0; r < done_.size(); ++r)
      if (done_[r] == v.complete) v.behind.push_back(static_cast<int>(r));
    return v;
  }

 private:
  int64_t min_locked() const { return *std::min_element(done_.begin(), done_.end()); }

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int64_t> done_;  // [replica] steps finished
  std::string error_;
};

}  // namespace terngrad::bench
