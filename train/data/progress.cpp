// Console progress line (metrics.h).
#include <unistd.h>

#include <cmath>

#include "terngrad/train/metrics.h"

namespace terngrad::train {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = std::llround(seconds);
  char buf[48];
  if (s < 60) std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(s));
  else if (s < 3600) std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  else std::snprintf(buf, sizeof buf, "%lldh%02lldm", static_cast<long long>(s / 3600), static_cast<long long>(s / 60 % 60));
  return buf;
}

std::string Progress::format(int64_t step, int64_t total, double loss, double examples_per_sec, double eta_s) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "step %lld/%lld  loss %.4f  %.0f ex/s  ETA %s", static_cast<long long>(step),
                static_cast<long long>(total), loss, examples_per_sec, format_duration(eta_s).c_str());
  return buf;
}

Progress::Progress(int64_t total_steps, int64_t examples_per_step, bool quiet, std::FILE* out, double min_interval_s)
    : total_(total_steps),
      per_step_(examples_per_step),
      quiet_(quiet || out == nullptr),
      tty_(out != nullptr && ::isatty(::fileno(out))),
      out_(out),
      interval_(min_interval_s),
      start_(Clock::now()),
      last_print_(start_) {}

void Progress::update(int64_t step, double loss) {
  if (quiet_) return;
  const auto now = Clock::now();
  if (first_step_ < 0) first_step_ = step - 1;  // steps before this process started do not count
  const bool last = step >= total_;
  if (printed_ && !last && std::chrono::duration<double>(now - last_print_).count() < interval_) return;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const int64_t done = step - first_step_;
  const double steps_per_s = elapsed > 0 ? done / elapsed : 0;
  const double eta = steps_per_s > 0 ? (total_ - step) / steps_per_s : -1;
  const std::string line = format(step, total_, loss, steps_per_s * per_step_, eta);
  if (tty_) {
    std::fprintf(out_, "\r%-78s", line.c_str());
    dirty_ = true;
  } else {
    std::fprintf(out_, "%s\n", line.c_str());
  }
  std::fflush(out_);
  printed_ = true;
  last_print_ = now;
}

void Progress::finish() {
  if (quiet_ || !dirty_) return;
  std::fputc('\n', out_);
  std::fflush(out_);
  dirty_ = false;
}

}  // namespace terngrad::train
