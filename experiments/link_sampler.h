// Where an emulated link idles: the byte counters of the hub's end of some
// tasks' links, read every millisecond on a thread of their own while a run
// goes on, so that the gaps between payloads (a link waiting for the next
// step's gradient, a sum waiting for its slowest replica) show, not only an
// average rate.
//
// The thread joins the hub's network namespace (setns on that thread alone)
// and reads the interfaces' counters over rtnetlink (interface_counters.h), which
// count frames with their headers. For each link and direction it reports, over the busy window
// (from the first to the last sample in which either direction of any
// sampled link carried at least half its rate, so start-up and shutdown do
// not count):
//   - idle: the time in samples that carried under 5% of the rate (gaps);
//   - unused: the capacity left over, 1 - bytes / (rate x time).
// The first minute of samples is kept as a timeline (write_timeline_csv),
// for a plot of a few steps.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "interface_counters.h"
#include "terngrad/base/timeline.h"

namespace terngrad::experiments {

struct LinkIdle {
  std::string interface;  // the hub's end: "h-ps0"
  // Each direction seen from the task: in = what it received (the hub's
  // end transmitted), out = what it sent.
  double in_idle_s = 0, out_idle_s = 0;
  double in_unused = 0, out_unused = 0;  // fractions of the window's capacity
  uint64_t in_bytes = 0, out_bytes = 0;  // within the window
};

struct LinkIdleReport {
  double window_s = 0;  // the busy window's length
  double period_s = 0;  // the sampling period
  uint64_t samples = 0;
  std::vector<LinkIdle> links;
};

class LinkSampler {
 public:
  // Starts sampling interfaces (names in the namespace netns, as in
  // /proc/net/dev) shaped to rate_bps each way, every period_s. Throws
  // std::runtime_error naming the namespace or interface if the first read
  // fails.
  LinkSampler(std::string netns, std::vector<std::string> interfaces, uint64_t rate_bps, double period_s = 1e-3);
  ~LinkSampler();
  LinkSampler(const LinkSampler&) = delete;
  LinkSampler& operator=(const LinkSampler&) = delete;

  // Stops the thread (idempotent) and returns what it measured.
  LinkIdleReport stop();
  // The kept samples as CSV: t_s, then <interface>_in_mbit and _out_mbit per
  // link (the rate in each period). Written atomically.
  void write_timeline_csv(const std::string& path) const;
  // The same samples as timeline counters ("<interface> in, Mbit/s" and
  // "... out ..."), on the steady clock in microseconds (terngrad/base/timeline.h),
  // to merge with the tasks' traces.
  std::vector<terngrad::timeline::Counter> timeline_counters() const;

 private:
  struct Totals {
    double t = 0;
    std::vector<double> in_idle, out_idle, in_unused_s, out_unused_s;
    std::vector<uint64_t> in_bytes, out_bytes;
  };
  void run(InterfaceCounters& counters);

  const std::string netns_;
  const std::vector<std::string> interfaces_;
  const uint64_t rate_bps_;
  const double period_s_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::string error_;        // set by the thread if it could not start
  bool started_ = false;     // the first read succeeded
  Totals acc_, first_busy_, last_busy_;
  bool seen_busy_ = false;
  uint64_t samples_ = 0;
  int64_t start_us_ = 0;  // the steady clock at t = 0 of the samples
  std::vector<double> timeline_t_;
  std::vector<std::vector<float>> timeline_mbit_;  // [sample][2 * link + direction]
  std::thread thread_;
};

}  // namespace terngrad::experiments
