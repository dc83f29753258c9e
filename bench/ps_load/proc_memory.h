// Private to ps_load_bench: a process's memory as the kernel counts it, and
// a thread that samples it over time.
//
// VmRSS is the resident set now; VmHWM its peak over the process's life
// ("high water mark"), which catches a spike between two samples. Both come
// from /proc/<pid>/status, in kB; we report bytes.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace terngrad::bench {

struct ProcMemory {
  uint64_t rss = 0;  // VmRSS, bytes
  uint64_t hwm = 0;  // VmHWM, bytes
};

// nullopt when the process is gone (or /proc/<pid>/status lacks the fields).
std::optional<ProcMemory> read_proc_memory(pid_t pid);

// Samples VmRSS of some processes every `period` on a thread of its own,
// from construction until stop() (or destruction).
class RssSampler {
 public:
  struct Sample {
    double t = 0;                    // seconds since the sampler started
    std::vector<uint64_t> rss;       // [process] bytes; 0 once it is gone
  };
  RssSampler(std::vector<pid_t> pids, std::chrono::milliseconds period);
  ~RssSampler();
  RssSampler(const RssSampler&) = delete;
  RssSampler& operator=(const RssSampler&) = delete;

  void stop();
  // Every sample so far (a copy: the thread keeps adding).
  std::vector<Sample> samples() const;
  // Seconds since the sampler started, on the samples' clock.
  double now() const;
  // The largest VmRSS sampled per process.
  std::vector<uint64_t> max_rss() const;

 private:
  void loop();

  const std::vector<pid_t> pids_;
  const std::chrono::milliseconds period_;
  const std::chrono::steady_clock::time_point start_;
  mutable std::mutex mu_;
  std::vector<Sample> samples_;
  std::atomic<bool> stop_{false};
  std::thread thread_;  // last: starts once the rest exists
};

}  // namespace terngrad::bench
