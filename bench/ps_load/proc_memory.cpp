// A process's memory from /proc (proc_memory.h).
#include "proc_memory.h"

#include <fstream>
#include <sstream>
#include <string>

namespace terngrad::bench {

std::optional<ProcMemory> read_proc_memory(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  if (!f) return std::nullopt;
  ProcMemory m;
  bool rss = false, hwm = false;
  std::string line;
  while (std::getline(f, line)) {
    auto field = [&](const char* name, uint64_t& out, bool& found) {
      if (line.rfind(name, 0) != 0) return;
      std::istringstream in(line.substr(std::string(name).size()));
      uint64_t kb = 0;
      if (in >> kb) {
        out = kb * 1024;
        found = true;
      }
    };
    field("VmRSS:", m.rss, rss);
    field("VmHWM:", m.hwm, hwm);
  }
  // A zombie's status has no Vm* lines: it is gone as far as memory goes.
  if (!rss || !hwm) return std::nullopt;
  return m;
}

RssSampler::RssSampler(std::vector<pid_t> pids, std::chrono::milliseconds period)
    : pids_(std::move(pids)), period_(period), start_(std::chrono::steady_clock::now()), thread_([this] { loop(); }) {}

RssSampler::~RssSampler() { stop(); }

void RssSampler::stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

double RssSampler::now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void RssSampler::loop() {
  // Bounded by stop(): the owner stops it before the processes are reaped.
  while (!stop_) {
    Sample s;
    s.t = now();
    for (pid_t p : pids_) {
      const auto m = read_proc_memory(p);
      s.rss.push_back(m ? m->rss : 0);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      samples_.push_back(std::move(s));
    }
    // Short sleeps, so stop() returns promptly even with a long period.
    const auto until = std::chrono::steady_clock::now() + period_;
    while (!stop_ && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(period_, std::chrono::milliseconds(20)));
  }
}

std::vector<RssSampler::Sample> RssSampler::samples() const {
  std::lock_guard<std::mutex> lock(mu_);
  return samples_;
}

std::vector<uint64_t> RssSampler::max_rss() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<uint64_t> out(pids_.size(), 0);
  for (const Sample& s : samples_)
    for (size_t i = 0; i < s.rss.size(); ++i) out[i] = std::max(out[i], s.rss[i]);
  return out;
}

}  // namespace terngrad::bench
