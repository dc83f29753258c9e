// Private: the lines a ps logs about the calls it refuses. Every refusal is
// worth a line (the peer's address says who knocked), but a caller retrying
// in a loop must not flood the log: at most `burst` lines per window, and the
// first line of the next window says how many were left out. Not
// thread-safe (the service calls it with its lock held); time is passed in,
// so tests need no clock.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace terngrad::comm::detail {

class RefusalLog {
 public:
  using Clock = std::chrono::steady_clock;
  explicit RefusalLog(int burst = 10, double window_s = 10) : burst_(burst), window_(window_s) {}

  // The line to print for this refusal, or "" when it is left out.
  std::string refuse(const std::string& peer, const std::string& call, const std::string& why, Clock::time_point now) {
    std::string prefix;
    if (!started_ || std::chrono::duration<double>(now - window_start_).count() >= window_) {
      if (suppressed_ > 0)
        prefix = "(" + std::to_string(suppressed_) + " more refused calls in the last " +
                 std::to_string(static_cast<int>(window_)) + " s were not logged) ";
      started_ = true;
      window_start_ = now;
      logged_ = 0;
      suppressed_ = 0;
    }
    ++total_;
    if (logged_ >= burst_) {
      ++suppressed_;
      return "";
    }
    ++logged_;
    return prefix + "refused " + call + " from " + peer + ": " + why;
  }
  uint64_t total() const { return total_; }

 private:
  int burst_;
  double window_;
  bool started_ = false;
  Clock::time_point window_start_{};
  int logged_ = 0;
  uint64_t suppressed_ = 0, total_ = 0;
};

}  // namespace terngrad::comm::detail
