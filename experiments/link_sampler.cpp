// The link sampler (link_sampler.h).
#include "link_sampler.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <optional>
#include <stdexcept>

#include "interface_counters.h"
#include "terngrad/base/atomic_file.h"

namespace terngrad::experiments {

namespace {

constexpr double kIdleShare = 0.05;  // a sample under 5% of the rate is a gap
constexpr double kBusyShare = 0.5;   // the window spans samples at half the rate or more
constexpr size_t kTimelineSamples = 60000;

}  // namespace

LinkSampler::LinkSampler(std::string netns, std::vector<std::string> interfaces, uint64_t rate_bps, double period_s)
    : netns_(std::move(netns)), interfaces_(std::move(interfaces)), rate_bps_(rate_bps), period_s_(period_s) {
  if (interfaces_.empty() || rate_bps_ == 0 || !(period_s_ > 0))
    throw std::invalid_argument("LinkSampler: no interfaces, a zero rate or a bad period");
  const size_t n = interfaces_.size();
  for (Totals* t : {&acc_, &first_busy_, &last_busy_}) {
    t->in_idle.assign(n, 0);
    t->out_idle.assign(n, 0);
    t->in_unused_s.assign(n, 0);
    t->out_unused_s.assign(n, 0);
    t->in_bytes.assign(n, 0);
    t->out_bytes.assign(n, 0);
  }
  std::condition_variable cv;
  bool ready = false;
  std::mutex start_mu;
  thread_ = std::thread([&] {
    {
      // Join the namespace on this thread only; report the first read.
      const std::string path = "/run/netns/" + netns_;
      const int ns = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      std::string why;
      if (ns < 0 || ::setns(ns, CLONE_NEWNET) != 0) why = "cannot join " + path + ": " + std::strerror(errno);
      if (ns >= 0) ::close(ns);
      std::optional<InterfaceCounters> counters;
      if (why.empty()) {
        try {
          counters.emplace(interfaces_);
          std::vector<uint64_t> tx, rx;
          if (!counters->read(tx, rx)) why = "cannot read the counters of " + interfaces_.front() + " (and the rest)";
        } catch (const std::exception& e) {
          why = e.what();
        }
        if (!why.empty()) why += " in " + netns_;
      }
      {
        std::lock_guard<std::mutex> lk(start_mu);
        std::lock_guard<std::mutex> lk2(mu_);
        error_ = why;
        started_ = why.empty();
        ready = true;
      }
      cv.notify_all();
      if (!why.empty()) return;
      run(*counters);
    }
  });
  std::unique_lock<std::mutex> lk(start_mu);
  cv.wait(lk, [&] { return ready; });
  lk.unlock();
  std::lock_guard<std::mutex> lk2(mu_);
  if (!started_) {
    const std::string why = error_;
    stop_ = true;
    thread_.join();
    throw std::runtime_error("link sampler: " + why);
  }
}

LinkSampler::~LinkSampler() { stop(); }

void LinkSampler::run(InterfaceCounters& counters) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  {
    std::lock_guard<std::mutex> lk(mu_);
    start_us_ = std::chrono::duration_cast<std::chrono::microseconds>(t0.time_since_epoch()).count();
  }
  std::vector<uint64_t> tx0, rx0, tx, rx;
  counters.read(tx0, rx0);
  auto last = Clock::now();
  acc_.t = 0;
  auto next = last;
  const auto period = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(period_s_));
  const size_t n = interfaces_.size();
  while (!stop_.load()) {
    next += period;
    std::this_thread::sleep_until(next);
    const auto read_at = Clock::now();
    if (!counters.read(tx, rx)) continue;  // an interface went away: the run is ending
    const auto now = Clock::now();
    // Preempted between the read and the clock (tens of ms on 2 busy cores):
    // the counters' time is unknown, and a rate over `now - last` would show
    // a spike here and a gap before. The next sample spans this one.
    if (now - read_at > period) continue;
    const double dt = std::chrono::duration<double>(now - last).count();
    last = now;
    if (dt <= 0) continue;
    const double capacity = static_cast<double>(rate_bps_) / 8 * dt;  // bytes per direction
    std::lock_guard<std::mutex> lk(mu_);
    const Totals before = acc_;  // the window opens at the start of its first busy sample
    bool busy = false;
    std::vector<float> row(2 * n);
    for (size_t i = 0; i < n; ++i) {
      // The hub's end sends what the task receives.
      const uint64_t in = tx[i] - tx0[i], out = rx[i] - rx0[i];
      acc_.in_bytes[i] += in;
      acc_.out_bytes[i] += out;
      if (in < kIdleShare * capacity) acc_.in_idle[i] += dt;
      if (out < kIdleShare * capacity) acc_.out_idle[i] += dt;
      acc_.in_unused_s[i] += std::max(0.0, dt * (1 - in / capacity));
      acc_.out_unused_s[i] += std::max(0.0, dt * (1 - out / capacity));
      busy |= in >= kBusyShare * capacity || out >= kBusyShare * capacity;
      row[2 * i] = static_cast<float>(in * 8 / dt / 1e6);
      row[2 * i + 1] = static_cast<float>(out * 8 / dt / 1e6);
    }
    acc_.t = std::chrono::duration<double>(now - t0).count();
    ++samples_;
    if (busy) {
      if (!seen_busy_) first_busy_ = before;
      seen_busy_ = true;
      last_busy_ = acc_;
    }
    if (timeline_t_.size() < kTimelineSamples) {
      timeline_t_.push_back(acc_.t);
      timeline_mbit_.push_back(std::move(row));
    }
    tx0 = tx;
    rx0 = rx;
  }
}

LinkIdleReport LinkSampler::stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lk(mu_);
  LinkIdleReport r;
  r.period_s = period_s_;
  r.samples = samples_;
  if (!seen_busy_) return r;
  r.window_s = last_busy_.t - first_busy_.t;
  for (size_t i = 0; i < interfaces_.size(); ++i) {
    LinkIdle l;
    l.interface = interfaces_[i];
    l.in_idle_s = last_busy_.in_idle[i] - first_busy_.in_idle[i];
    l.out_idle_s = last_busy_.out_idle[i] - first_busy_.out_idle[i];
    if (r.window_s > 0) {
      l.in_unused = (last_busy_.in_unused_s[i] - first_busy_.in_unused_s[i]) / r.window_s;
      l.out_unused = (last_busy_.out_unused_s[i] - first_busy_.out_unused_s[i]) / r.window_s;
    }
    l.in_bytes = last_busy_.in_bytes[i] - first_busy_.in_bytes[i];
    l.out_bytes = last_busy_.out_bytes[i] - first_busy_.out_bytes[i];
    r.links.push_back(l);
  }
  return r;
}

std::vector<terngrad::timeline::Counter> LinkSampler::timeline_counters() const {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<terngrad::timeline::Counter> out;
  for (size_t i = 0; i < interfaces_.size(); ++i)
    for (int direction = 0; direction < 2; ++direction) {
      terngrad::timeline::Counter c;
      c.name = interfaces_[i] + (direction == 0 ? " in, Mbit/s" : " out, Mbit/s");
      for (size_t k = 0; k < timeline_t_.size(); ++k) {
        c.t_us.push_back(start_us_ + static_cast<int64_t>(timeline_t_[k] * 1e6));
        c.values.push_back(timeline_mbit_[k][2 * i + direction]);
      }
      out.push_back(std::move(c));
    }
  return out;
}

void LinkSampler::write_timeline_csv(const std::string& path) const {
  std::lock_guard<std::mutex> lk(mu_);
  std::ostringstream out;
  out << "t_s";
  for (const std::string& i : interfaces_) out << "," << i << "_in_mbit," << i << "_out_mbit";
  out << "\n";
  char buf[32];
  for (size_t k = 0; k < timeline_t_.size(); ++k) {
    std::snprintf(buf, sizeof buf, "%.6f", timeline_t_[k]);
    out << buf;
    for (float x : timeline_mbit_[k]) {
      std::snprintf(buf, sizeof buf, ",%.1f", x);
      out << buf;
    }
    out << "\n";
  }
  base::write_file_atomically(path, out.str());
}

}  // namespace terngrad::experiments
